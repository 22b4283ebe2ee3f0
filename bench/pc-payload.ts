/**
 * Record payloads and batch frames of the produce-consume benchmark.
 *
 * Payload layout (little-endian): u32 record id, f64 send time (ms since the epoch, fractional, from
 * `performance.timeOrigin + performance.now()`), then filler up to the record size.
 */
import { decodeBatch, encodeBatch, type BatchRecord } from 'tributary-protocol/batch.js';
import { encodeFrame } from 'tributary-protocol/frame.js';

export const PAYLOAD_HEADER_BYTES = 12;

export function writePayloadHeader(buf: Buffer, at: number, id: number, sentMs: number): void {
  buf.writeUInt32LE(id, at);
  buf.writeDoubleLE(sentMs, at + 4);
}

/**
 * A pre-encoded batch frame (length prefix included) of `count` records of `size` bytes, produced with
 * the protocol's own encodeBatch; per send only the partition, ids and timestamps are patched in a copy.
 */
export class BatchTemplate {
  readonly frame: Buffer;
  /** Offsets in `frame` of each record's value. */
  readonly valueAt: Int32Array;
  /** Offset in `frame` of the partition field. */
  readonly partitionAt: number;

  constructor(topic: string, count: number, size: number) {
    if (size < PAYLOAD_HEADER_BYTES) throw new Error(`record size must be at least ${PAYLOAD_HEADER_BYTES} bytes`);
    const records: BatchRecord[] = [];
    for (let i = 0; i < count; i++) {
      records.push({
        offset: 0,
        sequence: 0,
        producerId: '',
        key: null,
        epoch: 0,
        value: Buffer.alloc(size, 0x61 + (i % 26)),
        timestamp: 0,
        attributes: 0,
        headers: [],
      });
    }
    const body = encodeBatch({ topic, partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records });
    this.frame = encodeFrame(body);
    // Locate the values by decoding: decodeBatch returns views into the body, so offsets fall out.
    const bodyView = this.frame.subarray(4);
    const decoded = decodeBatch(bodyView);
    this.valueAt = new Int32Array(count);
    for (let i = 0; i < count; i++) this.valueAt[i] = 4 + decoded.records[i]!.value.byteOffset - bodyView.byteOffset;
    this.partitionAt = 4 + 2 + 2 + Buffer.byteLength(topic, 'utf8');
  }

  /** A fresh frame for ids firstId..firstId+count-1, stamped with `sentMs`. */
  build(partition: number, firstId: number, sentMs: number): Buffer {
    const f = Buffer.allocUnsafe(this.frame.length);
    this.frame.copy(f);
    f.writeInt32BE(partition, this.partitionAt);
    const at = this.valueAt;
    for (let i = 0; i < at.length; i++) writePayloadHeader(f, at[i]!, firstId + i, sentMs);
    return f;
  }
}

/**
 * Batch frames encoded per send from record objects with the protocol's encodeBatch, as a hand-written wire
 * client does (`--raw-frames encoded`): one reused record object and value Buffer per record of a batch,
 * stamped with its id and send time, then encoded into a fresh frame.
 */
export class EncodedBatches {
  private readonly records: BatchRecord[] = [];

  constructor(
    private readonly topic: string,
    readonly count: number,
    size: number,
  ) {
    if (size < PAYLOAD_HEADER_BYTES) throw new Error(`record size must be at least ${PAYLOAD_HEADER_BYTES} bytes`);
    for (let i = 0; i < count; i++) {
      this.records.push({ offset: 0, sequence: 0, producerId: '', key: null, epoch: 0, value: Buffer.alloc(size, 0x61 + (i % 26)), timestamp: 0, attributes: 0, headers: [] });
    }
  }

  /** A fresh frame for ids firstId..firstId+count-1, stamped with `sentMs`. */
  build(partition: number, firstId: number, sentMs: number): Buffer {
    const records = this.records;
    for (let i = 0; i < records.length; i++) writePayloadHeader(records[i]!.value, 0, firstId + i, sentMs);
    return encodeFrame(encodeBatch({ topic: this.topic, partition, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records }));
  }
}
