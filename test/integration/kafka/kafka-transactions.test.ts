/**
 * Kafka transactions on the Kafka port (docs/kafka.md, "Transactions"), on Tributary's transaction
 * coordinator: kafkajs 2.2.4's transactional producer (commit, abort, fencing by a second producer of the
 * id), @platformatic/kafka's, kcat's (librdkafka), an exactly-once consume-process-produce pipeline whose member is killed with SIGKILL mid-stream,
 * and raw requests for what a client must not get away with.
 */
import { Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { EosWorker } from '../../helpers/eos-worker.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { kcat, RawKafka } from '../../helpers/raw-kafka.js';
import { until } from '../../helpers/util.js';

/** A transactional RecordBatch v2 of one record, as a producer with id `p` sends it. */
function txnBatch(p: { producerId: bigint; producerEpoch: number }, value: string, baseSequence = 0): Buffer {
  return encodeRecordBatch({
    records: [{ key: null, value: Buffer.from(value) }],
    producerId: Number(p.producerId),
    producerEpoch: p.producerEpoch,
    baseSequence,
    transactional: true,
  });
}

describe('Kafka transactions', () => {
  let broker: BrokerProcess;
  let c: Connection;
  let bootstrap: string;
  let kafka: Kafka;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--kafka-port', '0'] });
    bootstrap = `127.0.0.1:${broker.kafkaPort}`;
    kafka = new Kafka({ brokers: [bootstrap], clientId: 'txn-test', logLevel: logLevel.NOTHING, retry: { retries: 5, initialRetryTime: 50 } });
    c = await broker.connect();
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  /** Every value of the topic a read_committed reader gets through Tributary's CONSUME, partition by partition. */
  async function committedValues(topic: string, partitions: number): Promise<string[]> {
    const values: string[] = [];
    for (let p = 0; p < partitions; p++) {
      let offset = 0;
      for (;;) {
        const batch = await c.consume({ topic, partition: p, offset, batch: 1000, isolation: 'read_committed' });
        if (batch.records.length === 0) break;
        for (const r of batch.records) values.push(r.value.toString());
        offset = batch.records[batch.records.length - 1]!.offset + 1;
      }
    }
    return values;
  }

  /** What a kafkajs read_committed consumer of a fresh group receives, once it has read up to every partition's end. */
  async function kafkajsCommitted(topic: string, groupId: string): Promise<string[]> {
    const admin = kafka.admin();
    await admin.connect();
    const consumer = kafka.consumer({ groupId, readUncommitted: false, sessionTimeout: 10_000, heartbeatInterval: 300 });
    try {
      // read_committed end offsets (the last stable offsets): a reader is done once it reached them.
      const ends = new Map((await admin.fetchTopicOffsets(topic)).map((o) => [o.partition, Number(o.high)]));
      const reached = new Map<number, number>();
      const values: string[] = [];
      await consumer.connect();
      await consumer.subscribe({ topic, fromBeginning: true });
      await consumer.run({
        eachBatch: async ({ batch }) => {
          for (const m of batch.messages) values.push(m.value!.toString());
          reached.set(batch.partition, Number(batch.highWatermark));
          if (batch.messages.length > 0) reached.set(batch.partition, Math.max(reached.get(batch.partition) ?? 0, Number(batch.lastOffset()) + 1));
        },
      });
      await until(() => [...ends].every(([p, end]) => end === 0 || (reached.get(p) ?? 0) >= end), 20_000, `kafkajs reading ${topic} to its end`);
      return values;
    } finally {
      await consumer.disconnect().catch(() => {});
      await admin.disconnect().catch(() => {});
    }
  }

  it('a kafkajs transaction that commits is read by read_committed consumers; one that aborts never is', async () => {
    await c.command('CREATE', { topic: 'ktx-basic', partitions: 3 });
    const producer = kafka.producer({ transactionalId: 'ktx-basic-1', idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    try {
      const committed = await producer.transaction();
      await committed.send({ topic: 'ktx-basic', messages: Array.from({ length: 30 }, (_, i) => ({ key: `k${i}`, value: `committed-${i}` })) });
      // Open: a read_committed reader does not see it yet (read_uncommitted does).
      expect(await committedValues('ktx-basic', 3)).toEqual([]);
      const uncommitted = await c.consume({ topic: 'ktx-basic', partition: 0, offset: 0, batch: 1000, isolation: 'read_uncommitted' });
      const status = await c.command('TXN_STATUS', { transactional_id: 'ktx-basic-1' });
      expect(status).toMatch(/\bstate=open\b/);
      expect(status).toMatch(/\bpartitions=3\b/);
      await committed.commit();
      const aborted = await producer.transaction();
      await aborted.send({ topic: 'ktx-basic', messages: Array.from({ length: 30 }, (_, i) => ({ key: `k${i}`, value: `aborted-${i}` })) });
      await aborted.abort();
      const want = Array.from({ length: 30 }, (_, i) => `committed-${i}`).sort();
      expect((await committedValues('ktx-basic', 3)).sort()).toEqual(want);
      expect((await kafkajsCommitted('ktx-basic', 'ktx-basic-reader')).sort()).toEqual(want);
      // librdkafka reads the same and reaches the end (past the markers) without waiting for more.
      const kc = await kcat(['-b', bootstrap, '-C', '-t', 'ktx-basic', '-e', '-q', '-X', 'isolation.level=read_committed', '-o', 'beginning', '-f', '%s\n']);
      expect(kc.trim().split('\n').sort()).toEqual(want);
      expect(uncommitted.records.length).toBeGreaterThan(0);
      expect(uncommitted.records.every((r) => r.value.toString().startsWith('committed-'))).toBe(true);
    } finally {
      await producer.disconnect();
    }
  });

  it("@platformatic/kafka's transactional producer (InitProducerId v4 naming producer id 0, epoch 0) commits and aborts", async () => {
    await c.command('CREATE', { topic: 'ktx-pk', partitions: 2 });
    await import('../../helpers/with-resolvers.js');
    const pk = (await import('@platformatic/kafka')) as unknown as PlatformaticTxnClients;
    const producer = new pk.Producer({
      clientId: 'pk-txn',
      bootstrapBrokers: [bootstrap],
      serializers: pk.stringSerializers,
      transactionalId: 'ktx-pk-1',
      idempotent: true,
    });
    try {
      const committed = await producer.beginTransaction();
      await committed.send({
        messages: [
          { topic: 'ktx-pk', value: 'c1', partition: 0 },
          { topic: 'ktx-pk', value: 'c2', partition: 1 },
        ],
      });
      await committed.commit();
      const aborted = await producer.beginTransaction();
      await aborted.send({ messages: [{ topic: 'ktx-pk', value: 'a1', partition: 0 }] });
      await aborted.abort();
    } finally {
      await producer.close();
    }
    expect((await committedValues('ktx-pk', 2)).sort()).toEqual(['c1', 'c2']);
  });

  it('kcat (librdkafka) produces in a transaction; its records are read once it committed', async () => {
    await c.command('CREATE', { topic: 'ktx-kcat', partitions: 2 });
    const out = await kcat(['-b', bootstrap, '-P', '-t', 'ktx-kcat', '-X', 'transactional.id=ktx-kcat-1', '-K', ':'], 'a:one\nb:two\nc:three\n');
    expect(out).toBe('');
    expect((await committedValues('ktx-kcat', 2)).sort()).toEqual(['one', 'three', 'two']);
    expect(await c.command('TXN_STATUS', { transactional_id: 'ktx-kcat-1' })).toMatch(/\bstate=committed\b/);
  });

  it('a second producer of the id fences the first, whose open transaction is aborted', async () => {
    await c.command('CREATE', { topic: 'ktx-fence', partitions: 1 });
    const first = kafka.producer({ transactionalId: 'ktx-fence-1', idempotent: true, maxInFlightRequests: 1 });
    const second = kafka.producer({ transactionalId: 'ktx-fence-1', idempotent: true, maxInFlightRequests: 1 });
    await first.connect();
    try {
      const zombie = await first.transaction();
      await zombie.send({ topic: 'ktx-fence', messages: [{ value: 'zombie-1' }] });
      await second.connect(); // InitProducerId: the epoch moves on, the first's transaction is aborted
      const txn = await second.transaction();
      await txn.send({ topic: 'ktx-fence', messages: [{ value: 'second' }] });
      await txn.commit();
      const err = await zombie.send({ topic: 'ktx-fence', messages: [{ value: 'zombie-2' }] }).then(
        () => undefined,
        (e: unknown) => e as { type?: string; message?: string },
      );
      // kafkajs 2.2.4 asks with AddPartitionsToTxn v1, older than PRODUCER_FENCED (KIP-588): INVALID_PRODUCER_EPOCH.
      expect(err?.type).toBe('INVALID_PRODUCER_EPOCH');
      const commit = await zombie.commit().then(
        () => undefined,
        (e: unknown) => e as { type?: string },
      );
      expect(commit?.type).toBe('INVALID_PRODUCER_EPOCH');
      expect(await committedValues('ktx-fence', 1)).toEqual(['second']);
      expect(await kafkajsCommitted('ktx-fence', 'ktx-fence-reader')).toEqual(['second']);
    } finally {
      await first.disconnect().catch(() => {});
      await second.disconnect();
    }
  });

  it('an exactly-once kafkajs pipeline whose member is killed with SIGKILL mid-stream: every input once in the output, offsets at the end', async () => {
    const N = 900;
    const partitions = 3;
    await c.command('CREATE', { topic: 'eos-in', partitions });
    await c.command('CREATE', { topic: 'eos-out', partitions });
    const input = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await input.connect();
    const expected: string[] = [];
    for (let p = 0; p < partitions; p++) {
      const messages = Array.from({ length: N / partitions }, (_, i) => ({ partition: p, key: `k${p}`, value: `in-${p}-${i}` }));
      await input.send({ topic: 'eos-in', acks: -1, messages });
      expected.push(...messages.map((m) => `out:${m.value}`));
    }
    await input.disconnect();
    const cfg = { bootstrap, groupId: 'eos-group', input: 'eos-in', output: 'eos-out', transactionalId: 'eos-worker', holdMs: 5, maxBytesPerPartition: 1024 };
    const workers: EosWorker[] = [];
    try {
      // a commits 6 transactions, then stops inside the 7th, its records sent: killed there.
      const a = new EosWorker({ ...cfg, name: 'worker-a', freezeAfter: 6 });
      workers.push(a);
      await until(() => a.of('frozen').length > 0, 30_000, `worker a inside its 7th transaction (${a.stderr})`);
      await a.kill();
      expect(a.of('committed')).toHaveLength(6);
      expect(await c.command('TXN_STATUS', { transactional_id: 'eos-worker' })).toMatch(/\bstate=open\b/);
      const doneByA = a.of('committed').reduce((n, l) => n + l.count!, 0);
      expect(doneByA).toBeLessThan(N); // killed mid-stream
      let written = 0;
      for (let p = 0; p < partitions; p++) {
        const all = await c.consume({ topic: 'eos-out', partition: p, offset: 0, batch: 10_000, isolation: 'read_uncommitted' });
        written += all.records.filter((r) => r.value.toString().startsWith('out:')).length;
      }
      expect(written, 'the open transaction wrote records that must never be read').toBe(doneByA + a.of('frozen')[0]!.count!);
      const b = new EosWorker({ ...cfg, name: 'worker-b' });
      workers.push(b);
      // b's committed offsets reach the end of every input partition.
      const ends = new Map<number, number>();
      await until(
        () => {
          for (const l of b.of('committed')) ends.set(l.partition!, Math.max(ends.get(l.partition!) ?? 0, l.offset!));
          return [...Array(partitions).keys()].every((p) => ends.get(p) === N / partitions);
        },
        60_000,
        `worker b reaching the input's end (${b.stderr})`,
      );
      expect(b.of('error'), 'worker b failed no transaction').toEqual([]);
      const admin = kafka.admin();
      await admin.connect();
      try {
        const offsets = await admin.fetchOffsets({ groupId: 'eos-group', topics: ['eos-in'] });
        expect(offsets[0]!.partitions.map((p) => [p.partition, Number(p.offset)]).sort()).toEqual(
          [...Array(partitions).keys()].map((p) => [p, N / partitions]),
        );
      } finally {
        await admin.disconnect();
      }
      // The history: every input's transform exactly once, none lost, none twice, whatever a was doing when killed.
      const output = await committedValues('eos-out', partitions);
      expect(output.length, 'no duplicate and no loss').toBe(N);
      expect(new Set(output).size).toBe(N);
      expect([...output].sort()).toEqual([...expected].sort());
      expect((await kafkajsCommitted('eos-out', 'eos-verify')).sort()).toEqual([...expected].sort());
    } finally {
      for (const w of workers) await w.kill();
    }
  });

  describe('raw requests', () => {
    const producerOf = async (raw: RawKafka, transactionalId: string) => {
      const init = await raw.call(22, 1, { transactionalId, transactionTimeoutMs: 60_000 });
      expect(init.errorCode).toBe(0);
      return { producerId: init.producerId as bigint, producerEpoch: init.producerEpoch as number };
    };
    const produce = (raw: RawKafka, transactionalId: string, topic: string, partition: number, records: Buffer) =>
      raw.call(0, 7, { transactionalId, acks: -1, timeoutMs: 1000, topicData: [{ name: topic, partitionData: [{ index: partition, records }] }] });
    const produceCode = (res: KafkaStruct) => ((res.responses as KafkaStruct[])[0]!.partitionResponses as KafkaStruct[])[0]!.errorCode as number;

    it('a transactional batch for a partition not added to the transaction is INVALID_TXN_STATE and stores nothing', async () => {
      await c.command('CREATE', { topic: 'ktx-raw', partitions: 2 });
      const raw = await RawKafka.connect(broker.kafkaPort);
      try {
        const p = await producerOf(raw, 'ktx-raw-1');
        // No transaction at all yet.
        expect(produceCode(await produce(raw, 'ktx-raw-1', 'ktx-raw', 0, txnBatch(p, 'nothing-open')))).toBe(kafkaErrorCode('INVALID_TXN_STATE'));
        const added = await raw.call(24, 1, { transactionalId: 'ktx-raw-1', ...p, topics: [{ name: 'ktx-raw', partitions: [0] }] });
        expect(((added.results as KafkaStruct[])[0]!.results as KafkaStruct[])[0]!.errorCode).toBe(0);
        // Partition 1 was not added; partition 0 was.
        expect(produceCode(await produce(raw, 'ktx-raw-1', 'ktx-raw', 1, txnBatch(p, 'not-added')))).toBe(kafkaErrorCode('INVALID_TXN_STATE'));
        expect(produceCode(await produce(raw, 'ktx-raw-1', 'ktx-raw', 0, txnBatch(p, 'added')))).toBe(0);
        // An older epoch of the id is fenced, and a batch of another producer id refused.
        expect(produceCode(await produce(raw, 'ktx-raw-1', 'ktx-raw', 0, txnBatch({ ...p, producerId: p.producerId + 1000n }, 'stranger', 1)))).toBe(
          kafkaErrorCode('INVALID_PRODUCER_EPOCH'),
        );
        const unknown = await raw.call(24, 1, {
          transactionalId: 'ktx-raw-1',
          ...p,
          topics: [
            { name: 'ktx-raw-none', partitions: [0] },
            { name: 'ktx-raw', partitions: [1] },
          ],
        });
        expect((unknown.results as KafkaStruct[]).map((t) => (t.results as KafkaStruct[])[0]!.errorCode as number)).toEqual([
          kafkaErrorCode('UNKNOWN_TOPIC_OR_PARTITION'),
          kafkaErrorCode('OPERATION_NOT_ATTEMPTED'),
        ]);
        expect((await raw.call(26, 1, { transactionalId: 'ktx-raw-1', ...p, committed: true })).errorCode).toBe(0);
        const read = async (partition: number) =>
          (await c.consume({ topic: 'ktx-raw', partition, offset: 0, batch: 100, isolation: 'read_committed' })).records.map((r) => r.value.toString());
        expect(await read(0)).toEqual(['added']);
        expect(await read(1)).toEqual([]);
      } finally {
        raw.socket.destroy();
      }
    });

    it('EndTxn without an open transaction is INVALID_TXN_STATE; a retried EndTxn is answered again; a stale epoch is fenced', async () => {
      await c.command('CREATE', { topic: 'ktx-end', partitions: 1 });
      const raw = await RawKafka.connect(broker.kafkaPort);
      try {
        const p = await producerOf(raw, 'ktx-end-1');
        expect((await raw.call(26, 1, { transactionalId: 'ktx-end-1', ...p, committed: true })).errorCode).toBe(kafkaErrorCode('INVALID_TXN_STATE'));
        expect((await raw.call(26, 3, { transactionalId: 'ktx-end-1', ...p, committed: false })).errorCode).toBe(kafkaErrorCode('INVALID_TXN_STATE'));
        await raw.call(24, 1, { transactionalId: 'ktx-end-1', ...p, topics: [{ name: 'ktx-end', partitions: [0] }] });
        expect(produceCode(await produce(raw, 'ktx-end-1', 'ktx-end', 0, txnBatch(p, 'one')))).toBe(0);
        expect((await raw.call(26, 1, { transactionalId: 'ktx-end-1', ...p, committed: true })).errorCode).toBe(0);
        expect((await raw.call(26, 1, { transactionalId: 'ktx-end-1', ...p, committed: true })).errorCode).toBe(0); // a retry
        expect((await raw.call(26, 1, { transactionalId: 'ktx-end-1', ...p, committed: false })).errorCode).toBe(kafkaErrorCode('INVALID_TXN_STATE'));
        const newer = await producerOf(raw, 'ktx-end-1');
        expect(newer.producerEpoch).toBe(p.producerEpoch + 1);
        // PRODUCER_FENCED from the versions that know it (KIP-588), INVALID_PRODUCER_EPOCH before them.
        for (const [v, fenced] of [
          [1, 'INVALID_PRODUCER_EPOCH'],
          [3, 'PRODUCER_FENCED'],
        ] as const) {
          expect((await raw.call(24, v, { transactionalId: 'ktx-end-1', ...p, topics: [{ name: 'ktx-end', partitions: [0] }] })).results).toEqual([
            { name: 'ktx-end', results: [{ partitionIndex: 0, errorCode: kafkaErrorCode(fenced) }] },
          ]);
          expect((await raw.call(26, v, { transactionalId: 'ktx-end-1', ...p, committed: true })).errorCode).toBe(kafkaErrorCode(fenced));
        }
        expect(produceCode(await produce(raw, 'ktx-end-1', 'ktx-end', 0, txnBatch(p, 'stale')))).toBe(kafkaErrorCode('INVALID_PRODUCER_EPOCH'));
      } finally {
        raw.socket.destroy();
      }
    });

    it('InitProducerId v3+ naming a producer id and epoch (KIP-360): any pair for an id the coordinator does not know yet, as Kafka creates it; for a known id its own, else INVALID_PRODUCER_ID_MAPPING or PRODUCER_FENCED; half a pair INVALID_REQUEST', async () => {
      const raw = await RawKafka.connect(broker.kafkaPort);
      try {
        const init = (transactionalId: string, producerId: bigint, producerEpoch: number, version = 4) =>
          raw.call(22, version, { transactionalId, transactionTimeoutMs: 60_000, producerId, producerEpoch });
        // @platformatic/kafka's first InitProducerId of an id names producer id 0 at epoch 0.
        const fresh = await init('ktx-kip360', 0n, 0);
        expect(fresh.errorCode).toBe(0);
        expect(fresh.producerEpoch).toBe(0);
        const p = { producerId: fresh.producerId as bigint, producerEpoch: fresh.producerEpoch as number };
        expect((await init('ktx-kip360-v3', 7n, 3, 3)).errorCode).toBe(0);
        // Known now: its own pair bumps the epoch; another producer id, or an older epoch, is refused.
        const bumped = await init('ktx-kip360', p.producerId, p.producerEpoch);
        expect([bumped.errorCode, bumped.producerId, bumped.producerEpoch]).toEqual([0, p.producerId, p.producerEpoch + 1]);
        expect((await init('ktx-kip360', p.producerId + 1000n, p.producerEpoch + 1)).errorCode).toBe(kafkaErrorCode('INVALID_PRODUCER_ID_MAPPING'));
        expect((await init('ktx-kip360', p.producerId, p.producerEpoch + 5)).errorCode).toBe(kafkaErrorCode('PRODUCER_FENCED'));
        // A producer id without an epoch, or an epoch without a producer id: Kafka's INVALID_REQUEST.
        expect((await init('ktx-kip360', p.producerId, -1)).errorCode).toBe(kafkaErrorCode('INVALID_REQUEST'));
        expect((await init('ktx-kip360', -1n, 0)).errorCode).toBe(kafkaErrorCode('INVALID_REQUEST'));
        expect((await init('ktx-kip360-none', -1n, 0)).errorCode).toBe(kafkaErrorCode('INVALID_REQUEST'));
        // So for an idempotent producer (no transactional id), whose whole pair gets a new producer id.
        const idempotent = (producerId: bigint, producerEpoch: number) =>
          raw.call(22, 4, { transactionalId: null, transactionTimeoutMs: 60_000, producerId, producerEpoch });
        expect((await idempotent(-1n, 3)).errorCode).toBe(kafkaErrorCode('INVALID_REQUEST'));
        expect((await idempotent(5n, -1)).errorCode).toBe(kafkaErrorCode('INVALID_REQUEST'));
        expect((await idempotent(p.producerId, 0)).errorCode).toBe(0);
      } finally {
        raw.socket.destroy();
      }
    });

    it("a batch that reuses the sequence of an ended transaction's batch is OUT_OF_ORDER_SEQUENCE_NUMBER, not taken as its duplicate; a retry within the transaction still is", async () => {
      await c.command('CREATE', { topic: 'ktx-reuse', partitions: 1 });
      const raw = await RawKafka.connect(broker.kafkaPort);
      try {
        const p = await producerOf(raw, 'ktx-reuse-1');
        const add = () => raw.call(24, 1, { transactionalId: 'ktx-reuse-1', ...p, topics: [{ name: 'ktx-reuse', partitions: [0] }] });
        const baseOffset = (res: KafkaStruct) => Number(((res.responses as KafkaStruct[])[0]!.partitionResponses as KafkaStruct[])[0]!.baseOffset);
        await add();
        expect(produceCode(await produce(raw, 'ktx-reuse-1', 'ktx-reuse', 0, txnBatch(p, 'first', 0)))).toBe(0);
        const retried = await produce(raw, 'ktx-reuse-1', 'ktx-reuse', 0, txnBatch(p, 'first', 0));
        expect([produceCode(retried), baseOffset(retried)]).toEqual([0, 0]);
        expect((await raw.call(26, 1, { transactionalId: 'ktx-reuse-1', ...p, committed: false })).errorCode).toBe(0);
        // kafkajs gives a failed send's sequence numbers back ("Clients that reuse sequence numbers"): the next
        // transaction's batch under the aborted one's numbers was answered with the aborted record's offset,
        // and its commit then held nothing of it.
        await add();
        expect(produceCode(await produce(raw, 'ktx-reuse-1', 'ktx-reuse', 0, txnBatch(p, 'second', 0)))).toBe(kafkaErrorCode('OUT_OF_ORDER_SEQUENCE_NUMBER'));
        expect(produceCode(await produce(raw, 'ktx-reuse-1', 'ktx-reuse', 0, txnBatch(p, 'second', 1)))).toBe(0);
        expect((await raw.call(26, 1, { transactionalId: 'ktx-reuse-1', ...p, committed: true })).errorCode).toBe(0);
        const read = await c.consume({ topic: 'ktx-reuse', partition: 0, offset: 0, batch: 10, isolation: 'read_committed' });
        expect(read.records.map((r) => r.value.toString())).toEqual(['second']);
      } finally {
        raw.socket.destroy();
      }
    });

    it('TxnOffsetCommit is fenced by the group generation (ILLEGAL_GENERATION), and its offsets are unstable until the transaction ends', async () => {
      await c.command('CREATE', { topic: 'ktx-offsets', partitions: 1 });
      for (let i = 0; i < 5; i++) await c.command('PUBLISH', { topic: 'ktx-offsets', partition: 0, message: `m${i}` });
      const raw = await RawKafka.connect(broker.kafkaPort);
      try {
        const protocols = [{ name: 'range', metadata: Buffer.from([0, 0, 0, 0, 0, 0, 0, 0, 0, 0]) }];
        const joined = await raw.call(11, 0, { groupId: 'ktx-group', sessionTimeoutMs: 30_000, memberId: '', protocolType: 'consumer', protocols });
        expect(joined.errorCode).toBe(0);
        const member = { memberId: joined.memberId as string, generationId: joined.generationId as number };
        expect(
          (await raw.call(14, 0, { groupId: 'ktx-group', ...member, assignments: [{ memberId: member.memberId, assignment: Buffer.alloc(0) }] })).errorCode,
        ).toBe(0);
        const p = await producerOf(raw, 'ktx-offsets-1');
        expect((await raw.call(25, 1, { transactionalId: 'ktx-offsets-1', ...p, groupId: 'ktx-group' })).errorCode).toBe(0);
        const commit = (generationId: number, offset: number) =>
          raw.call(28, 3, {
            transactionalId: 'ktx-offsets-1',
            groupId: 'ktx-group',
            ...p,
            generationId,
            memberId: member.memberId,
            groupInstanceId: null,
            topics: [{ name: 'ktx-offsets', partitions: [{ partitionIndex: 0, committedOffset: offset, committedLeaderEpoch: -1, committedMetadata: null }] }],
          });
        const codeOf = (res: KafkaStruct) => ((res.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!.errorCode as number;
        expect(codeOf(await commit(member.generationId - 1, 3))).toBe(kafkaErrorCode('ILLEGAL_GENERATION'));
        expect(codeOf(await commit(member.generationId + 1, 3))).toBe(kafkaErrorCode('ILLEGAL_GENERATION'));
        expect(codeOf(await commit(member.generationId, 3))).toBe(0);
        const fetchStable = async () => {
          const res = await raw.call(9, 7, { groupId: 'ktx-group', topics: [{ name: 'ktx-offsets', partitionIndexes: [0] }], requireStable: true });
          return ((res.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!;
        };
        expect((await fetchStable()).errorCode).toBe(kafkaErrorCode('UNSTABLE_OFFSET_COMMIT'));
        expect((await raw.call(26, 1, { transactionalId: 'ktx-offsets-1', ...p, committed: true })).errorCode).toBe(0);
        const after = await fetchStable();
        expect(after.errorCode).toBe(0);
        expect(Number(after.committedOffset)).toBe(3);
        // An aborted transaction's offsets never move the group.
        expect((await raw.call(25, 1, { transactionalId: 'ktx-offsets-1', ...p, groupId: 'ktx-group' })).errorCode).toBe(0);
        expect(codeOf(await commit(member.generationId, 5))).toBe(0);
        expect((await raw.call(26, 1, { transactionalId: 'ktx-offsets-1', ...p, committed: false })).errorCode).toBe(0);
        expect(Number((await fetchStable()).committedOffset)).toBe(3);
      } finally {
        raw.socket.destroy();
      }
    });
  });

  describe('past aborted transactions, and producers the partition forgot', () => {
    it('a read_committed kafkajs consumer reaches a committed record behind an aborted transaction longer than one read', async () => {
      await c.command('CREATE', { topic: 'ktx-long-abort', partitions: 1 });
      const producer = kafka.producer({ transactionalId: 'ktx-long-abort', idempotent: true, maxInFlightRequests: 1 });
      await producer.connect();
      try {
        const big = await producer.transaction();
        // One record more than a Fetch reads of a partition (10,000): all of the first read is aborted.
        await big.send({ topic: 'ktx-long-abort', messages: Array.from({ length: 10_001 }, (_, i) => ({ partition: 0, value: `a${i}` })) });
        await big.abort();
        const ok = await producer.transaction();
        await ok.send({ topic: 'ktx-long-abort', messages: [{ partition: 0, value: 'committed' }] });
        await ok.commit();
      } finally {
        await producer.disconnect();
      }
      expect(await kafkajsCommitted('ktx-long-abort', 'ktx-long-abort-g')).toEqual(['committed']);
    }, 60_000);

    it('an idempotent kafkajs producer goes on writing to a topic deleted and created again (its sequences do not restart)', async () => {
      const admin = kafka.admin();
      await admin.connect();
      const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
      await producer.connect();
      try {
        await admin.createTopics({ topics: [{ topic: 'ktx-recreated', numPartitions: 1 }], waitForLeaders: true });
        for (let i = 0; i < 3; i++) await producer.send({ topic: 'ktx-recreated', acks: -1, messages: [{ partition: 0, value: `old${i}` }] });
        await admin.deleteTopics({ topics: ['ktx-recreated'] });
        await until(async () => (await admin.listTopics()).includes('ktx-recreated') === false, 10_000, 'the topic gone');
        await admin.createTopics({ topics: [{ topic: 'ktx-recreated', numPartitions: 1 }], waitForLeaders: true });
        await producer.send({ topic: 'ktx-recreated', acks: -1, messages: [{ partition: 0, value: 'new' }] });
        const read = await c.consume({ topic: 'ktx-recreated', partition: 0, offset: 0, batch: 10 });
        expect(read.records.map((r) => r.value.toString())).toEqual(['new']);
      } finally {
        await producer.disconnect();
        await admin.disconnect();
      }
    });

    it('a transactional kafkajs producer goes on writing to a topic deleted and created again (its sequences do not restart)', async () => {
      const admin = kafka.admin();
      await admin.connect();
      const producer = kafka.producer({ transactionalId: 'ktx-recreated-txn', idempotent: true, maxInFlightRequests: 1 });
      await producer.connect();
      try {
        await admin.createTopics({ topics: [{ topic: 'ktx-recreated-txn', numPartitions: 1 }], waitForLeaders: true });
        const first = await producer.transaction();
        await first.send({ topic: 'ktx-recreated-txn', messages: [0, 1, 2].map((i) => ({ partition: 0, value: `old${i}` })) });
        await first.commit();
        await admin.deleteTopics({ topics: ['ktx-recreated-txn'] });
        await until(async () => (await admin.listTopics()).includes('ktx-recreated-txn') === false, 10_000, 'the topic gone');
        await admin.createTopics({ topics: [{ topic: 'ktx-recreated-txn', numPartitions: 1 }], waitForLeaders: true });
        // kafkajs numbers this batch 3 (its sequences per partition go on); the new partition knows nothing of
        // the producer, so it takes any first sequence, as Kafka does since KIP-360 (not only 0).
        const next = await producer.transaction();
        await next.send({ topic: 'ktx-recreated-txn', messages: [{ partition: 0, value: 'new' }] });
        await next.commit();
        const read = await c.consume({ topic: 'ktx-recreated-txn', partition: 0, offset: 0, batch: 10, isolation: 'read_committed' });
        expect(read.records.map((r) => r.value.toString())).toEqual(['new']);
      } finally {
        await producer.disconnect();
        await admin.disconnect();
      }
    });

    it('ListOffsets by timestamp under read_committed answers nothing inside an open transaction', async () => {
      await c.command('CREATE', { topic: 'ktx-lo', partitions: 1 });
      const plain = kafka.producer();
      const producer = kafka.producer({ transactionalId: 'ktx-lo', idempotent: true, maxInFlightRequests: 1 });
      await plain.connect();
      await producer.connect();
      const raw = await RawKafka.connect(broker.kafkaPort);
      try {
        await plain.send({ topic: 'ktx-lo', messages: [{ partition: 0, value: 'before', timestamp: '1000' }] });
        const t = await producer.transaction();
        await t.send({ topic: 'ktx-lo', messages: [{ partition: 0, value: 'open', timestamp: '5000' }] });
        const at = async (timestamp: number, isolationLevel: number) => {
          const r = await raw.call(2, 5, {
            replicaId: -1,
            isolationLevel,
            topics: [{ name: 'ktx-lo', partitions: [{ partitionIndex: 0, currentLeaderEpoch: -1, timestamp }] }],
          });
          const partitions = (r.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[];
          return Number(partitions[0]!.offset);
        };
        expect(await at(2000, 0)).toBe(1);
        expect(await at(2000, 1)).toBe(-1);
        expect(await at(500, 1)).toBe(0);
        await t.abort();
      } finally {
        raw.socket.destroy();
        await producer.disconnect();
        await plain.disconnect();
      }
    });
  });
});

describe('a Kafka transaction open when its broker is killed with SIGKILL', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--kafka-port', '0'] });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('is aborted on restart, and its producer must abort it before its next transaction begins', async () => {
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'ktx-crash', partitions: 2 });
    const produceCode = async (raw: RawKafka, partition: number, records: Buffer) => {
      const res = await raw.call(0, 7, {
        transactionalId: 'ktx-crash-1',
        acks: -1,
        timeoutMs: 1000,
        topicData: [{ name: 'ktx-crash', partitionData: [{ index: partition, records }] }],
      });
      return ((res.responses as KafkaStruct[])[0]!.partitionResponses as KafkaStruct[])[0]!.errorCode as number;
    };
    const add = async (raw: RawKafka, p: { producerId: bigint; producerEpoch: number }, partition: number) => {
      const res = await raw.call(24, 1, { transactionalId: 'ktx-crash-1', ...p, topics: [{ name: 'ktx-crash', partitions: [partition] }] });
      return ((res.results as KafkaStruct[])[0]!.results as KafkaStruct[])[0]!.errorCode as number;
    };
    const end = async (raw: RawKafka, p: { producerId: bigint; producerEpoch: number }, committed: boolean) =>
      (await raw.call(26, 1, { transactionalId: 'ktx-crash-1', ...p, committed })).errorCode as number;
    let raw = await RawKafka.connect(broker.kafkaPort);
    try {
      const init = await raw.call(22, 1, { transactionalId: 'ktx-crash-1', transactionTimeoutMs: 600_000 });
      const p = { producerId: init.producerId as bigint, producerEpoch: init.producerEpoch as number };
      expect(await add(raw, p, 0)).toBe(0);
      expect(await produceCode(raw, 0, txnBatch(p, 'before-kill', 0))).toBe(0);
      raw.socket.destroy();
      await broker.kill();
      await broker.relaunch();
      raw = await RawKafka.connect(broker.kafkaPort);
      const invalid = kafkaErrorCode('INVALID_TXN_STATE');
      // The producer goes on as if its transaction were still open: nothing of it may commit.
      expect(await produceCode(raw, 0, txnBatch(p, 'after-kill', 1))).toBe(invalid);
      expect(await add(raw, p, 1)).toBe(invalid);
      expect(await end(raw, p, true)).toBe(invalid);
      expect(await end(raw, p, false)).toBe(0);
      // Aborted and acknowledged: the next transaction begins.
      expect(await add(raw, p, 1)).toBe(0);
      expect(await produceCode(raw, 1, txnBatch(p, 'next', 0))).toBe(0);
      expect(await end(raw, p, true)).toBe(0);
      const c2 = await broker.connect();
      const read = async (partition: number) =>
        (await c2.consume({ topic: 'ktx-crash', partition, offset: 0, batch: 100, isolation: 'read_committed' })).records.map((r) => r.value.toString());
      expect(await read(0)).toEqual([]);
      expect(await read(1)).toEqual(['next']);
    } finally {
      raw.socket.destroy();
    }
  });
});

interface PlatformaticTxnClients {
  Producer: new (
    o: Record<string, unknown>,
  ) => {
    beginTransaction(): Promise<{
      send(o: { messages: { topic: string; value: string; partition: number }[] }): Promise<unknown>;
      commit(): Promise<void>;
      abort(): Promise<void>;
    }>;
    close(): Promise<void>;
  };
  stringSerializers: unknown;
}
