/**
 * A broker for the SDK consumer-group tests: started once per file with a short join window, with an admin
 * connection, and optionally one topic filled with keyed records.
 */
import { afterAll, afterEach, beforeAll } from 'vitest';
import type { Consumer } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import { parseLine } from 'tributary-protocol/command.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { BrokerProcess } from './launcher.js';

export interface GroupBroker {
  broker: BrokerProcess;
  admin: Connection;
  /** With `topic`: each partition's log end after the records were sent. */
  ends: number[];
}

/**
 * beforeAll: the broker (`--offsets-topic-partitions`, `--group-join-window-ms 20`) and an admin connection,
 * handed to `use`; with `topic`, that topic created and `records` records `k<i>`/`v<i>` sent to it before.
 * afterAll: both closed.
 */
export function useGroupBroker(opts: { offsetsPartitions: number; topic?: { name: string; partitions: number; records: number } }, use: (g: GroupBroker) => void): void {
  let g: GroupBroker | undefined;
  beforeAll(async () => {
    const broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', String(opts.offsetsPartitions), '--group-join-window-ms', '20'] });
    g = { broker, admin: await broker.connect(), ends: [] };
    const t = opts.topic;
    if (!t) return use(g);
    await g.admin.command('CREATE', { topic: t.name, partitions: t.partitions });
    const producer = new Producer({ brokers: [broker.address] });
    try {
      const metas = await producer.send({ topic: t.name, messages: Array.from({ length: t.records }, (_, i) => ({ key: `k${i}`, value: `v${i}` })) });
      for (let p = 0; p < t.partitions; p++) g.ends.push(Math.max(0, ...metas.filter((m) => m.partition === p).map((m) => m.offset + 1)));
    } finally {
      await producer.close();
    }
    use(g);
  });
  afterAll(async () => {
    await g?.admin.close();
    await g?.broker.dispose();
  });
}

/** A new topic `name` of `partitions` with `n` records over `keys` distinct keys; returns each partition's end offset. */
export async function keyedTopic(g: GroupBroker, name: string, partitions: number, n: number, keys: number): Promise<number[]> {
  await g.admin.command('CREATE', { topic: name, partitions });
  const producer = new Producer({ brokers: [g.broker.address], lingerMs: 2 });
  try {
    const metas = await producer.send({ topic: name, messages: Array.from({ length: n }, (_, i) => ({ key: `key-${i % keys}`, value: `r${i}` })) });
    return Array.from({ length: partitions }, (_, p) => Math.max(0, ...metas.filter((m) => m.partition === p).map((m) => m.offset + 1)));
  } finally {
    await producer.close();
  }
}

/** The group's committed offset of each partition of `topic` (FETCH_OFFSET), -1 where none is. */
export async function committedOffsets(admin: Connection, topic: string, group: string, partitions: number): Promise<number[]> {
  const out: number[] = [];
  for (let p = 0; p < partitions; p++) {
    const r = parseLine(await admin.command('FETCH_OFFSET', { topic, group, partition: p })).params;
    out.push(r.get('committed') === 'true' ? Number(r.get('offset')) : -1);
  }
  return out;
}

/** What useKeyedGroupTests gives a file: the broker, consumers closed after each test, keyed topics. */
export interface KeyedGroupTests {
  readonly broker: BrokerProcess;
  readonly admin: Connection;
  /** Consumers to close after the test. */
  consumers: Consumer[];
  /** A new topic `<prefix>-<n>` of `partitions` with `n` records over `keys` keys, and each partition's end. */
  keyedTopic(n: number, keys: number): Promise<{ topic: string; ends: number[] }>;
  /** The group's committed offsets of `topic`'s partitions (-1: none). */
  committed(topic: string, group: string): Promise<number[]>;
}

/** useGroupBroker (2 offsets partitions) for tests of groups over keyed topics of `partitions` partitions. */
export function useKeyedGroupTests(prefix: string, partitions: number): KeyedGroupTests {
  let g: GroupBroker | undefined;
  let seq = 0;
  useGroupBroker({ offsetsPartitions: 2 }, (x) => {
    g = x;
  });
  const t: KeyedGroupTests = {
    get broker() {
      return g!.broker;
    },
    get admin() {
      return g!.admin;
    },
    consumers: [],
    async keyedTopic(n, keys) {
      const topic = `${prefix}-${++seq}`;
      return { topic, ends: await keyedTopic(g!, topic, partitions, n, keys) };
    },
    committed: (topic, group) => committedOffsets(g!.admin, topic, group, partitions),
  };
  afterEach(async () => {
    await Promise.all(t.consumers.splice(0).map((c) => c.close()));
  });
  return t;
}
