/**
 * Whole appends of another log in its stored units (per-record layout records, record-codec.ts, and append
 * blocks, append-block.ts), as a follower receives them from its leader (REPLICA_FETCH format=stored),
 * validated without building an object per record or header: PartitionLog.appendReplica stores the bytes
 * as they are, and the partition replays its producer state and transaction index from them
 * (forEachRecord). docs/architecture.md, "Cluster mode" and "Stored batches".
 */
import { RecordAttr } from 'tributary-protocol/record.js';
import { r64n } from 'tributary-protocol/record-batch/layout.js';
import { BLOCK_HEADER_BYTES, BLOCK_IDEMPOTENT, checkBlock, recordEnd } from './append-block.js';
import { isBlockAt } from './block-records.js';
import { ATTR_END_OF_APPEND, inspectRecord } from './record-codec.js';

/** The fields producer-state and transaction replay read (ProducerStateReplay, TxnIndex.replay). */
export interface StoredRecordView {
  offset: number;
  timestamp: number;
  attributes: number;
  producerId: string;
  epoch: number;
  sequence: number;
  /** A control record's value (its marker); empty for other records. */
  value: Buffer;
}

const EMPTY = Buffer.alloc(0);


/** Units (records, blocks) StoredAppends.parseInTurns checks between two turns of the event loop (about 10 ms). */
const RECORDS_PER_TURN = 16_384;

export class StoredAppends {
  private constructor(
    /** The units, back to back (the stored layout: records and blocks). */
    readonly buf: Buffer,
    /** Units + 1 positions in `buf`: unit i spans starts[i] .. starts[i + 1]. */
    readonly starts: number[],
    /** The offset of record unit i, the base offset of block unit i (increasing, gaps only between appends). */
    readonly offsets: number[],
    /** Records (a block holds several). */
    readonly count: number,
    /** The last record's offset. */
    readonly lastOffset: number,
    /** Of the records with a timestamp (-1 when none has one). */
    readonly maxTimestamp: number,
    /** Some record has none (negative). */
    readonly untimed: boolean,
  ) {}

  /**
   * The records in buf[from, to) (exactly `count` of them), checked as PartitionLog.appendReplica checks
   * record objects: every record's frame, CRC and structure (the header loop included), safe integers,
   * epoch and sequence at least -1, offsets increasing with gaps only after an append's end, the last
   * record ending an append. A block is checked whole (checkBlock: CRC, header, records, offsets from its
   * base) and is one whole append: after a record that ends one. A reason string when any of this fails.
   */
  static parse(buf: Buffer, from: number, to: number, count: number): StoredAppends | string {
    const s = new Parse(buf, from, to, count);
    return s.step(Number.POSITIVE_INFINITY) ?? StoredAppends.checked(s);
  }

  /**
   * parse(), letting the event loop turn every RECORDS_PER_TURN records: 1.7M small records took a second
   * to check, long enough for the broker to take it for a pause of its process (cluster/lease-keeper.ts).
   */
  static async parseInTurns(buf: Buffer, from: number, to: number, count: number): Promise<StoredAppends | string> {
    const s = new Parse(buf, from, to, count);
    for (;;) {
      const failed = s.step(RECORDS_PER_TURN);
      if (failed !== null) return failed;
      if (s.done) return StoredAppends.checked(s);
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }

  private static checked(s: Parse): StoredAppends | string {
    const r = s.result();
    return typeof r === 'string' ? r : new StoredAppends(r.buf, r.starts, r.offsets, r.count, r.lastOffset, r.maxTimestamp, r.untimed);
  }

  /**
   * Calls `fn` for each record in order with one reused view (copy what outlives the call). A producer id
   * is decoded only where it differs from the previous record's, so a batch of one producer makes one string.
   */
  forEachRecord(fn: (r: StoredRecordView) => void): void {
    const b = this.buf;
    const v: StoredRecordView = { offset: 0, timestamp: 0, attributes: 0, producerId: '', epoch: -1, sequence: -1, value: EMPTY };
    let pidAt = -1;
    let pidLen = 0;
    /** The producer id of `len` bytes at `at` in the view (decoded only when it differs from the last one). */
    const producer = (at: number, len: number): void => {
      if (len === 0) v.producerId = '';
      else if (len !== pidLen || pidAt < 0 || b.compare(b, at, at + len, pidAt, pidAt + len) !== 0) v.producerId = b.toString('utf8', at, at + len);
      if (len > 0) pidAt = at;
      pidLen = len;
    };
    for (let i = 0; i < this.offsets.length; i++) {
      const p = this.starts[i]!;
      if (isBlockAt(b, p)) {
        this.blockRecords(p, v, producer, fn);
        continue;
      }
      const len = b.readUInt16BE(p + 25);
      producer(p + 27, len);
      const e = p + 27 + len;
      v.offset = this.offsets[i]!;
      v.timestamp = r64n(b, p + 16);
      v.attributes = b[p + 24]!;
      v.epoch = r64n(b, e);
      v.sequence = r64n(b, e + 8);
      v.value = EMPTY;
      if ((v.attributes & RecordAttr.CONTROL) !== 0) {
        const keyLen = b.readInt32BE(e + 16);
        const valueAt = e + 20 + Math.max(keyLen, 0);
        v.value = b.subarray(valueAt + 4, valueAt + 4 + b.readUInt32BE(valueAt));
      }
      fn(v);
    }
  }

  /**
   * The records of the block at `pos` in the view, with the per-record layout's values (block-records.ts):
   * a plain append's without producer id, epoch and sequence -1; the last one ends the append.
   */
  private blockRecords(pos: number, v: StoredRecordView, producer: (at: number, len: number) => void, fn: (r: StoredRecordView) => void): void {
    const b = this.buf;
    const idempotent = (b[pos + 9]! & BLOCK_IDEMPOTENT) !== 0;
    const base = r64n(b, pos + 10);
    const count = b.readUInt32BE(pos + 18);
    let s = pos + BLOCK_HEADER_BYTES;
    for (let j = 0; j < count; j++) {
      const len = b.readUInt16BE(s + 16);
      producer(s + 18, idempotent ? len : 0);
      const k = s + 18 + len;
      const e = k + 2 + b.readUInt16BE(k);
      const valueLen = b.readUInt32BE(e + 8);
      const ve = e + 12 + valueLen;
      v.offset = base + j;
      v.timestamp = r64n(b, ve);
      v.attributes = b[ve + 8]! | (j === count - 1 ? ATTR_END_OF_APPEND : 0);
      v.epoch = idempotent ? r64n(b, e) : -1;
      v.sequence = idempotent ? r64n(b, s + 8) : -1;
      v.value = (v.attributes & RecordAttr.CONTROL) !== 0 ? b.subarray(e + 12, ve) : EMPTY;
      fn(v);
      s = recordEnd(b, s);
    }
  }
}

/** A check of StoredAppends in steps. */
class Parse {
  readonly starts: number[] = [];
  readonly offsets: number[] = [];
  private maxTimestamp = -1;
  private untimed = false;
  private ended = true;
  /** Records so far, and the last one's offset. */
  private n = 0;
  private last = -1;
  private p: number;

  constructor(
    private readonly buf: Buffer,
    private readonly from: number,
    private readonly to: number,
    private readonly count: number,
  ) {
    this.p = from;
  }

  get done(): boolean {
    return this.p >= this.to;
  }

  /** Checks up to `records` more units (a block is one): a reason when one fails, else null. */
  step(records: number): string | null {
    const { buf, to, count, offsets, starts } = this;
    for (let left = records; this.p < to && left > 0; left--) {
      const p = this.p;
      const i = this.n;
      if (i >= count) return `more records than the ${count} announced`;
      if (isBlockAt(buf, p)) {
        const failed = this.block(p);
        if (failed !== null) return failed;
        continue;
      }
      const r = inspectRecord(buf, p, to);
      if (!r.ok) return `record ${i}: ${r.reason === 'incomplete' ? 'truncated' : 'corrupt (length, CRC or structure)'}`;
      const pidLen = buf.readUInt16BE(p + 25);
      const epoch = r64n(buf, p + 27 + pidLen);
      const sequence = r64n(buf, p + 35 + pidLen);
      if (epoch < -1 || sequence < -1) return `record ${i}: epoch and sequence must be >= -1`;
      if (i > 0) {
        const prev = this.last;
        if (r.offset <= prev) return `record ${i}: offsets must be strictly increasing (${r.offset} after ${prev})`;
        if (r.offset !== prev + 1 && !this.ended) return `record ${i}: offset gap (${prev} to ${r.offset}) inside an append`;
      }
      this.ended = (r.attributes & ATTR_END_OF_APPEND) !== 0;
      if (r.timestamp > this.maxTimestamp) this.maxTimestamp = r.timestamp;
      if (r.timestamp < 0) this.untimed = true;
      starts.push(p - this.from);
      offsets.push(r.offset);
      this.n = i + 1;
      this.last = r.offset;
      this.p = p + r.size;
    }
    return null;
  }

  /** Checks the block at `p` (one whole append): a reason when it fails, else null. */
  private block(p: number): string | null {
    const { buf, count } = this;
    const i = this.n;
    const b = checkBlock(buf, p, this.to);
    if (!b.ok) return `record ${i} (a block): ${b.reason === 'incomplete' ? 'truncated' : 'corrupt (length, CRC or structure)'}`;
    if (i + b.count > count) return `more records than the ${count} announced`;
    if (i > 0) {
      if (b.baseOffset <= this.last) return `record ${i}: offsets must be strictly increasing (${b.baseOffset} after ${this.last})`;
      if (!this.ended) return `record ${i}: a block (one whole append) inside an append`;
    }
    if ((b.flags & BLOCK_IDEMPOTENT) !== 0) {
      for (let j = 0, s = p + BLOCK_HEADER_BYTES; j < b.count; j++, s = recordEnd(buf, s)) {
        const k = s + 18 + buf.readUInt16BE(s + 16);
        if (r64n(buf, s + 8) < -1 || r64n(buf, k + 2 + buf.readUInt16BE(k)) < -1) return `record ${i + j}: epoch and sequence must be >= -1`;
      }
    }
    this.ended = true;
    if (b.maxTimestamp > this.maxTimestamp) this.maxTimestamp = b.maxTimestamp;
    this.starts.push(p - this.from);
    this.offsets.push(b.baseOffset);
    this.n = i + b.count;
    this.last = b.baseOffset + b.count - 1;
    this.p = p + b.size;
    return null;
  }

  /** Once done: the appends' fields, or why they are refused. */
  result():
    | { buf: Buffer; starts: number[]; offsets: number[]; count: number; lastOffset: number; maxTimestamp: number; untimed: boolean }
    | string {
    const n = this.n;
    if (n !== this.count) return `${n} records, ${this.count} announced`;
    if (n > 0 && !this.ended) return 'the last record does not end an append (ATTR_END_OF_APPEND): whole appends only';
    this.starts.push(this.p - this.from);
    return {
      buf: this.buf.subarray(this.from, this.to),
      starts: this.starts,
      offsets: this.offsets,
      count: n,
      lastOffset: this.last,
      maxTimestamp: this.maxTimestamp,
      untimed: this.untimed,
    };
  }
}
