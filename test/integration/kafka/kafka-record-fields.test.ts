/**
 * Record fields the Kafka listener must take as Kafka does: a producer's timestamps as given (0 stays 0,
 * -1 "no timestamp" stays -1), any int64 baseOffset (the broker assigns offsets) and baseTimestamp (only
 * the records' own timestamps must fit what the log holds and be -1 or more, else INVALID_TIMESTAMP); and a Fetch that asks
 * for no bytes (minBytes 0) or no wait (maxWaitMs 0) is answered at once, even at the log end.
 */
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { crc32cRange } from 'tributary-protocol/record-batch/crc32c.js';
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';
import { splitRecordBatches } from 'tributary-protocol/record-batch/split.js';
import { sizeOfVarint, sizeOfVarlong, writeVarint, writeVarlong } from 'tributary-protocol/record-batch/varint.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawKafka } from '../../helpers/raw-kafka.js';
import { until } from '../../helpers/util.js';

/**
 * A one-record RecordBatch v2 with any int64 baseOffset and baseTimestamp and the record's timestamp delta
 * (the listener's own encoder takes safe integers only): what a Kafka client may send.
 */
function rawBatch(baseOffset: bigint, baseTimestamp: bigint, delta: bigint, value: string): Buffer {
  const v = Buffer.from(value);
  const body = 1 + sizeOfVarlong(delta) + sizeOfVarint(0) + sizeOfVarint(-1) + sizeOfVarint(v.length) + v.length + sizeOfVarint(0);
  const b = Buffer.alloc(61 + sizeOfVarint(body) + body);
  b.writeBigInt64BE(baseOffset, 0);
  b.writeInt32BE(b.length - 12, 8); // batchLength
  b.writeInt32BE(-1, 12); // partitionLeaderEpoch
  b[16] = 2; // magic
  b.writeInt16BE(0, 21); // attributes: uncompressed, CreateTime
  b.writeInt32BE(0, 23); // lastOffsetDelta
  b.writeBigInt64BE(baseTimestamp, 27);
  b.writeBigInt64BE(baseTimestamp, 35); // maxTimestamp: the broker does not go by it
  b.writeBigInt64BE(-1n, 43); // producerId
  b.writeInt16BE(-1, 51);
  b.writeInt32BE(-1, 53);
  b.writeInt32BE(1, 57); // recordCount
  let at = writeVarint(b, 61, body);
  b[at++] = 0;
  at = writeVarlong(b, at, delta);
  at = writeVarint(b, at, 0); // offsetDelta
  at = writeVarint(b, at, -1); // null key
  at = writeVarint(b, at, v.length);
  v.copy(b, at);
  writeVarint(b, at + v.length, 0); // no headers
  b.writeUInt32BE(crc32cRange(b, 21, b.length), 17);
  return b;
}

describe('the Kafka listener takes record fields as Kafka does', () => {
  let broker: BrokerProcess;
  let c: Connection;
  let bootstrap: string;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--kafka-port', '0', '--offsets-topic-partitions', '1'] });
    bootstrap = `127.0.0.1:${broker.kafkaPort}`;
    c = await broker.connect();
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  const fetchBody = (topic: string, offset: number, maxWaitMs: number, minBytes: number) => ({
    maxWaitMs,
    minBytes,
    maxBytes: 1 << 20,
    isolationLevel: 0,
    sessionId: 0,
    sessionEpoch: -1,
    topics: [{ topic, partitions: [{ partition: 0, fetchOffset: offset, partitionMaxBytes: 1 << 20 }] }],
    forgottenTopicsData: [],
    rackId: '',
  });
  const fetched = (res: KafkaStruct) => ((res.responses as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!;
  const recordsOf = (res: KafkaStruct) =>
    splitRecordBatches(fetched(res).records as Buffer).batches.flatMap((b) => b.decode().records.map((r) => ({ offset: r.offset, timestamp: r.timestamp, value: r.value!.toString() })));
  const produceTo = (raw: RawKafka, topic: string, records: Buffer) =>
    raw.call(0, 7, { transactionalId: null, acks: -1, timeoutMs: 1000, topicData: [{ name: topic, partitionData: [{ index: 0, records }] }] });
  const answerOf = (r: KafkaStruct) => ((r.responses as KafkaStruct[])[0]!.partitionResponses as KafkaStruct[])[0]!;

  it("keeps a producer's timestamps as given (CreateTime): 0 stays 0 and -1 stays -1 for kafkajs and for native CONSUME", { timeout: 30_000 }, async () => {
    await c.command('CREATE', { topic: 'ts-kept', partitions: 1 });
    const kafka = new Kafka({ brokers: [bootstrap], clientId: 'ts-kept', logLevel: logLevel.NOTHING, retry: { retries: 2 } });
    const producer = kafka.producer();
    const consumer = kafka.consumer({ groupId: 'ts-kept', maxWaitTimeInMs: 100 });
    const normal = 1_700_000_000_000;
    try {
      await producer.connect();
      await producer.send({
        topic: 'ts-kept',
        acks: -1,
        messages: [
          { partition: 0, value: 'zero', timestamp: '0' },
          { partition: 0, value: 'none', timestamp: '-1' },
          { partition: 0, value: 'normal', timestamp: String(normal) },
        ],
      });
      await consumer.connect();
      await consumer.subscribe({ topic: 'ts-kept', fromBeginning: true });
      const seen: string[] = [];
      await consumer.run({ eachMessage: async ({ message }) => void seen.push(`${message.value!.toString()}@${message.timestamp}`) });
      await until(() => seen.length === 3, 20_000, 'the three records consumed');
      expect(seen).toEqual(['zero@0', 'none@-1', `normal@${normal}`]);
    } finally {
      await consumer.disconnect();
      await producer.disconnect();
    }
    // The native port shows the stored timestamps: -1 is "no timestamp", as on the Kafka side.
    const native = (await c.consume({ topic: 'ts-kept', partition: 0, offset: 0, batch: 10 })).records;
    expect(native.map((r) => [r.value.toString(), r.timestamp])).toEqual([
      ['zero', 0],
      ['none', -1],
      ['normal', normal],
    ]);
  });

  it('a Produce with baseOffset 2^60 is taken (the broker assigns offsets); a baseTimestamp of 2^60 is taken when the records fit, else INVALID_TIMESTAMP', async () => {
    await c.command('CREATE', { topic: 'int64s', partitions: 1 });
    const raw = await RawKafka.connect(broker.kafkaPort);
    try {
      await c.command('PUBLISH', { topic: 'int64s', partition: 0, message: 'first' });
      const bigOffset = Buffer.from(encodeRecordBatch({ records: [{ key: null, value: Buffer.from('big-offset'), timestamp: 1000 }] }));
      bigOffset.writeBigInt64BE(2n ** 60n, 0); // outside the CRC
      const taken = answerOf(await produceTo(raw, 'int64s', bigOffset));
      expect([taken.errorCode, taken.baseOffset]).toEqual([0, 1]);
      expect(answerOf(await produceTo(raw, 'int64s', rawBatch(-(2n ** 63n), 0n, 2000n, 'min-offset'))).errorCode).toBe(0);
      // baseTimestamp 2^60, the record's delta bringing its timestamp back to 3000: stored as given.
      expect(answerOf(await produceTo(raw, 'int64s', rawBatch(0n, 2n ** 60n, 3000n - 2n ** 60n, 'big-base'))).errorCode).toBe(0);
      // A record timestamp the log cannot hold (beyond 2^53) is the producer's timestamp error, not a corrupt batch.
      for (const [base, delta] of [
        [2n ** 60n, 0n],
        [2n ** 63n - 1n, 0n],
        [0n, 2n ** 53n],
        [-(2n ** 63n), 0n],
      ] as const) {
        const refused = answerOf(await produceTo(raw, 'int64s', rawBatch(0n, base, delta, 'refused')));
        expect([refused.errorCode, refused.baseOffset], `baseTimestamp ${base} + ${delta}`).toEqual([kafkaErrorCode('INVALID_TIMESTAMP'), -1]);
      }
      const all = recordsOf(await raw.call(1, 12, fetchBody('int64s', 1, 0, 1)));
      expect(all.map((r) => [r.offset, r.value, r.timestamp])).toEqual([
        [1, 'big-offset', 1000],
        [2, 'min-offset', 2000],
        [3, 'big-base', 3000],
      ]);
    } finally {
      raw.socket.destroy();
    }
  });

  it('a record timestamp below -1 is INVALID_TIMESTAMP and nothing of the batch is stored; -1 is still taken', { timeout: 30_000 }, async () => {
    await c.command('CREATE', { topic: 'ts-negative', partitions: 1 });
    const raw = await RawKafka.connect(broker.kafkaPort);
    try {
      // Before: each was stored and read back as given (-2, -1000, ...), a timestamp Kafka's format has not.
      for (const t of [-2n, -1000n, -(2n ** 53n) + 1n]) {
        const refused = answerOf(await produceTo(raw, 'ts-negative', rawBatch(0n, t, 0n, `at ${t}`)));
        expect([refused.errorCode, refused.baseOffset], `timestamp ${t}`).toEqual([kafkaErrorCode('INVALID_TIMESTAMP'), -1]);
      }
      // Base 5 and delta -7: the record's own timestamp is what counts.
      expect(answerOf(await produceTo(raw, 'ts-negative', rawBatch(0n, 5n, -7n, 'sum -2'))).errorCode).toBe(kafkaErrorCode('INVALID_TIMESTAMP'));
      const none = answerOf(await produceTo(raw, 'ts-negative', rawBatch(0n, -1n, 0n, 'none')));
      expect([none.errorCode, none.baseOffset]).toEqual([0, 0]);
    } finally {
      raw.socket.destroy();
    }
    // kafkajs sends what it is given: one bad record refuses its whole batch.
    const kafka = new Kafka({ brokers: [bootstrap], clientId: 'ts-negative', logLevel: logLevel.NOTHING, retry: { retries: 0 } });
    const producer = kafka.producer();
    try {
      await producer.connect();
      const sent = producer.send({
        topic: 'ts-negative',
        acks: -1,
        messages: [
          { partition: 0, value: 'fine', timestamp: '1000' },
          { partition: 0, value: 'bad', timestamp: '-2' },
        ],
      });
      await expect(sent).rejects.toMatchObject({ type: 'INVALID_TIMESTAMP' });
    } finally {
      await producer.disconnect();
    }
    const native = (await c.consume({ topic: 'ts-negative', partition: 0, offset: 0, batch: 10 })).records;
    expect(native.map((r) => [r.value.toString(), r.timestamp])).toEqual([['none', -1]]);
  });

  it('a Fetch at the log end with minBytes 0 (or maxWaitMs 0) is answered at once, before the record that comes next', { timeout: 15_000 }, async () => {
    await c.command('CREATE', { topic: 'no-wait', partitions: 1 });
    for (const m of ['a', 'b']) await c.command('PUBLISH', { topic: 'no-wait', partition: 0, message: m });
    const raw = await RawKafka.connect(broker.kafkaPort);
    try {
      // maxWaitMs 30 s (the broker's cap) is past this test's timeout: the answer comes without it, empty,
      // and only then is the next record produced.
      const empty = fetched(await raw.call(1, 12, fetchBody('no-wait', 2, 30_000, 0)));
      expect([empty.errorCode, empty.highWatermark, (empty.records as Buffer | null)?.length ?? 0]).toEqual([0, 2, 0]);
      // maxWaitMs 0: answered with what there is, however many bytes minBytes asks for.
      const now = fetched(await raw.call(1, 12, fetchBody('no-wait', 2, 0, 1 << 20)));
      expect([now.errorCode, (now.records as Buffer | null)?.length ?? 0]).toEqual([0, 0]);
      await c.command('PUBLISH', { topic: 'no-wait', partition: 0, message: 'c' });
      expect(recordsOf(await raw.call(1, 12, fetchBody('no-wait', 2, 30_000, 0))).map((r) => r.value)).toEqual(['c']);
    } finally {
      raw.socket.destroy();
    }
    // kafkajs with minBytes 0: its fetches at the log end come back empty at once, one after another.
    const kafka = new Kafka({ brokers: [bootstrap], clientId: 'no-wait', logLevel: logLevel.NOTHING, retry: { retries: 2 } });
    const consumer = kafka.consumer({ groupId: 'no-wait', minBytes: 0, maxWaitTimeInMs: 30_000 });
    let fetches = 0;
    consumer.on(consumer.events.FETCH, () => void fetches++);
    try {
      await consumer.connect();
      await consumer.subscribe({ topic: 'no-wait', fromBeginning: false });
      await consumer.run({ eachMessage: async () => {} });
      await until(() => fetches >= 3, 10_000, 'three fetches answered');
    } finally {
      await consumer.disconnect();
    }
  });
});
