/**
 * Kafka transactions on a 3-broker cluster (docs/kafka.md, "Transactions"): the transactional id's
 * coordinator is one broker, the partitions' leaders are all three, and the group's coordinator another.
 * A kafkajs transaction over partitions led everywhere commits or aborts as one; a leader that is not the
 * coordinator refuses a batch for a partition the transaction never added, storing nothing; an
 * exactly-once kafkajs pipeline whose member is killed with SIGKILL mid-stream writes every input once,
 * with its offsets staged through the group's coordinator on another broker; a zombie's TxnOffsetCommit
 * relayed between the two coordinators keeps its Kafka error.
 */
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RecordAttr } from 'tributary-protocol/record.js';
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import { TestCluster } from '../../helpers/cluster.js';
import { EosWorker } from '../../helpers/eos-worker.js';
import { RawKafka } from '../../helpers/raw-kafka.js';

describe('Kafka transactions on a 3-broker cluster', () => {
  let cluster: TestCluster;
  let kafka: Kafka;
  let bootstrap: string;

  beforeAll(async () => {
    cluster = await TestCluster.start(3, ['--kafka-port', '0', '--min-insync-replicas', '2']);
    bootstrap = `127.0.0.1:${cluster.broker(0).kafkaPort}`;
    kafka = new Kafka({
      brokers: [0, 1, 2].map((id) => `127.0.0.1:${cluster.broker(id).kafkaPort}`),
      clientId: 'cluster-txn',
      logLevel: logLevel.NOTHING,
      retry: { retries: 10, initialRetryTime: 100, maxRetryTime: 1000 },
    });
  }, 120_000);

  afterAll(async () => {
    await cluster?.dispose();
  });

  /** The broker FindCoordinator names for a key (0: group, 1: transactional id). */
  async function coordinatorOf(key: string, keyType: 0 | 1): Promise<number> {
    const raw = await RawKafka.connect(cluster.broker(0).kafkaPort);
    try {
      return await cluster.waitFor(`the coordinator of ${key}`, async () => {
        const r = await raw.call(10, 3, { key, keyType });
        return r.errorCode === 0 ? (r.nodeId as number) : false;
      });
    } finally {
      raw.socket.destroy();
    }
  }

  async function createTopic(topic: string, partitions: number): Promise<number[]> {
    const c = await cluster.connect(0);
    try {
      await c.command('CREATE', { topic, partitions, replication_factor: 3 });
    } finally {
      await c.close();
    }
    return cluster.waitFor(`${topic} led with full ISRs`, async () => {
      const ps = (await cluster.status()).partitions.filter((p) => p.topic === topic).sort((a, b) => a.partition - b.partition);
      return ps.length === partitions && ps.every((p) => p.leader >= 0 && p.isr.length === 3) ? ps.map((p) => p.leader) : false;
    });
  }

  /** Every data value of the topic, read at each partition's leader (read_committed unless told otherwise). */
  async function values(topic: string, partitions: number, isolation: 'read_committed' | 'read_uncommitted' = 'read_committed'): Promise<string[]> {
    const out: string[] = [];
    for (let p = 0; p < partitions; p++) {
      const c = await cluster.connect((await cluster.leaderOf(topic, p)).id);
      try {
        for (let offset = 0; ; ) {
          const batch = await c.consume({ topic, partition: p, offset, batch: 1000, isolation });
          if (batch.records.length === 0) break;
          // Markers are records too (read_uncommitted shows them): only data counts.
          for (const r of batch.records) if ((r.attributes & RecordAttr.CONTROL) === 0) out.push(r.value.toString());
          offset = batch.records[batch.records.length - 1]!.offset + 1;
        }
      } finally {
        await c.close().catch(() => {});
      }
    }
    return out;
  }

  it('a kafkajs transaction over partitions led by every broker commits or aborts as one', async () => {
    const leaders = await createTopic('ctx', 6);
    const coordinator = await coordinatorOf('ctx-producer', 1);
    expect(leaders.filter((l) => l !== coordinator).length, 'partitions led away from the coordinator').toBeGreaterThan(0);
    const producer = kafka.producer({ transactionalId: 'ctx-producer', idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    try {
      const send = async (prefix: string, end: 'commit' | 'abort') => {
        const txn = await producer.transaction();
        for (let p = 0; p < 6; p++) await txn.send({ topic: 'ctx', messages: [0, 1, 2].map((i) => ({ partition: p, value: `${prefix}-${p}-${i}` })) });
        await (end === 'commit' ? txn.commit() : txn.abort());
      };
      await send('kept', 'commit');
      await send('dropped', 'abort');
      await send('kept2', 'commit');
    } finally {
      await producer.disconnect();
    }
    const want = ['kept', 'kept2'].flatMap((prefix) => [0, 1, 2, 3, 4, 5].flatMap((p) => [0, 1, 2].map((i) => `${prefix}-${p}-${i}`)));
    const committed = await values('ctx', 6);
    expect(committed.sort()).toEqual([...want].sort());
    // The aborted records are in the logs (read_uncommitted), never read committed.
    expect((await values('ctx', 6, 'read_uncommitted')).filter((v) => v.startsWith('dropped-'))).toHaveLength(18);
  });

  it('a leader that is not the coordinator refuses a batch for a partition the transaction did not add, storing nothing', async () => {
    const leaders = await createTopic('ctx-raw', 3);
    const coordinator = await coordinatorOf('ctx-raw-id', 1);
    const partition = leaders.findIndex((l) => l !== coordinator);
    expect(partition).toBeGreaterThanOrEqual(0);
    const raw = await RawKafka.connect(cluster.broker(coordinator).kafkaPort);
    const atLeader = await RawKafka.connect(cluster.broker(leaders[partition]!).kafkaPort);
    try {
      const init = await raw.call(22, 1, { transactionalId: 'ctx-raw-id', transactionTimeoutMs: 60_000 });
      expect(init.errorCode).toBe(0);
      const txn = { transactionalId: 'ctx-raw-id', producerId: init.producerId as bigint, producerEpoch: init.producerEpoch as number };
      const other = (partition + 1) % 3;
      // Another partition is added (the transaction is open), not this one.
      expect((await raw.call(24, 1, { ...txn, topics: [{ name: 'ctx-raw', partitions: [other] }] })).results).toEqual([{ name: 'ctx-raw', results: [{ partitionIndex: other, errorCode: 0 }] }]);
      const batch = (value: string, producerEpoch: number) =>
        encodeRecordBatch({ records: [{ key: null, value: Buffer.from(value) }], producerId: Number(txn.producerId), producerEpoch, baseSequence: 0, transactional: true });
      const produce = (value: string, producerEpoch = txn.producerEpoch) =>
        atLeader.call(0, 7, { transactionalId: 'ctx-raw-id', acks: -1, timeoutMs: 5000, topicData: [{ name: 'ctx-raw', partitionData: [{ index: partition, records: batch(value, producerEpoch) }] }] });
      const first = (r: Awaited<ReturnType<typeof produce>>) => ((r.responses as Array<{ partitionResponses: Array<{ errorCode: number }> }>)[0]!.partitionResponses[0]!.errorCode);
      expect(first(await produce('not-added'))).toBe(kafkaErrorCode('INVALID_TXN_STATE'));
      // Added now: the same leader takes it; an older epoch of the id is fenced there too.
      expect((await raw.call(24, 1, { ...txn, topics: [{ name: 'ctx-raw', partitions: [partition] }] })).results).toEqual([{ name: 'ctx-raw', results: [{ partitionIndex: partition, errorCode: 0 }] }]);
      if (txn.producerEpoch > 0) expect(first(await produce('stale', txn.producerEpoch - 1))).toBe(kafkaErrorCode('INVALID_PRODUCER_EPOCH'));
      expect(first(await produce('added'))).toBe(0);
      expect((await raw.call(26, 1, { ...txn, committed: true })).errorCode).toBe(0);
      expect(await values('ctx-raw', 3, 'read_uncommitted')).toEqual(['added']);
      expect(await values('ctx-raw', 3)).toEqual(['added']);
    } finally {
      raw.socket.destroy();
      atLeader.socket.destroy();
    }
  });

  it("a zombie's TxnOffsetCommit gets the group's own Kafka error although the id's coordinator is another broker", async () => {
    await createTopic('ctx-zombie', 1);
    let groupId = '';
    let transactionalId = '';
    let at = { group: -1, txn: -1 };
    for (let i = 0; !groupId; i++) {
      const g = await coordinatorOf(`ctx-zombie-group-${i}`, 0);
      const t = await coordinatorOf(`ctx-zombie-id-${i}`, 1);
      if (g !== t) [groupId, transactionalId, at] = [`ctx-zombie-group-${i}`, `ctx-zombie-id-${i}`, { group: g, txn: t }];
    }
    const atGroup = await RawKafka.connect(cluster.broker(at.group).kafkaPort);
    const atTxn = await RawKafka.connect(cluster.broker(at.txn).kafkaPort);
    try {
      const protocols = [{ name: 'range', metadata: Buffer.from([0, 0, 0, 0, 0, 0, 0, 0, 0, 0]) }];
      const joined = await atGroup.call(11, 0, { groupId, sessionTimeoutMs: 30_000, memberId: '', protocolType: 'consumer', protocols });
      expect(joined.errorCode).toBe(0);
      const member = { memberId: joined.memberId as string, generationId: joined.generationId as number };
      expect((await atGroup.call(14, 0, { groupId, ...member, assignments: [{ memberId: member.memberId, assignment: Buffer.alloc(0) }] })).errorCode).toBe(0);
      const init = await atTxn.call(22, 1, { transactionalId, transactionTimeoutMs: 60_000 });
      expect(init.errorCode).toBe(0);
      const p = { producerId: init.producerId as bigint, producerEpoch: init.producerEpoch as number };
      expect((await atTxn.call(25, 1, { transactionalId, ...p, groupId })).errorCode).toBe(0);
      const commit = async (generationId: number, memberId: string, offset: number) => {
        const res = await atGroup.call(28, 3, {
          transactionalId,
          groupId,
          ...p,
          generationId,
          memberId,
          groupInstanceId: null,
          topics: [{ name: 'ctx-zombie', partitions: [{ partitionIndex: 0, committedOffset: offset, committedLeaderEpoch: -1, committedMetadata: null }] }],
        });
        return ((res.topics as Array<{ partitions: Array<{ errorCode: number }> }>)[0]!.partitions[0]!).errorCode;
      };
      // Refused by the group's coordinator, relayed through the id's coordinator and back: Kafka's own codes
      // (a client treats UNKNOWN_SERVER_ERROR as fatal, these as a fenced member).
      expect(await commit(member.generationId - 1, member.memberId, 3)).toBe(kafkaErrorCode('ILLEGAL_GENERATION'));
      expect(await commit(member.generationId, 'no-such-member', 3)).toBe(kafkaErrorCode('UNKNOWN_MEMBER_ID'));
      expect(await commit(member.generationId, member.memberId, 3)).toBe(0);
      expect((await atTxn.call(26, 1, { transactionalId, ...p, committed: true })).errorCode).toBe(0);
      const committed = await cluster.waitFor('the offset committed', async () => {
        const res = await atGroup.call(9, 7, { groupId, topics: [{ name: 'ctx-zombie', partitionIndexes: [0] }], requireStable: true });
        const part = (res.topics as Array<{ partitions: Array<{ errorCode: number; committedOffset: bigint | number }> }>)[0]!.partitions[0]!;
        return part.errorCode === 0 ? Number(part.committedOffset) : false;
      });
      expect(committed).toBe(3);
    } finally {
      atGroup.socket.destroy();
      atTxn.socket.destroy();
    }
  });

  it('an exactly-once kafkajs pipeline whose member is killed with SIGKILL mid-stream: every input once in the output, offsets at the end', async () => {
    const N = 600;
    const partitions = 3;
    await createTopic('ceos-in', partitions);
    await createTopic('ceos-out', partitions);
    // The group's coordinator and the transactional id's on different brokers: TxnOffsetCommit crosses over.
    let groupId = '';
    let transactionalId = '';
    for (let i = 0; !groupId; i++) {
      const g = await coordinatorOf(`ceos-group-${i}`, 0);
      const t = await coordinatorOf(`ceos-worker-${i}`, 1);
      if (g !== t) [groupId, transactionalId] = [`ceos-group-${i}`, `ceos-worker-${i}`];
    }
    const input = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await input.connect();
    const expected: string[] = [];
    try {
      for (let p = 0; p < partitions; p++) {
        const messages = Array.from({ length: N / partitions }, (_, i) => ({ partition: p, key: `k${p}`, value: `in-${p}-${i}` }));
        await input.send({ topic: 'ceos-in', acks: -1, messages });
        expected.push(...messages.map((m) => `out:${m.value}`));
      }
    } finally {
      await input.disconnect();
    }
    const cfg = { bootstrap, groupId, input: 'ceos-in', output: 'ceos-out', transactionalId, holdMs: 5, maxBytesPerPartition: 1024 };
    const workers: EosWorker[] = [];
    try {
      // a commits 4 transactions, then stops inside the 5th, its records sent: killed there.
      const a = new EosWorker({ ...cfg, name: 'worker-a', freezeAfter: 4 });
      workers.push(a);
      await cluster.waitFor(`worker a inside its 5th transaction (${a.stderr})`, async () => a.of('frozen').length > 0, 60_000);
      await a.kill();
      expect(a.of('committed')).toHaveLength(4);
      const doneByA = a.of('committed').reduce((n, l) => n + l.count!, 0);
      expect(doneByA).toBeLessThan(N);
      expect((await values('ceos-out', partitions, 'read_uncommitted')).length, 'the open transaction wrote records').toBe(doneByA + a.of('frozen')[0]!.count!);
      const b = new EosWorker({ ...cfg, name: 'worker-b' });
      workers.push(b);
      const ends = new Map<number, number>();
      await cluster.waitFor(
        `worker b reaching the input's end (${b.stderr})`,
        async () => {
          for (const l of b.of('committed')) ends.set(l.partition!, Math.max(ends.get(l.partition!) ?? 0, l.offset!));
          return [...Array(partitions).keys()].every((p) => ends.get(p) === N / partitions);
        },
        90_000,
      );
      expect(b.of('error'), 'worker b failed no transaction').toEqual([]);
      const admin = kafka.admin();
      await admin.connect();
      try {
        const offsets = await admin.fetchOffsets({ groupId, topics: ['ceos-in'] });
        expect(offsets[0]!.partitions.map((p) => [p.partition, Number(p.offset)]).sort()).toEqual([...Array(partitions).keys()].map((p) => [p, N / partitions]));
      } finally {
        await admin.disconnect();
      }
      const output = await values('ceos-out', partitions);
      expect(output.length, 'no duplicate and no loss').toBe(N);
      expect([...output].sort()).toEqual([...expected].sort());
    } finally {
      for (const w of workers) await w.kill();
    }
  }, 240_000);
});
