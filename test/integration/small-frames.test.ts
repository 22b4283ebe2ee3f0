/**
 * A broker started with a small `--max-frame-bytes` (1 MiB or less): its read answers keep room for the
 * frame's own fields out of the frame size. They kept a fixed 1 MiB, so the record budget was negative
 * and every CONSUME answered one record, however many were there and whatever max_bytes asked. The Kafka
 * port's Fetch is bounded by the same rule (it kept the fixed 1 MiB, floored at one byte: one record).
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { splitRecordBatches } from 'tributary-protocol/record-batch/split.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { RawKafka } from '../helpers/raw-kafka.js';
import { batchRec } from '../helpers/util.js';

let broker: BrokerProcess;

beforeAll(async () => {
  broker = await BrokerProcess.start({ args: ['--max-frame-bytes', String(64 * 1024), '--kafka-port', '0'] });
}, 60_000);

afterAll(async () => {
  await broker?.dispose();
});

it('CONSUME answers as many records as fit in half of a 64 KiB frame, not one', async () => {
  const c = await broker.connect();
  try {
    await c.command('CREATE', { topic: 'small', partitions: 1 });
    // 500 records of about 120 bytes: 60 KB, more than one answer holds.
    const records = Array.from({ length: 500 }, (_, i) => batchRec(`v${i}`.padEnd(100, '.'), { key: Buffer.from(`k${i}`) }));
    for (let i = 0; i < records.length; i += 100) {
      await c.produceBatch({ topic: 'small', partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records: records.slice(i, i + 100) });
    }
    const bytes = (rs: Array<{ value: Buffer | null; key: Buffer | null }>) => rs.reduce((n, r) => n + (r.value?.length ?? 0) + (r.key?.length ?? 0), 0);
    for (const max_bytes of [undefined, 10_000, 1_000_000]) {
      const b = await c.consume({ topic: 'small', partition: 0, offset: 0, batch: 1000, max_bytes });
      // At most 32 KiB of records (the budget), and more than one.
      expect(b.records.length, `max_bytes=${max_bytes}`).toBeGreaterThan(50);
      expect(bytes(b.records)).toBeLessThanOrEqual(Math.min(max_bytes ?? Number.MAX_SAFE_INTEGER, 32 * 1024));
      expect(b.records.map((r) => r.offset)).toEqual(Array.from({ length: b.records.length }, (_, i) => i));
    }
    // Reading on from where an answer ended reaches every record.
    let next = 0;
    let reads = 0;
    while (next < 500) {
      const b = await c.consume({ topic: 'small', partition: 0, offset: next, batch: 1000 });
      next = b.records.at(-1)!.offset + 1;
      reads++;
    }
    expect(reads).toBeLessThan(10);
  } finally {
    await c.close();
  }
});

it("the Kafka port's Fetch answers as many records as fit in half of a 64 KiB frame, not one", async () => {
  const c = await broker.connect();
  const raw = await RawKafka.connect(broker.kafkaPort);
  try {
    await c.command('CREATE', { topic: 'small-kafka', partitions: 1 });
    const records = Array.from({ length: 500 }, (_, i) => batchRec(`v${i}`.padEnd(100, '.')));
    for (let i = 0; i < records.length; i += 100) {
      await c.produceBatch({ topic: 'small-kafka', partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records: records.slice(i, i + 100) });
    }
    const res = await raw.call(1, 12, {
      maxWaitMs: 0,
      minBytes: 1,
      maxBytes: 1 << 20,
      isolationLevel: 0,
      sessionId: 0,
      sessionEpoch: -1,
      topics: [{ topic: 'small-kafka', partitions: [{ partition: 0, fetchOffset: 0, partitionMaxBytes: 1 << 20 }] }],
      forgottenTopicsData: [],
      rackId: '',
    });
    const part = ((res.responses as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!;
    expect(part.errorCode).toBe(0);
    const batch = part.records as Buffer;
    const n = splitRecordBatches(batch).batches.reduce((k, b) => k + b.recordCount, 0);
    expect(n).toBeGreaterThan(50);
    expect(n).toBeLessThan(500);
    expect(batch.length).toBeLessThanOrEqual(32 * 1024);
  } finally {
    raw.socket.destroy();
    await c.close();
  }
});
