/**
 * What a Producer takes and reports back (messages, record metadata, events), and the pure functions that
 * turn a message into a wire record: checking, sizing, partitioning (docs/sdk.md, "Producer"; the frame
 * layout is docs/protocol.md's). No I/O: unit tested without a broker.
 */
import type { BatchRecord } from 'tributary-protocol/batch.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { partitionForKey } from 'tributary-protocol/partitioner.js';
import type { RecordHeader } from 'tributary-protocol/record.js';
import { nearestName } from 'tributary-protocol/names.js';
import type { ConnectionEvents } from './cluster.js';
import type { Complete } from './option-names.js';

export type HeaderValue = string | Buffer | Uint8Array;

/** Headers as an object (`{ traceId: 'abc' }`) or as a list (repeated keys allowed, order kept). */
export type ProducerHeaders = Record<string, HeaderValue> | Array<{ key: string; value: HeaderValue }>;

export interface ProducerMessage {
  /** Records with the same key land on the same partition (FNV-1a 64 of the key, like the broker). */
  key?: string | Buffer | Uint8Array | null;
  value: string | Buffer | Uint8Array;
  headers?: ProducerHeaders;
  /** Explicit partition; wins over the key. */
  partition?: number;
  /** Milliseconds since the epoch (or a Date); omitted or 0: the broker stamps the record on append. */
  timestamp?: number | Date;
}

const MESSAGE_FIELD_NAMES = ['key', 'value', 'headers', 'partition', 'timestamp'] as const;
const messageFieldsComplete: Complete<ProducerMessage, typeof MESSAGE_FIELD_NAMES> = true;
void messageFieldsComplete;
const MESSAGE_FIELDS: ReadonlySet<string> = new Set(MESSAGE_FIELD_NAMES);

export interface ProducerRecord {
  topic: string;
  messages: ProducerMessage[];
}

export interface RecordMetadata {
  topic: string;
  partition: number;
  /** The record's offset; -1 with `acks: 0` (the broker does not say where it appended). */
  offset: number;
}

export interface ProducerEvents extends ConnectionEvents {
  /** A batch was acknowledged. */
  send: { topic: string; partition: number; records: number; durationMs: number; baseOffset: number };
  /** A batch failed for good: every send() with a record in it rejects with `error`. */
  error: { error: Error; topic: string; partition: number; records: number };
  /** A batch attempt failed with a retriable error and will be sent again after `delayMs`. */
  retry: { error: Error; topic: string; partition: number; attempt: number; delayMs: number };
}

// ---------------------------------------------------------------------------------------------------
// Partitioning and sizing (pure functions, unit tested without a broker)
// ---------------------------------------------------------------------------------------------------

/**
 * The partition of a record: explicit, else FNV-1a 64 of the key modulo the partition count (the broker's
 * own partitioner, so a keyed record lands where the broker would put it), else round-robin.
 * An empty key is no key (the wire cannot tell them apart).
 */
export function choosePartition(key: Buffer | null, explicit: number | undefined, partitions: number, nextRoundRobin: () => number): number {
  if (explicit !== undefined) return explicit;
  if (key && key.length > 0) return partitionForKey(key, partitions);
  return nextRoundRobin() % partitions;
}

/** Fixed bytes of a batch frame besides its records: magic, topic, partition, acks, flags, sequences, count. */
export function batchOverhead(topic: string): number {
  return 2 + 2 + Buffer.byteLength(topic, 'utf8') + 4 + 1 + 3 + 1 + 16 + 4;
}

/** Bytes a record takes in a batch frame (with record_extensions_v1, which the SDK always asks for). */
export function recordSize(r: Pick<BatchRecord, 'key' | 'value' | 'headers'>): number {
  let n = RECORD_BASE_BYTES + (r.key?.length ?? 0) + r.value.length;
  for (const h of r.headers) n += 2 + Buffer.byteLength(h.key, 'utf8') + 4 + h.value.length;
  return n;
}

/** recordSize of a record without key, value and headers (a producer id, when there is one, comes on top). */
export const RECORD_BASE_BYTES = 8 + 8 + 2 + 2 + 8 + 4 + 8 + 1 + 2;

function toBuffer(v: HeaderValue): Buffer {
  if (typeof v === 'string') return Buffer.from(v, 'utf8');
  return Buffer.isBuffer(v) ? v : Buffer.from(v.buffer, v.byteOffset, v.byteLength);
}

export function badMessage(index: number, reason: string): TributaryError {
  return new TributaryError('invalid_parameter', { param: `messages[${index}]`, reason }, `invalid message ${index}: ${reason}`);
}

/**
 * Checks a message as toBatchRecord does (same checks, same order, same errors) without converting it,
 * and returns the recordSize of the record it becomes. The producer's send() checks every message with
 * it, then encodes them straight into their batch frames (docs/sdk.md, "Producer").
 */
export function checkMessage(m: ProducerMessage, index: number): number {
  if (!m || typeof m !== 'object') throw badMessage(index, 'must be an object');
  for (const k in m) {
    // A misspelt field (`parition: 2`) would silently send the record elsewhere: refuse it. (Compared one
    // by one: cheaper per record than a Set lookup; MESSAGE_FIELD_NAMES lists the same names.)
    if (k !== 'value' && k !== 'key' && k !== 'partition' && k !== 'headers' && k !== 'timestamp') {
      const near = nearestName(k, MESSAGE_FIELDS);
      throw badMessage(index, `unknown field ${k}${near ? ` (did you mean ${near}?)` : ''}`);
    }
  }
  const v = m.value;
  let n = RECORD_BASE_BYTES;
  if (typeof v === 'string') n += Buffer.byteLength(v, 'utf8');
  else if (v instanceof Uint8Array) n += v.byteLength;
  else throw badMessage(index, 'value must be a string, Buffer or Uint8Array');
  const key = m.key;
  if (key !== undefined && key !== null) {
    let kl: number;
    if (typeof key === 'string') kl = Buffer.byteLength(key, 'utf8');
    else if (key instanceof Uint8Array) kl = key.byteLength;
    else throw badMessage(index, 'key must be a string, Buffer or Uint8Array');
    if (kl > 0xffff) throw badMessage(index, 'key longer than 65535 bytes');
    n += kl;
  }
  if (m.timestamp !== undefined) messageTimestamp(m.timestamp, index);
  if (m.headers !== undefined) n += checkHeaders(m.headers, index);
  return n;
}

/** A checked message's timestamp in ms (0: none, the broker stamps the record). */
export function messageTimestamp(t: number | Date | undefined, index: number): number {
  if (t === undefined) return 0;
  const ms = t instanceof Date ? t.getTime() : t;
  if (typeof ms !== 'number' || !Number.isSafeInteger(ms) || ms < 0) throw badMessage(index, 'timestamp must be a non-negative integer (ms) or a valid Date');
  return ms;
}

function headerEntries(headers: ProducerHeaders, index: number): Array<[string, unknown]> {
  if (headers === null || typeof headers !== 'object') throw badMessage(index, 'headers must be an object or an array');
  const entries: Array<[string, unknown]> = Array.isArray(headers) ? headers.map((h) => [h?.key, h?.value]) : Object.entries(headers);
  if (entries.length > 0xffff) throw badMessage(index, 'more than 65535 headers');
  return entries;
}

/** Checks a message's headers; returns the bytes they take in the record. */
function checkHeaders(headers: ProducerHeaders, index: number): number {
  let n = 0;
  for (const [k, v] of headerEntries(headers, index)) {
    if (typeof k !== 'string') throw badMessage(index, 'header keys must be strings');
    const kl = Buffer.byteLength(k, 'utf8');
    if (kl > 0xffff) throw badMessage(index, 'header key longer than 65535 bytes');
    if (typeof v !== 'string' && !(v instanceof Uint8Array)) throw badMessage(index, `header ${k} must be a string, Buffer or Uint8Array`);
    n += 2 + kl + 4 + (typeof v === 'string' ? Buffer.byteLength(v, 'utf8') : v.byteLength);
  }
  return n;
}

/** A checked message's headers as wire headers. */
export function messageHeaders(headers: ProducerHeaders, index: number): RecordHeader[] {
  return headerEntries(headers, index).map(([k, v]) => ({ key: k, value: toBuffer(v as HeaderValue) }));
}

/** A checked message's key as bytes; null for none (an empty key is no key: the wire cannot tell them apart). */
export function messageKey(key: ProducerMessage['key']): Uint8Array | null {
  if (key === undefined || key === null) return null;
  const k = typeof key === 'string' ? Buffer.from(key, 'utf8') : key;
  return k.length === 0 ? null : k;
}

/**
 * Where the run of plain messages (no key, headers or timestamp) starting at `from` ends: the messages up
 * to `to` going where message `from` goes (the same explicit partition, or none). The producer appends
 * such a run in one call (RecordAccumulator.appendRun).
 */
export function plainRunEnd(messages: readonly ProducerMessage[], from: number, to: number): number {
  const p = messages[from]!.partition;
  let j = from + 1;
  while (j < to) {
    const m = messages[j]!;
    if (m.partition !== p || m.key != null || m.headers !== undefined || m.timestamp !== undefined) break;
    j++;
  }
  return j;
}

/**
 * A checked message as send() queues it after a wait: its own object with the key, value, partition and
 * timestamp it had and its headers as a list, so a caller changing the message after send() returned
 * changes nothing that is queued.
 */
export function snapshotMessage(m: ProducerMessage, index: number): ProducerMessage {
  const copy: ProducerMessage = { value: m.value };
  if (m.key !== undefined) copy.key = m.key;
  if (m.partition !== undefined) copy.partition = m.partition;
  if (m.timestamp !== undefined) copy.timestamp = messageTimestamp(m.timestamp, index);
  if (m.headers !== undefined) copy.headers = messageHeaders(m.headers, index);
  return copy;
}

/** A message checked and converted to a wire record (offset and sequence are the broker's business). */
const NO_HEADERS: RecordHeader[] = Object.freeze([]) as unknown as RecordHeader[];

export function toBatchRecord(m: ProducerMessage, index: number): BatchRecord {
  checkMessage(m, index);
  const k = messageKey(m.key);
  const key = k === null ? null : toBuffer(k);
  // One shared empty list for the common case: nothing appends to a record's headers after this.
  const headers = m.headers === undefined ? NO_HEADERS : messageHeaders(m.headers, index);
  return { offset: 0, sequence: 0, producerId: '', key, epoch: -1, value: toBuffer(m.value), timestamp: messageTimestamp(m.timestamp, index), attributes: 0, headers };
}
