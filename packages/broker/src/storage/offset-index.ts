/**
 * Sparse offset index of one segment: (relativeOffset u32, filePosition u32) pairs, one per
 * `intervalBytes` of log data. The index is kept in memory and persisted as `<base>.index` together with
 * the segment's metadata; the file is a cache that recovery validates and rebuilds when it disagrees
 * with the log.
 *
 * File layout (big-endian): magic u32 'TIDX', version u16, flags u16, baseOffset u64, nextOffset u64,
 * maxTimestamp i64, logSize u64, createdMs i64, intervalBytes u32, entryCount u32, entries, crc32c u32
 * over everything before it.
 */
import { open, rename } from 'node:fs/promises';
import { readSmallFile, withFileSlot } from './atomic-file.js';
import { crc32c } from './crc32c.js';
import { r64n, w64 } from 'tributary-protocol/record-batch/layout.js';

export const DEFAULT_INDEX_INTERVAL_BYTES = 4096;

const MAGIC = 0x54494458; // 'TIDX'
const VERSION = 1;
const HEADER_BYTES = 4 + 2 + 2 + 8 + 8 + 8 + 8 + 8 + 4 + 4;
const FLAG_SYNCED = 0x1;
const FLAG_COMPACTED = 0x2;

export interface IndexEntry {
  /** Absolute offset of the indexed record. */
  offset: number;
  /** Byte position of that record in the segment file. */
  position: number;
}

export class OffsetIndex {
  readonly baseOffset: number;
  readonly intervalBytes: number;
  private rel: Uint32Array;
  private pos: Uint32Array;
  private count = 0;
  /** Position of the last indexed record (0 = segment start, which is implicitly indexed). */
  private lastIndexedPosition = 0;

  constructor(baseOffset: number, intervalBytes: number = DEFAULT_INDEX_INTERVAL_BYTES) {
    this.baseOffset = baseOffset;
    this.intervalBytes = Math.max(1, Math.floor(intervalBytes));
    this.rel = new Uint32Array(16);
    this.pos = new Uint32Array(16);
  }

  get length(): number {
    return this.count;
  }

  /** Entry i (0-based). */
  entry(i: number): IndexEntry {
    return { offset: this.baseOffset + this.rel[i], position: this.pos[i] };
  }

  last(): IndexEntry | null {
    return this.count ? this.entry(this.count - 1) : null;
  }

  /**
   * Called for every record appended (or scanned) at `position`; adds an entry once at least
   * intervalBytes were written since the last entry. The same rule on append and on rebuild keeps a
   * rebuilt index identical to the live one.
   */
  onRecord(offset: number, position: number): void {
    if (position - this.lastIndexedPosition >= this.intervalBytes) this.append(offset, position);
  }

  append(offset: number, position: number): void {
    const rel = offset - this.baseOffset;
    if (rel < 0 || rel > 0xffffffff || position < 0 || position > 0xffffffff) {
      throw new RangeError(`index entry out of range: offset=${offset} position=${position}`);
    }
    if (this.count > 0 && (rel <= this.rel[this.count - 1] || position <= this.pos[this.count - 1])) {
      throw new RangeError(`index entry not increasing: offset=${offset} position=${position}`);
    }
    if (this.count === this.rel.length) {
      const n = this.rel.length * 2;
      const r = new Uint32Array(n);
      r.set(this.rel);
      const p = new Uint32Array(n);
      p.set(this.pos);
      this.rel = r;
      this.pos = p;
    }
    this.rel[this.count] = rel;
    this.pos[this.count] = position;
    this.count++;
    this.lastIndexedPosition = position;
  }

  /** Greatest entry with offset <= `offset`; the segment start when there is none. */
  lookup(offset: number): IndexEntry {
    const rel = offset - this.baseOffset;
    let lo = 0;
    let hi = this.count - 1;
    let found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if (this.rel[mid] <= rel) {
        found = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    return found < 0 ? { offset: this.baseOffset, position: 0 } : this.entry(found);
  }

  /** Drops entries for offsets >= `offset` (log truncation). */
  truncateToOffset(offset: number): void {
    const rel = offset - this.baseOffset;
    while (this.count > 0 && this.rel[this.count - 1] >= rel) this.count--;
    this.lastIndexedPosition = this.count ? this.pos[this.count - 1] : 0;
  }

  clear(): void {
    this.count = 0;
    this.lastIndexedPosition = 0;
  }
}

/** Segment metadata stored in the index file header. */
export interface IndexFileMeta {
  baseOffset: number;
  nextOffset: number;
  maxTimestamp: number;
  logSize: number;
  createdMs: number;
  /** The log bytes covered by logSize were fsynced before this file was written. */
  synced: boolean;
  /** Rewritten by compaction: offsets may have gaps, also up to nextOffset. Not derivable from the log. */
  compacted?: boolean;
}


export function serializeIndex(meta: IndexFileMeta, index: OffsetIndex): Buffer {
  const n = index.length;
  const buf = Buffer.alloc(HEADER_BYTES + n * 8 + 4);
  let p = 0;
  buf.writeUInt32BE(MAGIC, p);
  buf.writeUInt16BE(VERSION, p + 4);
  buf.writeUInt16BE((meta.synced ? FLAG_SYNCED : 0) | (meta.compacted ? FLAG_COMPACTED : 0), p + 6);
  p += 8;
  w64(buf, p, meta.baseOffset);
  w64(buf, p + 8, meta.nextOffset);
  w64(buf, p + 16, meta.maxTimestamp);
  w64(buf, p + 24, meta.logSize);
  w64(buf, p + 32, meta.createdMs);
  p += 40;
  buf.writeUInt32BE(index.intervalBytes, p);
  buf.writeUInt32BE(n, p + 4);
  p += 8;
  for (let i = 0; i < n; i++) {
    const e = index.entry(i);
    buf.writeUInt32BE(e.offset - index.baseOffset, p);
    buf.writeUInt32BE(e.position, p + 4);
    p += 8;
  }
  buf.writeUInt32BE(crc32c(buf.subarray(0, p)), p);
  return buf;
}

/** Parses an index file; null when it is malformed or fails its CRC (the caller then rebuilds). */
export function parseIndex(buf: Buffer, intervalBytes?: number): { meta: IndexFileMeta; index: OffsetIndex } | null {
  try {
    if (buf.length < HEADER_BYTES + 4) return null;
    if (buf.readUInt32BE(0) !== MAGIC || buf.readUInt16BE(4) !== VERSION) return null;
    const n = buf.readUInt32BE(HEADER_BYTES - 4);
    if (buf.length !== HEADER_BYTES + n * 8 + 4) return null;
    const body = buf.length - 4;
    if (buf.readUInt32BE(body) !== crc32c(buf.subarray(0, body))) return null;
    const meta: IndexFileMeta = {
      synced: (buf.readUInt16BE(6) & FLAG_SYNCED) !== 0,
      baseOffset: r64n(buf, 8),
      nextOffset: r64n(buf, 16),
      maxTimestamp: r64n(buf, 24),
      logSize: r64n(buf, 32),
      createdMs: r64n(buf, 40),
    };
    if ((buf.readUInt16BE(6) & FLAG_COMPACTED) !== 0) meta.compacted = true;
    for (const v of [meta.baseOffset, meta.nextOffset, meta.logSize]) if (!Number.isSafeInteger(v) || v < 0) return null;
    if (meta.nextOffset < meta.baseOffset) return null;
    // New entries follow the configured interval even if the file was written with another one.
    const index = new OffsetIndex(meta.baseOffset, intervalBytes ?? buf.readUInt32BE(48));
    let p = HEADER_BYTES;
    for (let i = 0; i < n; i++) {
      index.append(meta.baseOffset + buf.readUInt32BE(p), buf.readUInt32BE(p + 4));
      p += 8;
    }
    return { meta, index };
  } catch {
    // append() rejects non-increasing entries: an inconsistent file.
    return null;
  }
}

/**
 * Writes the index file. In place by default, and not fsynced (under every --flush mode): the file is a
 * cache that open checks (CRC, the log size it vouches for, the records after its last entry), so a torn,
 * lost or stale one costs a scan, never a record; `synced` is set only after an fsync of the log it covers.
 * A temp file, an fsync and a rename for each would put an fsync per roll back into --flush os
 * (docs/architecture.md, "Storage"). With `atomicVia` it goes to that temp path, is fsynced and renamed
 * over `path` (compacted segments: their flag cannot be rebuilt from the log).
 */
export function writeIndexFile(path: string, meta: IndexFileMeta, index: OffsetIndex, atomicVia?: string): Promise<void> {
  // Many partitions write their indexes at once (rolls, dormant partitions' first appends, a shutdown).
  return withFileSlot(() => writeIndex(path, meta, index, atomicVia));
}

async function writeIndex(path: string, meta: IndexFileMeta, index: OffsetIndex, atomicVia?: string): Promise<void> {
  const fh = await open(atomicVia ?? path, 'w');
  try {
    const buf = serializeIndex(meta, index);
    let done = 0;
    while (done < buf.length) {
      const { bytesWritten } = await fh.write(buf, done, buf.length - done, done);
      done += bytesWritten;
    }
    if (atomicVia) await fh.sync();
  } finally {
    await fh.close();
  }
  if (atomicVia) await rename(atomicVia, path);
}

/** Reads and parses an index file; null when missing or invalid. */
export async function readIndexFile(
  path: string,
  intervalBytes?: number,
): Promise<{ meta: IndexFileMeta; index: OffsetIndex } | null> {
  let buf: Buffer;
  try {
    buf = await readSmallFile(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  return parseIndex(buf, intervalBytes);
}
