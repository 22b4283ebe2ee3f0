/**
 * The entries of the broker's journal files (journal.ts; docs/architecture.md, "The journal"), one after
 * another, big-endian:
 *
 *   length u32 (of what follows it) | crc u32 (CRC-32C of what follows it) | kind u8 | key length u16 | key
 *   write:    from u64 (the log end before it) | first u64 | last u64 | records u32 | the bytes the log
 *             wrote to its segment (its stored units)
 *   truncate: offset u64 (the log dropped every record >= offset)
 *   reset:    (the log's files went: released or destroyed)
 *
 * The key names the log: its directory, relative to the data directory. A file is read up to its first
 * entry that is cut or fails its CRC: entries are appended in order and every acknowledged one was
 * fsynced, so whatever follows a bad one was never acknowledged.
 */
import { crc32c } from './crc32c.js';

export type JournalEntry =
  | { kind: 'write'; key: string; from: number; first: number; last: number; count: number; bytes: Buffer }
  | { kind: 'truncate'; key: string; offset: number }
  | { kind: 'reset'; key: string };

const KIND_WRITE = 1;
const KIND_TRUNCATE = 2;
const KIND_RESET = 3;
/** length and crc. */
const FRAME_BYTES = 8;
/** A write's from, first, last and count. */
const WRITE_FIELDS = 28;
/** The largest entry a reader accepts (a write is at most one group write of a log, far below it). */
export const MAX_ENTRY_BYTES = 256 * 1024 * 1024;
export const MAX_KEY_BYTES = 0xffff;

function writeU64(b: Buffer, at: number, v: number): void {
  b.writeUInt32BE(Math.floor(v / 0x100000000), at);
  b.writeUInt32BE(v >>> 0, at + 4);
}

function readU64(b: Buffer, at: number): number {
  return b.readUInt32BE(at) * 0x100000000 + b.readUInt32BE(at + 4);
}

/** A log's name in the journal, encoded once: every write of the log carries it. */
export interface JournalKey {
  readonly name: string;
  readonly bytes: Buffer;
}

export function journalKey(name: string): JournalKey {
  const bytes = Buffer.from(name, 'utf8');
  if (bytes.length > MAX_KEY_BYTES) throw new RangeError(`journal key too long: ${name}`);
  return { name, bytes };
}

/** An entry's head (everything but a write's bytes), its length and CRC left for seal(). */
function head(kind: number, key: JournalKey, fields: number): Buffer {
  const keyBytes = key.bytes;
  const b = Buffer.allocUnsafe(FRAME_BYTES + 3 + keyBytes.length + fields);
  b[FRAME_BYTES] = kind;
  b.writeUInt16BE(keyBytes.length, FRAME_BYTES + 1);
  keyBytes.copy(b, FRAME_BYTES + 3);
  return b;
}

/** Fills in the head's length and CRC over the rest of the head and then `payload`. */
function seal(h: Buffer, payload: readonly Buffer[]): Buffer[] {
  let crc = crc32c(h.subarray(FRAME_BYTES));
  let len = h.length - FRAME_BYTES;
  for (const p of payload) {
    crc = crc32c(p, crc);
    len += p.length;
  }
  h.writeUInt32BE(len, 0);
  h.writeUInt32BE(crc >>> 0, 4);
  return [h, ...payload];
}

/** A write entry: the buffers to write, in order (`bytes` are not copied). */
export function encodeWrite(key: JournalKey, from: number, first: number, last: number, count: number, bytes: readonly Buffer[]): Buffer[] {
  const h = head(KIND_WRITE, key, WRITE_FIELDS);
  const at = h.length - WRITE_FIELDS;
  writeU64(h, at, from);
  writeU64(h, at + 8, first);
  writeU64(h, at + 16, last);
  h.writeUInt32BE(count, at + 24);
  return seal(h, bytes);
}

export function encodeTruncate(key: JournalKey, offset: number): Buffer[] {
  const h = head(KIND_TRUNCATE, key, 8);
  writeU64(h, h.length - 8, offset);
  return seal(h, []);
}

export function encodeReset(key: JournalKey): Buffer[] {
  return seal(head(KIND_RESET, key, 0), []);
}

/**
 * The entries of one journal file's bytes, up to the first one that is cut or damaged; `end` is where the
 * good ones end (the rest never reached the disk whole, so it was never acknowledged). A write's bytes are
 * views into `buf`.
 */
export function decodeEntries(buf: Buffer): { entries: JournalEntry[]; end: number } {
  const entries: JournalEntry[] = [];
  let p = 0;
  while (p + FRAME_BYTES <= buf.length) {
    const len = buf.readUInt32BE(p);
    const start = p + FRAME_BYTES;
    const end = start + len;
    if (len < 3 || len > MAX_ENTRY_BYTES || end > buf.length) break;
    if (crc32c(buf.subarray(start, end)) >>> 0 !== buf.readUInt32BE(p + 4)) break;
    const e = decodeEntry(buf, start, end);
    if (e === null) break;
    entries.push(e);
    p = end;
  }
  return { entries, end: p };
}

function decodeEntry(buf: Buffer, start: number, end: number): JournalEntry | null {
  const kind = buf[start];
  const keyLen = buf.readUInt16BE(start + 1);
  const at = start + 3 + keyLen;
  if (at > end) return null;
  const key = buf.toString('utf8', start + 3, at);
  if (kind === KIND_WRITE) {
    if (at + WRITE_FIELDS > end) return null;
    const from = readU64(buf, at);
    const first = readU64(buf, at + 8);
    const last = readU64(buf, at + 16);
    const count = buf.readUInt32BE(at + 24);
    if (![from, first, last].every(Number.isSafeInteger) || from > first || last < first || count < 1) return null;
    return { kind: 'write', key, from, first, last, count, bytes: buf.subarray(at + WRITE_FIELDS, end) };
  }
  if (kind === KIND_TRUNCATE) {
    if (at + 8 !== end) return null;
    const offset = readU64(buf, at);
    return Number.isSafeInteger(offset) ? { kind: 'truncate', key, offset } : null;
  }
  if (kind === KIND_RESET) return at === end ? { kind: 'reset', key } : null;
  return null;
}
