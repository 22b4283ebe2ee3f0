/** Below this a byte run is copied: a separate write costs more than the copy. */
export const REF_MIN_BYTES = 1024;

/**
 * A growing output buffer for the Kafka primitives. Range checks are the codec's job (it knows the field
 * for the error); this only writes. Large record runs are kept by reference (`ref`), so a Fetch response can
 * go to the socket as parts (`finishParts`) without copying the stored batches.
 */
export class KafkaWriter {
  private buf: Buffer;
  private pos = 0;
  /** Completed parts before `buf`: filled head slices and referenced record runs. */
  private parts: Buffer[] = [];
  private partsBytes = 0;

  constructor(initial = 256) {
    this.buf = Buffer.allocUnsafe(initial);
  }

  private room(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.pos + n) size *= 2;
    const next = Buffer.allocUnsafe(size);
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }

  int8(v: number): void {
    this.room(1);
    this.buf.writeInt8(v, this.pos++);
  }

  bool(v: boolean): void {
    this.int8(v ? 1 : 0);
  }

  int16(v: number): void {
    this.room(2);
    this.pos = this.buf.writeInt16BE(v, this.pos);
  }

  uint16(v: number): void {
    this.room(2);
    this.pos = this.buf.writeUInt16BE(v, this.pos);
  }

  int32(v: number): void {
    this.room(4);
    this.pos = this.buf.writeInt32BE(v, this.pos);
  }

  uint32(v: number): void {
    this.room(4);
    this.pos = this.buf.writeUInt32BE(v, this.pos);
  }

  int64(v: bigint): void {
    this.room(8);
    this.pos = this.buf.writeBigInt64BE(v, this.pos);
  }

  float64(v: number): void {
    this.room(8);
    this.pos = this.buf.writeDoubleBE(v, this.pos);
  }

  uvarint(v: number): void {
    this.room(5);
    let u = v >>> 0;
    while (u >= 0x80) {
      this.buf[this.pos++] = (u & 0x7f) | 0x80;
      u >>>= 7;
    }
    this.buf[this.pos++] = u;
  }

  varint(v: number): void {
    this.uvarint(((v << 1) ^ (v >> 31)) >>> 0);
  }

  varlong(v: bigint): void {
    this.room(10);
    let u = BigInt.asUintN(64, (v << 1n) ^ (v >> 63n));
    while (u >= 0x80n) {
      this.buf[this.pos++] = Number(u & 0x7fn) | 0x80;
      u >>= 7n;
    }
    this.buf[this.pos++] = Number(u);
  }

  raw(b: Uint8Array): void {
    this.room(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }

  /** Appends `b` by reference when it is large (no copy); the caller must not change it before the write. */
  ref(b: Buffer): void {
    if (b.length < REF_MIN_BYTES) {
      this.raw(b);
      return;
    }
    if (this.pos > 0) {
      this.parts.push(this.buf.subarray(0, this.pos));
      this.partsBytes += this.pos;
      this.buf = Buffer.allocUnsafe(Math.max(256, this.buf.length - this.pos));
      this.pos = 0;
    }
    this.parts.push(b);
    this.partsBytes += b.length;
  }

  /** Bytes written so far. */
  get length(): number {
    return this.partsBytes + this.pos;
  }

  uuid(v: string): void {
    this.raw(Buffer.from(v.replace(/-/g, ''), 'hex'));
  }

  /** The bytes written, in one buffer (copies referenced parts; the writer must not be reused after). */
  finish(): Buffer {
    const tail = this.buf.subarray(0, this.pos);
    return this.parts.length === 0 ? tail : Buffer.concat([...this.parts, tail], this.length);
  }

  /** The bytes written as parts for a vectored write: referenced record runs stay the caller's buffers. */
  finishParts(): Buffer[] {
    return this.pos > 0 || this.parts.length === 0 ? [...this.parts, this.buf.subarray(0, this.pos)] : [...this.parts];
  }
}
