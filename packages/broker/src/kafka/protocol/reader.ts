import { KafkaCodecError, type KafkaCodecReason } from './errors.js';

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const ZERO_UUID = '00000000-0000-0000-0000-000000000000';

export function isUuid(v: unknown): v is string {
  return typeof v === 'string' && UUID_RE.test(v);
}

const SAFE_MAX = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * A `bigint64` request field whose value beyond the safe integers means the same as any value past what a
 * log holds (a Fetch offset, a ListOffsets timestamp, a committed offset: offsets and stored timestamps are
 * safe integers) as a number: itself when safe, else +-Infinity, which the handler answers for its
 * partition like any offset or timestamp out of reach. A number (an in-process caller's) is taken as it is.
 */
export function saturatingInt64(v: bigint | number): number {
  if (typeof v === 'number') return v;
  if (v > SAFE_MAX) return Number.POSITIVE_INFINITY;
  return v < -SAFE_MAX ? Number.NEGATIVE_INFINITY : Number(v);
}

/**
 * How many array elements and tagged fields one decode may declare, together: a request with its header, or
 * the consumer-protocol assignments of one GROUP_STATUS (docs/kafka.md, "Bad input"). Each costs an object or
 * an array slot, far more than its 1-2 bytes on the wire: 30M empty topic names in a 60 MB Metadata request
 * took 8.5 s and 1.8 GB, then the broker aborted. No legitimate client comes near it: a topic has at most
 * 100,000 partitions (--max-partitions' ceiling), and a request naming every partition of ten of them stays
 * below. At the limit a decode takes about 0.3 s and 75 MB.
 */
export const MAX_DECODED_ENTRIES = 1_000_000;

/** What is left of a decode's MAX_DECODED_ENTRIES, shared by every reader of that decode. */
export interface DecodeBudget {
  left: number;
}

export function decodeBudget(entries = MAX_DECODED_ENTRIES): DecodeBudget {
  return { left: entries };
}

/**
 * Reads Kafka primitives from one frame, never past `end`. Every length is checked against the bytes left
 * before anything is sliced or allocated, so a hostile length fails here and not in Buffer or the heap.
 * `field` is the schema path being read, for the error.
 */
export class KafkaReader {
  pos: number;
  field = '';

  constructor(
    readonly buf: Buffer,
    pos = 0,
    readonly end = buf.length,
    /** Shared with the readers of the same decode (a tagged field's value, the body after its header). */
    readonly budget: DecodeBudget = decodeBudget(),
  ) {
    this.pos = pos;
  }

  get remaining(): number {
    return this.end - this.pos;
  }

  fail(reason: KafkaCodecReason, detail: string, at = this.pos): KafkaCodecError {
    const fields: Record<string, string | number> = { at };
    if (this.field) fields.field = this.field;
    return new KafkaCodecError(reason, `${detail} at byte ${at}${this.field ? ` (${this.field})` : ''}`, fields);
  }

  private need(n: number, what: string): void {
    if (this.end - this.pos < n) throw this.fail('truncated', `${what} needs ${n} bytes, ${this.end - this.pos} left`);
  }

  int8(): number {
    this.need(1, 'int8');
    return this.buf.readInt8(this.pos++);
  }

  bool(): boolean {
    return this.int8() !== 0;
  }

  int16(): number {
    this.need(2, 'int16');
    const v = this.buf.readInt16BE(this.pos);
    this.pos += 2;
    return v;
  }

  uint16(): number {
    this.need(2, 'uint16');
    const v = this.buf.readUInt16BE(this.pos);
    this.pos += 2;
    return v;
  }

  int32(): number {
    this.need(4, 'int32');
    const v = this.buf.readInt32BE(this.pos);
    this.pos += 4;
    return v;
  }

  uint32(): number {
    this.need(4, 'uint32');
    const v = this.buf.readUInt32BE(this.pos);
    this.pos += 4;
    return v;
  }

  bigint64(): bigint {
    this.need(8, 'int64');
    const v = this.buf.readBigInt64BE(this.pos);
    this.pos += 8;
    return v;
  }

  /**
   * An int64 returned as a number (offsets, timestamps): refused when a number cannot hold it exactly. Read
   * as two halves, no BigInt: the sum is exact within the safe range, and rounds to an unsafe number beyond it.
   */
  int64(): number {
    this.need(8, 'int64');
    const at = this.pos;
    const v = this.buf.readInt32BE(at) * 0x1_0000_0000 + this.buf.readUInt32BE(at + 4);
    if (!Number.isSafeInteger(v)) throw this.fail('int64_out_of_range', `int64 ${this.buf.readBigInt64BE(at)} is not a safe integer`, at);
    this.pos += 8;
    return v;
  }

  float64(): number {
    this.need(8, 'float64');
    const v = this.buf.readDoubleBE(this.pos);
    this.pos += 8;
    return v;
  }

  uuid(): string {
    this.need(16, 'uuid');
    const h = this.buf.toString('hex', this.pos, this.pos + 16);
    this.pos += 16;
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  }

  /** Unsigned varint as Kafka uses for compact lengths and tags: at most 5 bytes, within int32. */
  uvarint(): number {
    const at = this.pos;
    let v = 0;
    for (let i = 0; i < 5; i++) {
      if (this.pos >= this.end) throw this.fail('truncated', 'unsigned varint runs past the end', at);
      const b = this.buf[this.pos++]!;
      v += (b & 0x7f) * 2 ** (7 * i);
      if ((b & 0x80) === 0) {
        if (v > 0x7fffffff) throw this.fail('bad_varint', `unsigned varint ${v} above int32`, at);
        return v;
      }
    }
    throw this.fail('bad_varint', 'unsigned varint longer than 5 bytes', at);
  }

  /** Zigzag varint (int32). */
  varint(): number {
    const at = this.pos;
    let u = 0;
    for (let i = 0; i < 5; i++) {
      if (this.pos >= this.end) throw this.fail('truncated', 'varint runs past the end', at);
      const b = this.buf[this.pos++]!;
      u += (b & 0x7f) * 2 ** (7 * i);
      if ((b & 0x80) === 0) {
        if (u > 0xffffffff) throw this.fail('bad_varint', 'varint above 32 bits', at);
        return (u >>> 1) ^ -(u & 1);
      }
    }
    throw this.fail('bad_varint', 'varint longer than 5 bytes', at);
  }

  /** Zigzag varlong (int64) as a bigint. */
  varlong(): bigint {
    const at = this.pos;
    let u = 0n;
    for (let i = 0n; i < 10n; i++) {
      if (this.pos >= this.end) throw this.fail('truncated', 'varlong runs past the end', at);
      const b = this.buf[this.pos++]!;
      u |= BigInt(b & 0x7f) << (7n * i);
      if ((b & 0x80) === 0) {
        if (u >= 1n << 64n) throw this.fail('bad_varint', 'varlong above 64 bits', at);
        return (u >> 1n) ^ -(u & 1n);
      }
    }
    throw this.fail('bad_varint', 'varlong longer than 10 bytes', at);
  }

  /**
   * A length (classic int16/int32, or compact unsigned varint minus one). Returns -1 for a null, which only a
   * nullable field accepts; a length beyond the bytes left is refused here, before any slice.
   */
  length(kind: 'int16' | 'int32' | 'compact', nullable: boolean, what: string): number {
    const at = this.pos;
    let n: number;
    if (kind === 'compact') n = this.uvarint() - 1;
    else n = kind === 'int16' ? this.int16() : this.int32();
    if (n === -1) {
      if (!nullable) throw this.fail('unexpected_null', `null ${what} where the field is not nullable`, at);
      return -1;
    }
    if (n < 0) throw this.fail('negative_length', `${what} length ${n}`, at);
    if (n > this.end - this.pos) throw this.fail('length_beyond_frame', `${what} length ${n} with ${this.end - this.pos} bytes left`, at);
    return n;
  }

  /**
   * Charges `n` declared entries (array elements or tagged fields) to the decode's budget, before anything
   * is allocated for them: past the budget the decode fails, whatever bytes are left.
   */
  charge(n: number, what: string, at: number): void {
    if (n > this.budget.left) {
      throw this.fail('too_many_entries', `${what} of ${n} entries with ${this.budget.left} left of the ${MAX_DECODED_ENTRIES} one decode may declare`, at);
    }
    this.budget.left -= n;
  }

  /** A slice of the frame (no copy): records and bytes stay views of the received buffer. */
  slice(n: number): Buffer {
    const s = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return s;
  }

  utf8(n: number): string {
    const s = this.buf.toString('utf8', this.pos, this.pos + n);
    this.pos += n;
    return s;
  }
}
