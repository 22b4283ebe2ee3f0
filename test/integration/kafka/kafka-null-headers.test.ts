/**
 * A Kafka record header whose value is null (varint length -1) comes back null through Fetch, apart from an
 * empty one, from the tail cache and, after kill -9 and recovery's scan, from the segment files;
 * the main port's CONSUME gives it as an empty value (docs/kafka.md, "Produce"; docs/protocol.md 5.2).
 * @platformatic/kafka produces it (kafkajs cannot: its producer throws on a null header value), kafkajs
 * consumes it. Before, it was stored empty and read back as empty bytes.
 */
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BrokerProcess } from '../../helpers/launcher.js';
import { until } from '../../helpers/util.js';

let broker: BrokerProcess;

beforeAll(async () => {
  broker = await BrokerProcess.start({ args: ['--kafka-port', '0', '--offsets-topic-partitions', '1'] });
});

afterAll(async () => {
  await broker?.dispose();
});

interface PlatformaticProducer {
  send(opts: { messages: Array<{ topic: string; partition: number; key: Buffer; value: Buffer; headers: Map<Buffer, Buffer | null> }> }): Promise<unknown>;
  close(): Promise<void>;
}

/** @platformatic/kafka's Producer, after the Promise.withResolvers stand-in it needs on Node 20. */
async function platformaticProducer(bootstrapBrokers: string[]): Promise<PlatformaticProducer> {
  await import('../../helpers/with-resolvers.js');
  const pk = (await import('@platformatic/kafka')) as unknown as { Producer: new (opts: object) => PlatformaticProducer };
  return new pk.Producer({ clientId: 'null-headers', bootstrapBrokers, acks: -1 });
}

/** Each record's key and its headers, `key=null` for a null header value. */
type Shown = string;
const EXPECTED: Shown[] = ['a n=null e= v=x', 'b n=null', 'c e='];

/** Every record of topic `hdrs` as a kafkajs consumer of a new group reads it. */
async function consumeKafka(groupId: string): Promise<Shown[]> {
  // A client per read: the relaunched broker listens on another Kafka port.
  const kafka = new Kafka({ brokers: [`127.0.0.1:${broker.kafkaPort}`], clientId: 'null-headers', logLevel: logLevel.NOTHING, retry: { retries: 2 } });
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 100 });
  const seen: Shown[] = [];
  try {
    await consumer.connect();
    await consumer.subscribe({ topic: 'hdrs', fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ message: m }) => {
        const headers = Object.entries(m.headers ?? {}).map(([k, v]) => `${k}=${v === null ? 'null' : String(v)}`);
        seen.push([String(m.key), ...headers].join(' '));
      },
    });
    await until(() => seen.length === EXPECTED.length, 20_000, 'every record consumed');
  } finally {
    await consumer.disconnect();
  }
  return seen;
}

it('a null header value comes back null and an empty one empty through Fetch, before and after a crash; CONSUME gives it empty', { timeout: 60_000 }, async () => {
  const c = await broker.connect();
  await c.command('CREATE', { topic: 'hdrs', partitions: 1 });
  const producer = await platformaticProducer([`127.0.0.1:${broker.kafkaPort}`]);
  const h = (entries: Array<[string, string | null]>) => new Map(entries.map(([k, v]) => [Buffer.from(k), v === null ? null : Buffer.from(v)]));
  try {
    await producer.send({
      messages: [
        { topic: 'hdrs', partition: 0, key: Buffer.from('a'), value: Buffer.from('1'), headers: h([['n', null], ['e', ''], ['v', 'x']]) },
        { topic: 'hdrs', partition: 0, key: Buffer.from('b'), value: Buffer.from('2'), headers: h([['n', null]]) },
        { topic: 'hdrs', partition: 0, key: Buffer.from('c'), value: Buffer.from('3'), headers: h([['e', '']]) },
      ],
    });
  } finally {
    await producer.close();
  }
  // Before: 'a n= e= v=x' and 'b n=' (stored as an empty value).
  expect(await consumeKafka('g1')).toEqual(EXPECTED);

  // The main port's wire has no null header value: an empty one (docs/protocol.md 5.2).
  const native = (await c.consume({ topic: 'hdrs', partition: 0, offset: 0, batch: 10 })).records;
  expect(native.map((r) => [r.key!.toString(), ...r.headers.map((x) => `${x.key}=${x.value.toString()}`)].join(' '))).toEqual(['a n= e= v=x', 'b n=', 'c e=']);
  await c.close();

  // After kill -9 (recovery scans the segment's records) from the segment files (no tail cache), the same.
  await broker.kill();
  await broker.relaunch();
  expect(await consumeKafka('g2')).toEqual(EXPECTED);
});
