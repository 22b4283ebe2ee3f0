/**
 * The SDK producer's in-place produce batch frame (docs/sdk.md "Producer"); the frame format is
 * docs/protocol.md section 5, as encodeBatch writes it.
 */
import { type Acks, BATCH_MAGIC } from './batch.js';
import type { RecordHeader } from './record.js';
import { FLAG_IDEMPOTENT, bad, r32u, skipExtensions, w16, w32, writeHeaders, writeI64, writeU64, writeUtf8 } from './batch-bytes.js';

const EMPTY = Buffer.alloc(0);

/** Bytes of a record_extensions_v1 record besides its producer id, key, value and headers (offset, sequence, lengths, epoch, timestamp, attributes). */
export const RECORD_FIXED_BYTES = 8 + 8 + 2 + 2 + 8 + 4 + 8 + 1 + 2;

/**
 * A produce batch frame built in place while records are appended (the SDK producer's accumulator,
 * docs/sdk.md "Producer"): one growing buffer holds the frame's 4-byte length, the batch header and the
 * records in exactly the bytes encodeBatch writes with record_extensions_v1, so a send costs no
 * per-record work and the batch keeps no record objects. Offsets are 0; sequence 0 and epoch -1 until
 * setNumbers() (idempotent batches, renumbered in place on a retry). Not for transactional batches.
 */
export class BatchFrameBuilder {
  private buf: Buffer;
  /** Where the records start (after the 4-byte frame length and the header). */
  readonly recordsAt: number;
  private end: number;
  private readonly flagsAt: number;
  count = 0;
  /** Some record carries headers or a timestamp: a connection without record_extensions_v1 cannot take it. */
  extended = false;

  /**
   * `producerId`: the UTF-8 bytes stamped on every record (empty for a plain producer). `capacity`: the
   * expected frame size; the buffer grows past it by doubling, though not past `limit` while the frame
   * fits in it (the largest frame expected, so a full batch does not end in a buffer twice its size).
   * `reuse`: a spare buffer to write into, taken when it holds `capacity`.
   */
  constructor(
    topic: string,
    partition: number,
    acks: Acks,
    private readonly producerId: Uint8Array,
    capacity: number,
    reuse?: Buffer,
    private readonly limit = Number.POSITIVE_INFINITY,
  ) {
    const topicLen = Buffer.byteLength(topic, 'utf8');
    if (topicLen > 0xffff) throw bad('topic longer than 65535 bytes');
    if (producerId.length > 0xffff) throw bad('producer id too long');
    const acksLen = acks.length;
    this.flagsAt = 4 + 2 + 2 + topicLen + 4 + 1 + acksLen;
    this.recordsAt = this.flagsAt + 1 + 16 + 4;
    const buf = reuse && reuse.length >= Math.max(capacity, this.recordsAt) ? reuse : Buffer.allocUnsafe(Math.max(capacity, this.recordsAt));
    this.buf = buf;
    w16(buf, 4, BATCH_MAGIC);
    w16(buf, 6, topicLen);
    const at = 8 + writeUtf8(buf, topic, 8);
    w32(buf, at, partition);
    buf[at + 4] = acksLen;
    buf.write(acks, at + 5, 'ascii');
    this.end = this.recordsAt;
  }

  /** Bytes the buffer holds before it must grow. */
  get capacity(): number {
    return this.buf.length;
  }

  /** Frame bytes written so far (length prefix, header and records). */
  get length(): number {
    return this.end;
  }

  /** Gives up the buffer (for a later builder to reuse) once the frame is no longer needed; the builder is empty after. */
  detach(): Buffer {
    const buf = this.buf;
    this.buf = EMPTY;
    this.end = 0;
    this.count = 0;
    return buf;
  }

  /** Encoded bytes of a record with this builder's producer id: RECORD_FIXED_BYTES + id + key + value + headers. */
  recordBytes(keyLen: number, valueLen: number, headers: readonly RecordHeader[] | undefined): number {
    let n = RECORD_FIXED_BYTES + this.producerId.length + keyLen + valueLen;
    if (headers) for (let h = 0; h < headers.length; h++) n += 2 + Buffer.byteLength(headers[h]!.key, 'utf8') + 4 + headers[h]!.value.length;
    return n;
  }

  private reserve(n: number): Buffer {
    const need = this.end + n;
    if (need <= this.buf.length) return this.buf;
    let size = Math.max(need, this.buf.length * 2);
    // Past half the limit straight to it: a buffer a little short of the limit would grow (copy) once more.
    if (need <= this.limit && size * 2 > this.limit) size = this.limit;
    const grown = Buffer.allocUnsafe(size);
    this.buf.copy(grown, 0, 0, this.end);
    this.buf = grown;
    return grown;
  }

  /** A record's offset and sequence (0: setNumbers stamps sequences) and producer id, at the frame's end; returns where its key length goes. */
  private writeHead(buf: Buffer): number {
    const pid = this.producerId;
    const at = this.end;
    w32(buf, at, 0);
    w32(buf, at + 4, 0);
    w32(buf, at + 8, 0);
    w32(buf, at + 12, 0);
    w16(buf, at + 16, pid.length);
    if (pid.length > 0) buf.set(pid, at + 18);
    return at + 18 + pid.length;
  }

  /**
   * Appends one record. `value` is bytes, or a string written as UTF-8 whose byte length `valueLen` the
   * caller measured (Buffer.byteLength); for bytes `valueLen` is their length. The caller checked the
   * limits (key and header keys <= 65535 bytes, at most 65535 headers) and that `timestamp` is a safe
   * non-negative integer.
   */
  append(key: Uint8Array | null, value: Uint8Array | string, valueLen: number, timestamp: number, headers: readonly RecordHeader[] | undefined): void {
    const pid = this.producerId;
    const keyLen = key === null ? 0 : key.length;
    const hc = headers === undefined ? 0 : headers.length;
    const size = hc === 0 ? RECORD_FIXED_BYTES + pid.length + keyLen + valueLen : this.recordBytes(keyLen, valueLen, headers);
    const buf = this.reserve(size);
    let at = this.writeHead(buf);
    w16(buf, at, keyLen);
    at += 2;
    if (keyLen > 0) {
      buf.set(key!, at);
      at += keyLen;
    }
    // epoch -1 (setNumbers stamps the idempotent epoch)
    w32(buf, at, -1);
    w32(buf, at + 4, -1);
    w32(buf, at + 8, valueLen);
    at = writeValue(buf, at + 12, value, valueLen);
    if (timestamp === 0) {
      w32(buf, at, 0);
      w32(buf, at + 4, 0);
    } else writeI64(buf, timestamp, at);
    buf[at + 8] = 0;
    w16(buf, at + 9, hc);
    at += 11;
    if (timestamp > 0 || hc > 0) this.extended = true;
    if (hc > 0) at = writeHeaders(buf, at, headers!, hc);
    this.end = at;
    this.count++;
  }

  /**
   * append(null, value, valueLen, 0, undefined), the record a plain message becomes (no key, timestamp or
   * headers), without the branches for those: the SDK producer appends runs of them (docs/sdk.md "Producer").
   */
  appendValue(value: Uint8Array | string, valueLen: number): void {
    const buf = this.reserve(RECORD_FIXED_BYTES + this.producerId.length + valueLen);
    let at = this.writeHead(buf);
    // key length 0, epoch -1, value length
    buf[at] = 0;
    buf[at + 1] = 0;
    w32(buf, at + 2, -1);
    w32(buf, at + 6, -1);
    w32(buf, at + 10, valueLen);
    at = writeValue(buf, at + 14, value, valueLen);
    // timestamp 0, attributes 0, header count 0
    w32(buf, at, 0);
    w32(buf, at + 4, 0);
    buf[at + 8] = 0;
    buf[at + 9] = 0;
    buf[at + 10] = 0;
    this.end = at + 11;
    this.count++;
  }

  /**
   * The encoded bytes of records `from` .. `from + count - 1` (a view of this builder's buffer, valid until
   * its next change): appendEncoded() of them into a builder of the same producer id copies them as they are.
   */
  encodedRecords(from: number, count: number): Buffer {
    const buf = this.buf;
    let at = this.recordsAt;
    let start = at;
    for (let i = 0; i < from + count; i++) {
      if (i === from) start = at;
      at += 18 + ((buf[at + 16]! << 8) | buf[at + 17]!);
      at += 2 + ((buf[at]! << 8) | buf[at + 1]!);
      at += 12 + r32u(buf, at + 8);
      at = skipExtensions(buf, at);
    }
    return buf.subarray(start, at);
  }

  /** Appends `count` records encoded by encodedRecords() of a builder with this producer id (`extended`: that builder's). */
  appendEncoded(records: Buffer, count: number, extended: boolean): void {
    const buf = this.reserve(records.length);
    records.copy(buf, this.end);
    this.end += records.length;
    this.count += count;
    if (extended) this.extended = true;
  }

  /** Stamps record i with epoch `epoch` and sequence `firstSequence + i` (an idempotent batch; again on renumbering). */
  setNumbers(epoch: number, firstSequence: number): void {
    const buf = this.buf;
    let at = this.recordsAt;
    for (let i = 0; i < this.count; i++) {
      writeU64(buf, firstSequence + i, at + 8);
      at += 18 + ((buf[at + 16]! << 8) | buf[at + 17]!);
      at += 2 + ((buf[at]! << 8) | buf[at + 1]!);
      writeI64(buf, epoch, at);
      at += 12 + r32u(buf, at + 8);
      at = skipExtensions(buf, at);
    }
  }

  /**
   * The frame, length prefix included, with the header completed: encodeFrame(encodeBatch(...)) of these
   * records with `extensions`. Without extensions (a broker that did not negotiate them) it is a copy
   * whose records lack their timestamp, attributes and header count; the caller refuses an `extended`
   * batch there. With extensions the frame is this builder's buffer: valid until the next append,
   * setNumbers or detach.
   */
  frame(idempotent: boolean, firstSequence: number, lastSequence: number, extensions: boolean): Buffer {
    const buf = this.buf;
    const at = this.flagsAt;
    buf[at] = idempotent ? FLAG_IDEMPOTENT : 0;
    writeU64(buf, firstSequence, at + 1);
    writeU64(buf, lastSequence, at + 9);
    w32(buf, at + 17, this.count);
    if (extensions) {
      w32(buf, 0, this.end - 4);
      return buf.subarray(0, this.end);
    }
    // Each record loses its last 11 bytes (timestamp, attributes, header count 0).
    const out = Buffer.allocUnsafe(this.end - 11 * this.count);
    w32(out, 0, out.length - 4);
    buf.copy(out, 4, 4, this.recordsAt);
    let to = this.recordsAt;
    let from = this.recordsAt;
    for (let i = 0; i < this.count; i++) {
      const start = from;
      from += 18 + ((buf[from + 16]! << 8) | buf[from + 17]!);
      from += 2 + ((buf[from]! << 8) | buf[from + 1]!);
      from += 12 + r32u(buf, from + 8);
      to += buf.copy(out, to, start, from);
      from = skipExtensions(buf, from);
    }
    return out;
  }
}

/** A record's value at `at` (a string as UTF-8 of the measured `valueLen` bytes); returns where it ends. */
function writeValue(buf: Buffer, at: number, value: Uint8Array | string, valueLen: number): number {
  if (typeof value === 'string') {
    if (valueLen > 0 && buf.write(value, at, valueLen, 'utf8') !== valueLen) throw new Error('record value: UTF-8 length mismatch');
  } else if (valueLen > 0) buf.set(value, at);
  return at + valueLen;
}
