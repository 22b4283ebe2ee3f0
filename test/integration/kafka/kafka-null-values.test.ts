/**
 * A Kafka record's null value (length -1, a tombstone) and its empty value (length 0) stay apart through
 * Produce and Fetch (kafkajs plain, idempotent and gzip; kcat -Z), through the main port's CONSUME (attribute
 * bit 2 with record_extensions_v1) and after a restart, when Fetch reads the segment files instead of the
 * tail cache (docs/kafka.md, "Produce"). Before, both were stored and read back as an empty value.
 */
import { CompressionTypes, Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { RecordAttr } from 'tributary-protocol/record.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { kcat } from '../../helpers/raw-kafka.js';
import { until } from '../../helpers/util.js';

let broker: BrokerProcess;

beforeAll(async () => {
  broker = await BrokerProcess.start({ args: ['--kafka-port', '0', '--offsets-topic-partitions', '1'] });
});

afterAll(async () => {
  await broker?.dispose();
});

/** What kcat fetches: each record's key and value length, -1 for a null value. */
async function kcatLengths(): Promise<string[]> {
  const out = await kcat(['-C', '-b', `127.0.0.1:${broker.kafkaPort}`, '-t', 'tombs', '-p', '0', '-o', 'beginning', '-e', '-q', '-f', '%k=%S\n']);
  return out.trim().split('\n');
}

const EXPECTED = ['null=-1', 'empty=0', 'value=1', 'idem-null=-1', 'idem-empty=0', 'gzip-null=-1', 'gzip-empty=0', 'kcat-null=-1', 'kcat-empty=0'];

it('a null value comes back null and an empty value empty, through Fetch and CONSUME, before and after a restart', { timeout: 60_000 }, async () => {
  const c = await broker.connect();
  await c.command('CREATE', { topic: 'tombs', partitions: 1 });
  const kafka = new Kafka({ brokers: [`127.0.0.1:${broker.kafkaPort}`], clientId: 'tombs', logLevel: logLevel.NOTHING, retry: { retries: 2 } });
  const plain = kafka.producer();
  const idempotent = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  try {
    await plain.connect();
    await plain.send({
      topic: 'tombs',
      acks: -1,
      messages: [
        { partition: 0, key: 'null', value: null },
        { partition: 0, key: 'empty', value: Buffer.alloc(0) },
        { partition: 0, key: 'value', value: 'x' },
      ],
    });
    await idempotent.connect();
    await idempotent.send({
      topic: 'tombs',
      messages: [
        { partition: 0, key: 'idem-null', value: null },
        { partition: 0, key: 'idem-empty', value: Buffer.alloc(0) },
      ],
    });
    await plain.send({
      topic: 'tombs',
      acks: -1,
      compression: CompressionTypes.GZIP,
      messages: [
        { partition: 0, key: 'gzip-null', value: null },
        { partition: 0, key: 'gzip-empty', value: Buffer.alloc(0) },
      ],
    });
  } finally {
    await idempotent.disconnect();
    await plain.disconnect();
  }
  // kcat -Z sends an empty message as a null one; without it, as an empty one.
  await kcat(['-P', '-b', `127.0.0.1:${broker.kafkaPort}`, '-t', 'tombs', '-p', '0', '-K', ':', '-Z'], 'kcat-null:\n');
  await kcat(['-P', '-b', `127.0.0.1:${broker.kafkaPort}`, '-t', 'tombs', '-p', '0', '-K', ':'], 'kcat-empty:\n');

  // Before: every one of them was "=0".
  expect(await kcatLengths()).toEqual(EXPECTED);
  const consumer = kafka.consumer({ groupId: 'tombs', maxWaitTimeInMs: 100 });
  const seen: string[] = [];
  try {
    await consumer.connect();
    await consumer.subscribe({ topic: 'tombs', fromBeginning: true });
    await consumer.run({ eachMessage: async ({ message: m }) => void seen.push(`${m.key}=${m.value === null ? -1 : m.value.length}`) });
    await until(() => seen.length === EXPECTED.length, 20_000, 'every record consumed');
  } finally {
    await consumer.disconnect();
  }
  expect(seen).toEqual(EXPECTED);

  // The main port: an empty value either way, the null one with NULL_VALUE (bit 2).
  const native = (await c.consume({ topic: 'tombs', partition: 0, offset: 0, batch: 20 })).records;
  expect(native.map((r) => `${r.key}=${(r.attributes & RecordAttr.NULL_VALUE) !== 0 ? -1 : r.value.length}`)).toEqual(EXPECTED);

  // From the segment files (no tail cache after a restart), the same.
  await broker.restart();
  expect(await kcatLengths()).toEqual(EXPECTED);
});
