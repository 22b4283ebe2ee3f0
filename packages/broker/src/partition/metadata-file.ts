/**
 * The standalone broker's `metadata.json`, read and checked (docs/architecture.md, "Metadata"). A file the
 * broker cannot take whole stops the start with a message naming the file and what is wrong with it
 * (which entry, which field): starting with a guess of the topics would lose every topic the guess
 * lacks, and a bare "Unexpected end of JSON input" told the operator neither the file nor the problem.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { TopicDefinition } from './metadata-store.js';

/** A deleted topic whose directory may still be on disk: removed at the next start (then dropped from the list). */
export interface DeletedTopic {
  name: string;
  topicId: string;
}

export interface MetadataFile {
  version: 1;
  topics: TopicDefinition[];
  /** The first producer id not yet reserved (absent: 0). */
  nextProducerId?: number;
  /**
   * Topics deleted whose directories may not be removed yet: written in the same replacement of the file
   * as the topic's removal, so a directory is deleted only when the metadata says its topic was (absent:
   * none, as in a file written before the list existed).
   */
  deleting?: DeletedTopic[];
}

/** The directory of the topics' partition directories, in the data directory. */
export const LOGS_DIR = 'logs';

/** A name as a topic directory's may be (`<name>~<topicId>`: no `~`, no `/`). */
const NAME_RE = /^[A-Za-z0-9._-]+$/;
const TOPIC_ID_RE = /^[A-Za-z0-9_-]{1,64}$/;

/** A topic's directory name under `logs/`: the id keeps a re-created topic from picking up a deleted one's files. */
export function topicDirName(t: { name: string; topicId: string }): string {
  return `${t.name}~${t.topicId}`;
}

/**
 * Whether an entry of `logs/` may be a topic's directory (`<name>~<id>`): only those count as topic data.
 * Anything else (`lost+found` of a file system mounted there, a dot file, a stray file) is not the
 * broker's and is left where it is.
 */
export async function isTopicDirEntry(logsDir: string, entry: string): Promise<boolean> {
  if (entry.startsWith('.') || !/.~[^~]+$/.test(entry)) return false;
  try {
    return (await fs.lstat(path.join(logsDir, entry))).isDirectory();
  } catch {
    return false;
  }
}

/** The broker refuses to start on this file; the message names it and the problem. */
export class MetadataFileError extends Error {
  constructor(file: string, problem: string) {
    super(`metadata file ${file} ${problem}; the broker does not start (docs/operations.md, "The metadata file")`);
    this.name = 'MetadataFileError';
  }
}

/**
 * `<dataDir>/producer-ids.json`: the first producer id not yet reserved, kept apart from metadata.json
 * and written before it on each reservation. A start takes the higher of the two, so a metadata.json put
 * back from an older copy cannot hand out ids already used (docs/architecture.md, "Producer ids").
 */
export const PRODUCER_IDS_FILE = 'producer-ids.json';

export function producerIdsText(next: number): string {
  return `${JSON.stringify({ version: 1, nextProducerId: next })}\n`;
}

/** The counter in `text`, the content of `file`; throws MetadataFileError naming what is wrong. */
export function parseProducerIdsFile(file: string, text: string): number {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    throw new MetadataFileError(file, `is not valid JSON (${(err as Error).message}, ${text.length} bytes): put back a copy, or remove it only if metadata.json is current`);
  }
  if (!isObject(v) || v.version !== 1 || !Number.isSafeInteger(v.nextProducerId) || (v.nextProducerId as number) < 0) {
    throw new MetadataFileError(file, `is not a producer id counter (found ${describe(v)}; {"version":1,"nextProducerId":<n>})`);
  }
  return v.nextProducerId as number;
}

/** Parses and checks `text`, the content of `file`; throws MetadataFileError naming what is wrong. */
export function parseMetadataFile(file: string, text: string): MetadataFile {
  if (text.trim() === '') throw new MetadataFileError(file, `is empty (${text.length} bytes): a truncated copy or a torn write; restore it from a backup`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new MetadataFileError(file, `is not valid JSON (${(err as Error).message}, ${text.length} bytes): restore it from a backup`);
  }
  if (!isObject(parsed)) throw new MetadataFileError(file, `does not hold a JSON object (found ${describe(parsed)})`);
  if (parsed.version !== 1) throw new MetadataFileError(file, `has an unsupported version (${describe(parsed.version)}; this broker reads 1)`);
  if (!Array.isArray(parsed.topics)) throw new MetadataFileError(file, `has no "topics" array (found ${describe(parsed.topics)})`);
  const topics: TopicDefinition[] = [];
  const names = new Set<string>();
  parsed.topics.forEach((entry: unknown, i: number) => {
    const problem = topicProblem(entry);
    const which = `topic entry ${i}${isObject(entry) && typeof entry.name === 'string' ? ` ("${entry.name.slice(0, 256)}")` : ''}`;
    if (problem) throw new MetadataFileError(file, `has an invalid ${which}: ${problem} (${describe(entry)})`);
    const t = entry as unknown as TopicDefinition;
    if (names.has(t.name)) throw new MetadataFileError(file, `has ${which} twice`);
    names.add(t.name);
    topics.push(t);
  });
  const next = parsed.nextProducerId ?? 0;
  if (!Number.isSafeInteger(next) || (next as number) < 0) throw new MetadataFileError(file, `has an invalid "nextProducerId" (${describe(next)}; a non-negative integer)`);
  const deleting: DeletedTopic[] = [];
  if (parsed.deleting !== undefined) {
    if (!Array.isArray(parsed.deleting)) throw new MetadataFileError(file, `has an invalid "deleting" (${describe(parsed.deleting)}; an array)`);
    parsed.deleting.forEach((d: unknown, i: number) => {
      if (!isObject(d) || !validName(d.name) || typeof d.topicId !== 'string' || !TOPIC_ID_RE.test(d.topicId)) {
        throw new MetadataFileError(file, `has an invalid "deleting" entry ${i} (${describe(d)}; {"name", "topicId"})`);
      }
      deleting.push({ name: d.name, topicId: d.topicId });
    });
  }
  return { version: 1, topics, nextProducerId: next as number, deleting };
}

/** What is wrong with a topic entry, or undefined when nothing is. */
function topicProblem(t: unknown): string | undefined {
  if (!isObject(t)) return 'not an object';
  if (!validName(t.name)) return '"name" is not a topic name';
  if (typeof t.topicId !== 'string' || !TOPIC_ID_RE.test(t.topicId)) return '"topicId" is missing or not an id (its directory is <name>~<topicId>)';
  if (!positiveInt(t.partitions)) return '"partitions" is not a positive integer';
  if (!positiveInt(t.replicationFactor)) return '"replicationFactor" is not a positive integer';
  if (typeof t.idempotent !== 'boolean') return '"idempotent" is not a boolean';
  if (t.partitioner !== 'hash_key' && t.partitioner !== 'round_robin') return '"partitioner" is not hash_key or round_robin';
  if (!limit(t.retentionHours)) return '"retentionHours" is not an integer of -1 or more';
  if (!limit(t.retentionBytes)) return '"retentionBytes" is not an integer of -1 or more';
  if (t.cleanupPolicy !== 'delete' && t.cleanupPolicy !== 'compact') return '"cleanupPolicy" is not delete or compact';
  if (t.deleteRetentionMs !== undefined && !(Number.isSafeInteger(t.deleteRetentionMs) && (t.deleteRetentionMs as number) >= 0)) return '"deleteRetentionMs" is not a non-negative integer';
  if (typeof t.createdAt !== 'number' || !Number.isFinite(t.createdAt)) return '"createdAt" is not a number';
  return undefined;
}

function validName(v: unknown): v is string {
  return typeof v === 'string' && NAME_RE.test(v) && v !== '.' && v !== '..';
}

function positiveInt(v: unknown): boolean {
  return Number.isSafeInteger(v) && (v as number) >= 1;
}

function limit(v: unknown): boolean {
  return Number.isSafeInteger(v) && (v as number) >= -1;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A short rendering of a value for a message. */
function describe(v: unknown): string {
  if (v === undefined) return 'nothing';
  const s = JSON.stringify(v);
  return s.length > 200 ? `${s.slice(0, 200)}...` : s;
}
