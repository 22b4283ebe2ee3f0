/**
 * `npm run bench -- kafka`: the Kafka listener (docs/kafka.md) beside Tributary's own port, one broker, one
 * run. Each client writes `--count` records of `--size` bytes to its own topic of `--partitions`
 * partitions, as sends of `--chunk` records to one partition each (round-robin), `--in-flight` sends
 * unresolved at a time, acks all / -1:
 * - sdk: Tributary's SDK Producer on the main port (the reference);
 * - kafkajs: kafkajs 2.2.4's producer on the Kafka port;
 * - platformatic: @platformatic/kafka's producer on the Kafka port.
 * Then every topic is read back from offset 0 with a bare fetch loop in this process, so the broker's side
 * is what differs: CONSUME frames on the main port for the SDK's topic, Fetch requests (records re-encoded
 * as RecordBatch v2, the listener's conversion) on the Kafka port for the others.
 * Then each client's own consumer reads its topic from the start in a consumer group of one member (the
 * SDK's Consumer on the main port; kafkajs' and @platformatic/kafka's consumers, which join a Kafka group
 * and commit, on the Kafka port): what a user of each client gets end to end.
 * Printed per client: records/s and per-send p50/p99 ms for the writes, records/s for the reads, and the
 * broker's CPU per record (from /proc) for each, with ratios to the SDK's row. The clients run in this
 * process one after another.
 */
import net from 'node:net';
import { parseArgs } from 'node:util';
import { Connection } from 'tributary-protocol/connection.js';
import { Producer } from 'tributary-client/producer.js';
import { apiByKey } from 'tributary-broker/kafka/protocol/apis.js';
import { decodeResponse, encodeRequest } from 'tributary-broker/kafka/protocol/headers.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { splitRecordBatches } from 'tributary-protocol/record-batch/split.js';
import { CLI, fmtFixed, fmtInt, installCleanupHandlers, makeTempDir, nowMs, percentile, procCpuMs, spawnNode, table } from './lib.js';

export const description = 'kafkajs and @platformatic/kafka through the Kafka listener beside the SDK on the main port: writes, reads, group consumers, broker CPU per record';

const USAGE = 'usage: npm run bench -- kafka [--count 200000] [--size 100] [--chunk 200] [--in-flight 8] [--partitions 12] [--clients sdk,kafkajs,platformatic]\n';
const CLIENTS = ['sdk', 'kafkajs', 'platformatic'] as const;
type ClientName = (typeof CLIENTS)[number];

interface Options {
  count: number;
  size: number;
  chunk: number;
  inFlight: number;
  partitions: number;
  clients: ClientName[];
}

function parseOptions(argv: string[]): Options | string {
  let v: Record<string, string | boolean | undefined>;
  try {
    v = parseArgs({
      args: argv,
      options: {
        count: { type: 'string', default: '200000' },
        size: { type: 'string', default: '100' },
        chunk: { type: 'string', default: '200' },
        'in-flight': { type: 'string', default: '8' },
        partitions: { type: 'string', default: '12' },
        clients: { type: 'string', default: CLIENTS.join(',') },
        help: { type: 'boolean', default: false },
      },
      strict: true,
    }).values;
  } catch (err) {
    return `${(err as Error).message}\n${USAGE}`;
  }
  if (v.help) return USAGE;
  const num = (name: string, min: number): number | string => {
    const n = Number(v[name]);
    return Number.isSafeInteger(n) && n >= min ? n : `--${name} must be an integer >= ${min}\n${USAGE}`;
  };
  const out: Record<string, number> = {};
  for (const [k, min] of [['count', 1], ['size', 1], ['chunk', 1], ['in-flight', 1], ['partitions', 1]] as const) {
    const n = num(k, min);
    if (typeof n === 'string') return n;
    out[k] = n;
  }
  const clients = String(v.clients).split(',').filter(Boolean);
  const bad = clients.filter((c) => !(CLIENTS as readonly string[]).includes(c));
  if (bad.length > 0 || clients.length === 0) return `--clients takes a list of ${CLIENTS.join(', ')}\n${USAGE}`;
  return { count: out.count!, size: out.size!, chunk: out.chunk!, inFlight: out['in-flight']!, partitions: out.partitions!, clients: clients as ClientName[] };
}

/** One send of `chunk` records to `partition`; resolves when acknowledged. */
type Send = (partition: number, values: Buffer[]) => Promise<void>;

interface Writer {
  send: Send;
  close(): Promise<void>;
}

async function sdkWriter(port: number): Promise<Writer> {
  const p = new Producer({ brokers: [`127.0.0.1:${port}`], clientId: 'bench-kafka', acks: 'all', lingerMs: 0, maxBufferedBytes: 256 * 1024 * 1024 });
  return {
    send: async (partition, values) => {
      await p.send({ topic: 'bench-sdk', messages: values.map((value) => ({ value, partition })) });
    },
    close: () => p.close(),
  };
}

async function kafkajsWriter(kafkaPort: number): Promise<Writer> {
  const { Kafka, logLevel } = await import('kafkajs');
  const kafka = new Kafka({ brokers: [`127.0.0.1:${kafkaPort}`], clientId: 'bench-kafka', logLevel: logLevel.NOTHING });
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  return {
    send: async (partition, values) => {
      await producer.send({ topic: 'bench-kafkajs', acks: -1, messages: values.map((value) => ({ value, partition })) });
    },
    close: () => producer.disconnect(),
  };
}

interface PlatformaticProducer {
  send(o: { messages: { topic: string; value: Buffer; partition: number }[]; acks?: number }): Promise<unknown>;
  close(): Promise<void>;
}

async function platformaticWriter(kafkaPort: number): Promise<Writer> {
  // It declares Node 22; on Node 20 it runs once Promise.withResolvers exists.
  type Resolvers = { promise: Promise<unknown>; resolve: (v: unknown) => void; reject: (e: unknown) => void };
  const P = Promise as unknown as { withResolvers?: () => Resolvers };
  P.withResolvers ??= () => {
    let resolve!: Resolvers['resolve'];
    let reject!: Resolvers['reject'];
    const promise = new Promise((a, b) => {
      resolve = a;
      reject = b;
    });
    return { promise, resolve, reject };
  };
  const pk = (await import('@platformatic/kafka')) as unknown as { Producer: new (o: Record<string, unknown>) => PlatformaticProducer };
  const producer = new pk.Producer({ clientId: 'bench-kafka', bootstrapBrokers: [`127.0.0.1:${kafkaPort}`], acks: -1 });
  return {
    send: async (partition, values) => {
      await producer.send({ messages: values.map((value) => ({ topic: 'bench-platformatic', value, partition })) });
    },
    close: () => producer.close(),
  };
}

interface WriteResult {
  seconds: number;
  sendMs: number[];
  brokerCpuMs: number;
}

async function write(o: Options, w: Writer, brokerPid: number | undefined): Promise<WriteResult> {
  const value = Buffer.alloc(o.size, 0x61);
  const sends = Math.ceil(o.count / o.chunk);
  const sendMs: number[] = [];
  const cpu0 = procCpuMs(brokerPid) ?? 0;
  const t0 = nowMs();
  let next = 0;
  const lane = async () => {
    while (next < sends) {
      const k = next++;
      const n = Math.min(o.chunk, o.count - k * o.chunk);
      const values = Array.from({ length: n }, () => value);
      const s = nowMs();
      await w.send(k % o.partitions, values);
      sendMs.push(nowMs() - s);
    }
  };
  await Promise.all(Array.from({ length: o.inFlight }, lane));
  const seconds = (nowMs() - t0) / 1000;
  return { seconds, sendMs: sendMs.sort((a, b) => a - b), brokerCpuMs: (procCpuMs(brokerPid) ?? 0) - cpu0 };
}

/** Reads the SDK's topic through CONSUME on the main port; returns the records read. */
async function readMain(port: number, o: Options): Promise<number> {
  const c = await Connection.connect({ host: '127.0.0.1', port });
  let total = 0;
  try {
    await Promise.all(
      Array.from({ length: o.partitions }, async (_, partition) => {
        for (let offset = 0; ; ) {
          const { records } = await c.consume({ topic: 'bench-sdk', partition, offset, batch: 5000 });
          if (records.length === 0) return;
          total += records.length;
          offset = records[records.length - 1]!.offset + 1;
        }
      }),
    );
  } finally {
    await c.close();
  }
  return total;
}

/** Reads a topic with Fetch v12 requests on the Kafka port, every partition per request; returns the records read. */
async function readKafka(kafkaPort: number, topic: string, o: Options): Promise<number> {
  const api = apiByKey(1)!;
  const socket = net.connect(kafkaPort, '127.0.0.1');
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  // One request at a time: chunks are kept as they come and joined once the response is complete (joining
  // on every chunk would copy a large response over and over, and measure this loop instead of the broker).
  let chunks: Buffer[] = [];
  let have = 0;
  let size = -1;
  let waiting: ((f: Buffer) => void) | undefined;
  socket.on('data', (d: Buffer) => {
    chunks.push(d);
    have += d.length;
    if (size < 0 && have >= 4) size = (chunks.length === 1 ? d : Buffer.concat(chunks)).readInt32BE(0);
    if (size >= 0 && have >= 4 + size && waiting) {
      const all = Buffer.concat(chunks, have);
      const w = waiting;
      waiting = undefined;
      chunks = [];
      have = 0;
      size = -1;
      w(all.subarray(4, 4 + all.readInt32BE(0)));
    }
  });
  const offsets = new Array<number>(o.partitions).fill(0);
  let total = 0;
  try {
    for (let id = 1; ; id++) {
      const body: KafkaStruct = {
        maxWaitMs: 0,
        minBytes: 1,
        maxBytes: 64 * 1024 * 1024,
        isolationLevel: 0,
        sessionId: 0,
        sessionEpoch: -1,
        topics: [{ topic, partitions: offsets.map((fetchOffset, partition) => ({ partition, fetchOffset, partitionMaxBytes: 4 * 1024 * 1024 })) }],
        forgottenTopicsData: [],
        rackId: '',
      };
      const frame = new Promise<Buffer>((r) => (waiting = r));
      socket.write(encodeRequest(api, 12, id, 'bench', body));
      const res = decodeResponse(api, 12, await frame).body;
      let got = 0;
      for (const p of ((res.responses as KafkaStruct[])[0]!.partitions as KafkaStruct[])) {
        const records = p.records as Buffer | null;
        if (!records || records.length === 0) continue;
        for (const b of splitRecordBatches(records, { verifyCrc: false }).batches) {
          got += b.recordCount;
          offsets[p.partitionIndex as number] = b.nextOffset;
        }
      }
      if (got === 0) return total;
      total += got;
    }
  } finally {
    socket.destroy();
  }
}

/** Reads `topic` from its start with the client's own consumer in a group of one; resolves with the records read. */
async function groupRead(name: ClientName, port: number, kafkaPort: number, topic: string, o: Options): Promise<number> {
  let got = 0;
  let done: () => void = () => {};
  const all = new Promise<void>((r) => (done = r));
  const count = (n: number) => {
    got += n;
    if (got >= o.count) done();
  };
  if (name === 'sdk') {
    const { Consumer } = await import('tributary-client/consumer.js');
    const c = new Consumer({ brokers: [`127.0.0.1:${port}`], groupId: `bench-group-${name}`, topic, autoOffsetReset: 'earliest' });
    // resolved, or the SDK delivers the batch again (docs/sdk.md, eachBatch)
    const running = c.run({
      eachBatch: ({ messages, resolveOffset }) => {
        count(messages.length);
        resolveOffset(messages[messages.length - 1]!.offset);
      },
    });
    await all;
    await c.close();
    await running;
  } else if (name === 'kafkajs') {
    const { Kafka, logLevel } = await import('kafkajs');
    const c = new Kafka({ brokers: [`127.0.0.1:${kafkaPort}`], clientId: 'bench-kafka', logLevel: logLevel.NOTHING }).consumer({ groupId: `bench-group-${name}`, maxBytes: 64 * 1024 * 1024 });
    await c.connect();
    await c.subscribe({ topic, fromBeginning: true });
    await c.run({ eachBatch: async ({ batch }) => count(batch.messages.length) });
    await all;
    await c.disconnect();
  } else {
    const pk = (await import('@platformatic/kafka')) as unknown as {
      Consumer: new (o: Record<string, unknown>) => { consume(o: Record<string, unknown>): Promise<AsyncIterable<unknown> & { close(): Promise<void> }>; close(force?: boolean): Promise<void> };
    };
    const c = new pk.Consumer({ clientId: 'bench-kafka', groupId: `bench-group-${name}`, bootstrapBrokers: [`127.0.0.1:${kafkaPort}`] });
    const stream = await c.consume({ topics: [topic], mode: 'earliest', autocommit: true });
    for await (const _ of stream) {
      count(1);
      if (got >= o.count) break;
    }
    await stream.close();
    await c.close();
  }
  return got;
}

export async function run(argv: string[]): Promise<number> {
  const o = parseOptions(argv);
  if (typeof o === 'string') {
    process.stderr.write(o);
    return o === USAGE ? 0 : 2;
  }
  installCleanupHandlers();
  const dataDir = makeTempDir('tributary-bench-kafka-');
  const broker = spawnNode('broker', CLI, ['broker', 'start', '--host', '127.0.0.1', '--port', '0', '--health-port', '0', '--kafka-port', '0', '--data-dir', dataDir, '--log-level', 'warn']);
  const m = await broker.waitLine(/listening on [^\s]+:(\d+) .*Kafka protocol on [^\s]+:(\d+)/, 30_000);
  const port = Number(m[1]);
  const kafkaPort = Number(m[2]);
  const pid = broker.proc.pid;
  const admin = await Connection.connect({ host: '127.0.0.1', port });
  process.stdout.write(`kafka bench: ${fmtInt(o.count)} records x ${o.size} B per client, sends of ${o.chunk} records, ${o.inFlight} in flight, ${o.partitions} partitions, acks all; broker flush always\n\n`);
  const rows: { name: ClientName; w: WriteResult; readSeconds: number; readCpuMs: number; groupSeconds: number; groupCpuMs: number }[] = [];
  try {
    for (const name of o.clients) {
      await admin.command('CREATE', { topic: `bench-${name}`, partitions: o.partitions });
      const writer = name === 'sdk' ? await sdkWriter(port) : name === 'kafkajs' ? await kafkajsWriter(kafkaPort) : await platformaticWriter(kafkaPort);
      let w: WriteResult;
      try {
        w = await write(o, writer, pid);
      } finally {
        await writer.close();
      }
      const cpu0 = procCpuMs(pid) ?? 0;
      const t0 = nowMs();
      const read = name === 'sdk' ? await readMain(port, o) : await readKafka(kafkaPort, `bench-${name}`, o);
      const readSeconds = (nowMs() - t0) / 1000;
      const readCpuMs = (procCpuMs(pid) ?? 0) - cpu0;
      if (read !== o.count) throw new Error(`${name}: read ${read} records back, wrote ${o.count}`);
      const gcpu0 = procCpuMs(pid) ?? 0;
      const g0 = nowMs();
      const grouped = await groupRead(name, port, kafkaPort, `bench-${name}`, o);
      const groupSeconds = (nowMs() - g0) / 1000;
      const groupCpuMs = (procCpuMs(pid) ?? 0) - gcpu0;
      if (grouped < o.count) throw new Error(`${name}: its consumer read ${grouped} records, wrote ${o.count}`);
      rows.push({ name, w, readSeconds, readCpuMs, groupSeconds, groupCpuMs });
    }
  } finally {
    await admin.close();
    await broker.stop();
  }
  const ref = rows.find((r) => r.name === 'sdk');
  const ratio = (x: number, y: number | undefined) => (y === undefined || y === 0 ? '-' : `${fmtFixed(x / y, 2)}x`);
  const us = (ms: number) => (ms * 1000) / o.count;
  process.stdout.write(
    `${table(
      [
        'client',
        'write rec/s',
        'send p50 ms',
        'send p99 ms',
        'broker us/rec (write)',
        'read rec/s',
        'broker us/rec (read)',
        'group read rec/s',
        'broker us/rec (group)',
        'write rec/s vs sdk',
        'broker write CPU vs sdk',
        'broker read CPU vs sdk',
        'group read rec/s vs sdk',
      ],
      rows.map((r) => [
        r.name,
        fmtInt(o.count / r.w.seconds),
        fmtFixed(percentile(r.w.sendMs, 50), 2),
        fmtFixed(percentile(r.w.sendMs, 99), 2),
        fmtFixed(us(r.w.brokerCpuMs), 2),
        fmtInt(o.count / r.readSeconds),
        fmtFixed(us(r.readCpuMs), 2),
        fmtInt(o.count / r.groupSeconds),
        fmtFixed(us(r.groupCpuMs), 2),
        ratio(o.count / r.w.seconds, ref ? o.count / ref.w.seconds : undefined),
        ratio(r.w.brokerCpuMs, ref?.w.brokerCpuMs),
        ratio(r.readCpuMs, ref?.readCpuMs),
        ratio(o.count / r.groupSeconds, ref ? o.count / ref.groupSeconds : undefined),
      ]),
    )}\n`,
  );
  process.stdout.write('\nbroker CPU from /proc (10 ms ticks); the clients share this process and run one after another.\n');
  return 0;
}
