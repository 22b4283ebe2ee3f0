/**
 * Records whose value says which offset they were produced for (about 1 KB each), for tests that check a
 * reply byte for byte against what was produced: a reply holding another record's bytes names it.
 */
import { expect } from 'vitest';
import { type Batch, decodeBatch } from 'tributary-protocol/batch.js';
import type { BrokerProcess } from './launcher.js';

/** The 1,000-byte value of the record produced for `offset`. */
export function valueFor(offset: number): Buffer {
  const head = `record ${offset} `;
  return Buffer.from(head + String.fromCharCode(97 + (offset % 26)).repeat(1000 - head.length));
}

/** A produce batch (acks=1) of `count` records to partition 0 of `topic`, for offsets from `from`. */
export function batchOf(topic: string, from: number, count: number): Batch {
  return {
    topic,
    partition: 0,
    acks: '1',
    idempotent: false,
    firstSequence: 0,
    lastSequence: 0,
    records: Array.from({ length: count }, (_, i) => ({
      offset: 0,
      sequence: 0,
      producerId: '',
      key: null,
      epoch: -1,
      value: valueFor(from + i),
      timestamp: 0,
      attributes: 0,
      headers: [],
    })),
  };
}

/** A CONSUME reply asked at `from` holds `count` records from it, each with its own value. */
export function checkReply(body: Buffer, from: number, count: number, extensions = false): void {
  const records = decodeBatch(body, { extensions }).records;
  expect(records.length).toBe(count);
  for (let i = 0; i < records.length; i++) {
    const r = records[i]!;
    if (r.offset !== from + i || !r.value.equals(valueFor(from + i))) {
      throw new Error(`reply for offset ${from}: record ${i} is offset ${r.offset} with value "${r.value.subarray(0, 20).toString()}..."`);
    }
  }
}

/** The first number of the broker's /metrics that `re` captures, 0 when absent. */
export async function metric(broker: BrokerProcess, re: RegExp): Promise<number> {
  const m = re.exec((await broker.health('/metrics')).body);
  return m ? Number(m[1]) : 0;
}
