/**
 * Kafka consumer groups on the Kafka port (docs/kafka.md, "Consumer groups") with unmodified clients:
 * a kafkajs group of three through a leave and a join, a group that resumes after a broker kill -9 from
 * its committed offsets, kcat's balanced consumer, @platformatic/kafka's consumer, and the fencing of the
 * classic protocol (generations, static members, monotonic commits) on raw requests. What a Kafka group
 * commits is the same offsets Tributary's GROUP_STATUS and FETCH_OFFSET show.
 */
import { type Consumer, Kafka, type PartitionAssigner, PartitionAssigners, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import { encodeAssignment, encodeSubscription } from 'tributary-broker/kafka/protocol/consumer-protocol.js';
import { MAX_DECODED_ENTRIES } from 'tributary-broker/kafka/protocol/reader.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { runCli } from '../../helpers/cli.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { kcat, RawKafka } from '../../helpers/raw-kafka.js';
import { peakRssMb } from '../../helpers/raw-client.js';
import { freePort } from '../../helpers/scripted-server.js';
import { until } from '../../helpers/util.js';

interface Received {
  member: number;
  partition: number;
  offset: number;
  key: string;
  value: string;
}

/** kafkajs consumers of one group, each recording what it received. */
class KafkajsGroup {
  readonly received: Received[] = [];
  private readonly consumers = new Map<number, Consumer>();

  constructor(
    private readonly kafka: Kafka,
    private readonly groupId: string,
    private readonly topic: string,
  ) {}

  async add(n: number): Promise<void> {
    const c = this.kafka.consumer({ groupId: this.groupId, sessionTimeout: 10_000, heartbeatInterval: 300, rebalanceTimeout: 10_000 });
    this.consumers.set(n, c);
    await c.connect();
    await c.subscribe({ topic: this.topic, fromBeginning: true });
    await c.run({
      eachMessage: async ({ partition, message }) => {
        this.received.push({ member: n, partition, offset: Number(message.offset), key: message.key!.toString(), value: message.value!.toString() });
      },
    });
  }

  async remove(n: number): Promise<void> {
    await this.consumers.get(n)?.disconnect();
    this.consumers.delete(n);
  }

  async close(): Promise<void> {
    await Promise.all([...this.consumers.values()].map((c) => c.disconnect().catch(() => {})));
    this.consumers.clear();
  }
}


/** Every value received exactly once, and each key's values in the order they were produced. */
function expectOnceInOrder(received: Received[], produced: string[]): void {
  const values = received.map((r) => r.value);
  expect(new Set(values).size, 'no value received twice').toBe(values.length);
  expect([...values].sort()).toEqual([...produced].sort());
  const lastSeq = new Map<string, number>();
  for (const r of received) {
    const seq = Number(r.value.split(':')[1]);
    expect(seq, `key ${r.key} out of order`).toBeGreaterThan(lastSeq.get(r.key) ?? -1);
    lastSeq.set(r.key, seq);
  }
}

describe('Kafka consumer groups', () => {
  let broker: BrokerProcess;
  let c: Connection;
  let bootstrap: string;
  let kafka: Kafka;
  let seq = 0;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--kafka-port', '0'] });
    bootstrap = `127.0.0.1:${broker.kafkaPort}`;
    kafka = new Kafka({ brokers: [bootstrap], clientId: 'groups-test', logLevel: logLevel.NOTHING });
    c = await broker.connect();
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  /** `count` records over 12 keys, values `key:seq` with seq rising across calls. */
  async function produce(topic: string, count: number): Promise<string[]> {
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    try {
      const messages = Array.from({ length: count }, () => {
        const n = seq++;
        return { key: `k${n % 12}`, value: `k${n % 12}:${n}` };
      });
      await producer.send({ topic, acks: -1, messages });
      return messages.map((m) => m.value);
    } finally {
      await producer.disconnect();
    }
  }

  it('a kafkajs group of three receives every record once, in order per key, through a member leaving and another joining', async () => {
    await c.command('CREATE', { topic: 'orders', partitions: 6 });
    const group = new KafkajsGroup(kafka, 'three', 'orders');
    try {
      const produced = await produce('orders', 300);
      await Promise.all([group.add(1), group.add(2), group.add(3)]);
      await until(() => group.received.length >= 300, 30_000, 'the first 300 records');
      // Six partitions over three members: every member got some.
      expect(new Set(group.received.map((r) => r.member))).toEqual(new Set([1, 2, 3]));
      const admin = kafka.admin();
      await admin.connect();
      try {
        const [described] = (await admin.describeGroups(['three'])).groups;
        expect(described).toMatchObject({ groupId: 'three', state: 'Stable', protocolType: 'consumer' });
        expect(described!.members).toHaveLength(3);
      } finally {
        await admin.disconnect();
      }

      await group.remove(3);
      produced.push(...(await produce('orders', 150)));
      await until(() => group.received.length >= 450, 30_000, 'the records after a member left');
      expect(group.received.slice(300).every((r) => r.member !== 3)).toBe(true);

      await group.add(4);
      produced.push(...(await produce('orders', 150)));
      await until(() => group.received.length >= 600, 30_000, 'the records after a member joined');
      await group.close();
      expectOnceInOrder(group.received, produced);
      expect(group.received.slice(450).some((r) => r.member === 4)).toBe(true);

      // What they committed is Tributary's: GROUP_STATUS has every partition at its log end.
      const status = JSON.parse(await c.command('GROUP_STATUS', { group: 'three' })) as { kind: string; state: string; offsets: { topic: string; partition: number; committed: number; lag: number }[] };
      expect(status.kind).toBe('kafka');
      expect(status.state).toBe('Empty');
      expect(status.offsets.map((o) => [o.topic, o.partition, o.lag])).toEqual([0, 1, 2, 3, 4, 5].map((p) => ['orders', p, 0]));
      expect(status.offsets.reduce((n, o) => n + o.committed, 0)).toBe(600);
    } finally {
      await group.close();
    }
  });

  it('a kafkajs consumer whose assigners share none with its group is refused with INCONSISTENT_GROUP_PROTOCOL; the group keeps its member', async () => {
    await c.command('CREATE', { topic: 'mixed', partitions: 2 });
    // kafkajs's round-robin assigner under another protocol name: no protocol in common with the default one.
    const renamed: PartitionAssigner = (config) => ({ ...PartitionAssigners.roundRobin(config), name: 'OtherAssigner' });
    const first = kafka.consumer({ groupId: 'mixed', sessionTimeout: 10_000, heartbeatInterval: 300 });
    const second = kafka.consumer({ groupId: 'mixed', sessionTimeout: 10_000, heartbeatInterval: 300, partitionAssigners: [renamed] });
    try {
      const got: string[] = [];
      await first.connect();
      await first.subscribe({ topic: 'mixed', fromBeginning: true });
      await first.run({ eachMessage: async ({ message }) => void got.push(message.value!.toString()) });
      await produce('mixed', 2);
      await until(() => got.length === 2, 30_000, 'the first member to consume');

      const crashes: Error[] = [];
      second.on(second.events.CRASH, (e) => void crashes.push(e.payload.error));
      await second.connect();
      await second.subscribe({ topic: 'mixed', fromBeginning: true });
      const ran = second.run({ eachMessage: async () => {} }).catch((e: Error) => void crashes.push(e));
      await until(() => crashes.length > 0, 30_000, 'the second member to be refused');
      await ran;
      expect((crashes[0] as Error & { type?: string }).type).toBe('INCONSISTENT_GROUP_PROTOCOL');

      // The group went on with its one member and protocol: no rebalance, the first member still consumes.
      const status = JSON.parse(await c.command('GROUP_STATUS', { group: 'mixed' })) as { generation: number; assignor: string; members: unknown[] };
      expect(status).toMatchObject({ generation: 1, assignor: 'RoundRobinAssigner' });
      expect(status.members).toHaveLength(1);
      await produce('mixed', 2);
      await until(() => got.length === 4, 30_000, 'the first member to consume after the refusal');
    } finally {
      await second.disconnect().catch(() => {});
      await first.disconnect().catch(() => {});
    }
  });

  it('kcat consumes in a group (-G) what Tributary produced; tributary group describe shows its offsets', async () => {
    await c.command('CREATE', { topic: 'kcat-g', partitions: 2 });
    for (let i = 0; i < 10; i++) await c.command('PUBLISH', { topic: 'kcat-g', partition: i % 2, message: `m${i}` });
    const out = await kcat(['-b', bootstrap, '-G', 'kcat-group', '-X', 'auto.offset.reset=earliest', '-e', '-f', '%p:%o:%s\\n', 'kcat-g']);
    expect(out.trim().split('\n').sort()).toEqual(Array.from({ length: 10 }, (_, i) => `${i % 2}:${Math.floor(i / 2)}:m${i}`).sort());
    const described = await runCli(['group', 'describe', 'kcat-group', '--bootstrap', broker.address]);
    expect(described.code, described.stderr).toBe(0);
    expect(described.stdout).toMatch(/protocol:\s+Kafka consumer/);
    expect(described.stdout).toMatch(/kcat-g\s+0\s+5\s+5\s+0/);
    expect(described.stdout).toMatch(/kcat-g\s+1\s+5\s+5\s+0/);
    // The same offsets through the main port.
    expect(await c.command('FETCH_OFFSET', { group: 'kcat-group', topic: 'kcat-g', partition: 1 })).toMatch(/offset=5/);
  });

  it('@platformatic/kafka consumes in a group (flexible versions) and commits', async () => {
    await c.command('CREATE', { topic: 'pk-g', partitions: 2 });
    const produced = await produce('pk-g', 20);
    const pk = await importPlatformatic();
    const consumer = new pk.Consumer({ clientId: 'pk-consumer', groupId: 'pk-group', bootstrapBrokers: [bootstrap], deserializers: pk.stringDeserializers, autocommit: false });
    const got: string[] = [];
    try {
      const stream = await consumer.consume({ topics: ['pk-g'], mode: 'earliest' });
      for await (const m of stream) {
        got.push(m.value as string);
        await m.commit();
        if (got.length === produced.length) break;
      }
      await stream.close();
    } finally {
      await consumer.close();
    }
    expect(got.sort()).toEqual([...produced].sort());
    const offsets = [0, 1].map(async (p) => Number(/offset=(\d+)/.exec(await c.command('FETCH_OFFSET', { group: 'pk-group', topic: 'pk-g', partition: p }))![1]));
    expect((await Promise.all(offsets)).reduce((a, b) => a + b, 0)).toBe(20);
  });
});

describe('Kafka consumer groups: fencing on raw requests', () => {
  let broker: BrokerProcess;
  let c: Connection;
  let raw: RawKafka;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--kafka-port', '0', '--group-join-window-ms', '0'] });
    c = await broker.connect();
    await c.command('CREATE', { topic: 'f', partitions: 2 });
    for (let i = 0; i < 10; i++) await c.command('PUBLISH', { topic: 'f', partition: 0, message: `r${i}` });
    raw = await RawKafka.connect(broker.kafkaPort);
  });

  afterAll(async () => {
    raw?.socket.destroy();
    await broker?.dispose();
  });

  const metadata = encodeSubscription(0, { topics: ['f'], userData: null });
  const join = (r: RawKafka, groupId: string, memberId: string, extra: KafkaStruct = {}) =>
    r.call(11, 5, { groupId, sessionTimeoutMs: 10_000, rebalanceTimeoutMs: 10_000, memberId, groupInstanceId: null, protocolType: 'consumer', protocols: [{ name: 'range', metadata }], ...extra });
  const commit = (groupId: string, memberId: string, generationId: number, offset: number, extra: KafkaStruct = {}) =>
    raw
      .call(8, 7, { groupId, generationId, memberId, groupInstanceId: null, topics: [{ name: 'f', partitions: [{ partitionIndex: 0, committedOffset: offset, committedLeaderEpoch: -1, committedMetadata: null }] }], ...extra })
      .then((res) => ((res.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!.errorCode);
  const committed = async (groupId: string) =>
    (((await raw.call(9, 4, { groupId, topics: [{ name: 'f', partitionIndexes: [0] }] })).topics as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!.committedOffset;
  const code = (name: string) => kafkaErrorCode(name);

  /** A member joined and synced alone: [member id, generation]. */
  async function soloMember(
    r: RawKafka,
    groupId: string,
    extra: KafkaStruct = {},
    assignment = encodeAssignment(0, { assignedPartitions: [{ topic: 'f', partitions: [0, 1] }], userData: null }),
  ): Promise<[string, number]> {
    let res = await join(r, groupId, '', extra);
    if (res.errorCode === code('MEMBER_ID_REQUIRED')) res = await join(r, groupId, res.memberId as string, extra);
    expect(res.errorCode).toBe(0);
    const memberId = res.memberId as string;
    const synced = await r.call(14, 3, { groupId, generationId: res.generationId, memberId, groupInstanceId: (extra.groupInstanceId as string | null) ?? null, assignments: [{ memberId, assignment }] });
    expect(synced.errorCode).toBe(0);
    expect(Buffer.compare(synced.assignment as Buffer, assignment)).toBe(0); // not toEqual: a 4 MB one takes it seconds
    return [memberId, res.generationId as number];
  }

  it('a member of an older generation, an unknown member and a commit below the committed offset are refused and change nothing', async () => {
    const [a, gen1] = await soloMember(raw, 'fenced');
    expect(await commit('fenced', a, gen1, 5)).toBe(0);
    // A second member joins: the first hears REBALANCE_IN_PROGRESS on its heartbeat and joins again.
    const other = await RawKafka.connect(broker.kafkaPort);
    try {
      const idB = (await join(other, 'fenced', '')).memberId as string;
      const joiningB = join(other, 'fenced', idB);
      await until(async () => (await raw.call(12, 3, { groupId: 'fenced', generationId: gen1, memberId: a, groupInstanceId: null })).errorCode === code('REBALANCE_IN_PROGRESS'), 10_000, 'the rebalance');
      // Before it rejoins, the member may still commit under its generation (Kafka's eager protocol).
      expect(await commit('fenced', a, gen1, 6)).toBe(0);
      const [rejoinA, joinedB] = await Promise.all([join(raw, 'fenced', a), joiningB]);
      expect(rejoinA.generationId).toBe(gen1 + 1);
      expect(joinedB.generationId).toBe(gen1 + 1);
      expect(await commit('fenced', a, gen1, 7)).toBe(code('ILLEGAL_GENERATION'));
      expect(await commit('fenced', 'nobody', gen1 + 1, 7)).toBe(code('UNKNOWN_MEMBER_ID'));
      // No client outside the group commits into it while it has members.
      expect(await commit('fenced', '', -1, 7)).toBe(code('UNKNOWN_MEMBER_ID'));
      // Syncing before the leader answered, then the leader's assignment completes both.
      const leader = rejoinA.leader === a ? raw : other;
      const leaderId = rejoinA.leader as string;
      const followerConn = leader === raw ? other : raw;
      const followerId = leaderId === a ? idB : a;
      const followerSync = followerConn.call(14, 3, { groupId: 'fenced', generationId: gen1 + 1, memberId: followerId, groupInstanceId: null, assignments: [] });
      // While the leader has not assigned, a commit is refused (REBALANCE_IN_PROGRESS): nothing to commit under yet.
      expect(await commit('fenced', followerId, gen1 + 1, 7)).toBe(code('REBALANCE_IN_PROGRESS'));
      const given = encodeAssignment(0, { assignedPartitions: [{ topic: 'f', partitions: [1] }], userData: null });
      const leaderSync = await leader.call(14, 3, { groupId: 'fenced', generationId: gen1 + 1, memberId: leaderId, groupInstanceId: null, assignments: [{ memberId: followerId, assignment: given }] });
      expect(leaderSync.errorCode).toBe(0);
      expect((await followerSync).assignment).toEqual(given);
      // Offsets never move back: a lower commit is refused (INVALID_COMMIT_OFFSET_SIZE), the offset stays.
      expect(await commit('fenced', a, gen1 + 1, 3)).toBe(code('INVALID_COMMIT_OFFSET_SIZE'));
      expect(await committed('fenced')).toBe(6);
      expect(await commit('fenced', a, gen1 + 1, 8)).toBe(0);
      expect(await committed('fenced')).toBe(8);
    } finally {
      other.socket.destroy();
    }
  });

  it('a static member that comes back under a new id fences the old one, keeping its assignment and generation', async () => {
    const [oldId, gen] = await soloMember(raw, 'static', { groupInstanceId: 'inst-1' });
    const again = await join(raw, 'static', '', { groupInstanceId: 'inst-1' });
    expect(again.errorCode).toBe(0);
    expect(again.memberId).not.toBe(oldId);
    const hb = (memberId: string, generationId: number) => raw.call(12, 3, { groupId: 'static', generationId, memberId, groupInstanceId: 'inst-1' }).then((r) => r.errorCode);
    expect(await hb(oldId, gen)).toBe(code('FENCED_INSTANCE_ID'));
    expect(await commit('static', oldId, gen, 1, { groupInstanceId: 'inst-1' })).toBe(code('FENCED_INSTANCE_ID'));
    // It was the leader, so a new generation follows; the new id is the member now.
    const synced = await raw.call(14, 3, { groupId: 'static', generationId: again.generationId, memberId: again.memberId, groupInstanceId: 'inst-1', assignments: [] });
    expect(synced.errorCode).toBe(0);
    expect(await hb(again.memberId as string, again.generationId as number)).toBe(0);
    // Leaving by instance id alone (LeaveGroup v3+).
    const left = await raw.call(13, 3, { groupId: 'static', members: [{ memberId: '', groupInstanceId: 'inst-1' }] });
    expect((left.members as KafkaStruct[])[0]!.errorCode).toBe(0);
    const [described] = (await raw.call(15, 4, { groups: ['static'], includeAuthorizedOperations: false })).groups as KafkaStruct[];
    expect(described!.groupState).toBe('Empty');
  });

  it('refuses what the classic protocol refuses, and a Tributary group id, with the proper codes', async () => {
    expect((await join(raw, 'bad id!', '')).errorCode).toBe(code('INVALID_GROUP_ID'));
    expect((await join(raw, 'short-session', '', { sessionTimeoutMs: 1 })).errorCode).toBe(code('INVALID_SESSION_TIMEOUT'));
    expect((await join(raw, 'no-protocols', '', { protocols: [] })).errorCode).toBe(code('INCONSISTENT_GROUP_PROTOCOL'));
    // A Tributary group with members: the two protocols do not share a group.
    await c.command('JOIN_GROUP', { group: 'native', topic: 'f', member: 'native-1' });
    expect((await join(raw, 'native', '', { groupInstanceId: 'i' })).errorCode).toBe(code('INCONSISTENT_GROUP_PROTOCOL'));
    expect(await commit('native', '', -1, 1)).toBe(code('INCONSISTENT_GROUP_PROTOCOL'));
    // And the other way round.
    await soloMember(raw, 'kafka-owned');
    await expect(c.command('JOIN_GROUP', { group: 'kafka-owned', topic: 'f', member: 'm-1' })).rejects.toThrow(/Kafka consumer group/);
    // Without members, a client outside any group may commit (generation -1), as Kafka allows.
    expect(await commit('loose', '', -1, 4)).toBe(0);
    expect(await committed('loose')).toBe(4);
    expect((await broker.health('/live')).status).toBe(200);
  });

  it("GROUP_STATUS reads a group's assignments within one decode budget: one past it is shown as its raw bytes", async () => {
    const members = async (group: string) => JSON.parse(await c.command('GROUP_STATUS', { group })).members as Array<Record<string, unknown>>;
    const r = await RawKafka.connect(broker.kafkaPort);
    try {
      await soloMember(r, 'modest');
      expect((await members('modest'))[0]!.assigned).toEqual(['f:0', 'f:1']);
      // A leader's 4 MB assignment: with its topic entry, one entry past what one decode may declare.
      const partitions = Array.from({ length: MAX_DECODED_ENTRIES }, (_, i) => i);
      const huge = encodeAssignment(0, { assignedPartitions: [{ topic: 'f', partitions }], userData: null });
      await soloMember(r, 'huge', {}, huge);
      const [member] = await members('huge');
      expect(member!.assigned).toBeUndefined();
      expect(Buffer.from(member!.assignment_bytes as string, 'base64').equals(huge)).toBe(true);
    } finally {
      r.socket.destroy();
    }
  });

  it("GROUP_STATUS bounds what members' assignments add: a topic name no topic has, or more than its budget, is shown as the raw bytes; bytes past it by their size", async () => {
    const r = await RawKafka.connect(broker.kafkaPort);
    try {
      const before = peakRssMb(broker);
      // 15,000 partitions of a 32,000-character topic: 92 KB that were expanded into a 480 MB reply.
      const long = encodeAssignment(0, { assignedPartitions: [{ topic: 'x'.repeat(32_000), partitions: new Array(15_000).fill(0) }], userData: null });
      await soloMember(r, 'long-topic', {}, long);
      // A legal topic name and 100,000 partitions: 25 MB of `topic:partition`, past the 8 MiB budget.
      const wide = encodeAssignment(0, { assignedPartitions: [{ topic: 'w'.repeat(238), partitions: Array.from({ length: 100_000 }, (_, i) => i) }], userData: null });
      await soloMember(r, 'wide', {}, wide);
      // 9 MiB that are no assignment: their base64 alone is past the budget.
      const opaque = Buffer.alloc(9 * 1024 * 1024, 0xff);
      await soloMember(r, 'opaque', {}, opaque);
      for (const [group, bytes] of [['long-topic', long], ['wide', wide]] as const) {
        const reply = await c.command('GROUP_STATUS', { group });
        expect(reply.length).toBeLessThan(1024 * 1024);
        const [member] = JSON.parse(reply).members as Array<Record<string, unknown>>;
        expect(member!.assigned).toBeUndefined();
        expect(Buffer.from(member!.assignment_bytes as string, 'base64').equals(bytes)).toBe(true);
      }
      const reply = await c.command('GROUP_STATUS', { group: 'opaque' });
      expect(reply.length).toBeLessThan(10_000);
      const [member] = JSON.parse(reply).members as Array<Record<string, unknown>>;
      expect(member).toMatchObject({ assignment_size: opaque.length });
      expect(member!.assignment_bytes).toBeUndefined();
      // The console's group list describes every group.
      const res = await fetch(`http://127.0.0.1:${broker.healthPort}/api/v1/groups`);
      expect(res.status).toBe(200);
      const groups = ((await res.json()) as { groups: Array<{ group: string }> }).groups.map((g) => g.group);
      expect(groups).toEqual(expect.arrayContaining(['long-topic', 'wide', 'opaque']));
      // The assignments themselves are some 35 MB; the 480 MB reply took 2 GB.
      expect(peakRssMb(broker) - before).toBeLessThan(600);
      expect((await broker.health('/live')).status).toBe(200);
    } finally {
      r.socket.destroy();
    }
  });
});

describe('Kafka consumer groups across a broker kill -9', () => {
  it('resume from the committed offsets: nothing below them is delivered again, nothing after them is missed', async () => {
    const kafkaPort = await freePort();
    const broker = await BrokerProcess.start({ args: ['--kafka-port', String(kafkaPort), '--flush', 'always'] });
    const kafka = new Kafka({ brokers: [`127.0.0.1:${kafkaPort}`], clientId: 'resume', logLevel: logLevel.NOTHING, retry: { retries: 20, initialRetryTime: 100 } });
    const values = (from: number, n: number) => Array.from({ length: n }, (_, i) => ({ key: `k${(from + i) % 4}`, value: `k${(from + i) % 4}:${from + i}` }));
    try {
      const c = await broker.connect();
      await c.command('CREATE', { topic: 'resume', partitions: 2 });
      const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
      await producer.connect();
      await producer.send({ topic: 'resume', acks: -1, messages: values(0, 50) });
      await producer.disconnect();

      const first = new KafkajsGroup(kafka, 'resumer', 'resume');
      await first.add(1);
      await until(() => first.received.length >= 50, 30_000, 'the first 50');
      await first.close(); // commits what it processed
      const before = await kafkaOffsets(kafka, 'resumer', 'resume');
      expect(before.reduce((a, b) => a + b, 0)).toBe(50);

      await broker.kill();
      await broker.relaunch();
      const again = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
      await again.connect();
      await again.send({ topic: 'resume', acks: -1, messages: values(50, 20) });
      await again.disconnect();

      const second = new KafkajsGroup(kafka, 'resumer', 'resume');
      try {
        await second.add(2);
        await until(() => second.received.length >= 20, 30_000, 'the 20 after the restart');
        await second.close();
        expect(second.received.map((r) => r.value).sort()).toEqual(values(50, 20).map((m) => m.value).sort());
        for (const r of second.received) expect(r.offset).toBeGreaterThanOrEqual(before[r.partition]!);
        expectOnceInOrder([...first.received, ...second.received], values(0, 70).map((m) => m.value));
      } finally {
        await second.close();
      }
    } finally {
      await broker.dispose();
    }
  });
});

async function kafkaOffsets(kafka: Kafka, groupId: string, topic: string): Promise<number[]> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const [t] = await admin.fetchOffsets({ groupId, topics: [topic] });
    return t!.partitions.sort((a, b) => a.partition - b.partition).map((p) => Number(p.offset));
  } finally {
    await admin.disconnect();
  }
}

interface PlatformaticConsumerClients {
  Consumer: new (o: Record<string, unknown>) => {
    consume(o: Record<string, unknown>): Promise<AsyncIterable<{ value: unknown; commit(): Promise<void> }> & { close(): Promise<void> }>;
    close(force?: boolean): Promise<void>;
  };
  stringDeserializers: unknown;
}

/** @platformatic/kafka, after the Promise.withResolvers stand-in it needs on Node 20. */
async function importPlatformatic(): Promise<PlatformaticConsumerClients> {
  await import('../../helpers/with-resolvers.js');
  return (await import('@platformatic/kafka')) as unknown as PlatformaticConsumerClients;
}
