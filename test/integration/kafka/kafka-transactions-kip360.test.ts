/**
 * InitProducerId v3+ with a transactional id and the producer's id and epoch (KIP-360), on the wire
 * against a broker process: a request whose answer was lost and that is sent again, still naming the pair
 * from before its bump, gets the pair the first one got (not PRODUCER_FENCED, which Kafka's Java client
 * treats as fatal) and the epoch does not move again; any other stale pair is fenced; the broker
 * remembers the previous pair across a restart (the id's state in __transaction_state).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawKafka } from '../../helpers/raw-kafka.js';
import { until } from '../../helpers/util.js';

describe('Kafka InitProducerId retries (KIP-360)', () => {
  let broker: BrokerProcess;
  let raw: RawKafka | undefined;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--kafka-port', '0'] });
  });

  afterAll(async () => {
    raw?.socket.destroy();
    await broker?.dispose();
  });

  const init = (transactionalId: string, producerId: bigint, producerEpoch: number, version = 4) =>
    raw!.call(22, version, { transactionalId, transactionTimeoutMs: 60_000, producerId, producerEpoch });
  const answer = (r: KafkaStruct) => [r.errorCode, r.producerId, r.producerEpoch];

  it('the same request sent again with the pre-bump pair gets the same current pair, and the epoch does not move again', async () => {
    raw = await RawKafka.connect(broker.kafkaPort);
    const first = await init('kip360-retry', -1n, -1);
    expect(first.errorCode).toBe(0);
    const p = first.producerId as bigint;
    const e = first.producerEpoch as number;
    for (const version of [3, 4]) {
      const id = `kip360-retry-v${version}`;
      const f = await init(id, -1n, -1, version);
      const q = f.producerId as bigint;
      const bumped = await init(id, q, 0, version);
      expect(answer(bumped)).toEqual([0, q, 1]);
      // Its answer lost: the client sends the same request again.
      expect(answer(await init(id, q, 0, version))).toEqual([0, q, 1]);
      expect(answer(await init(id, q, 0, version))).toEqual([0, q, 1]);
      // The epoch did not move: the next bump from epoch 1 gets 2.
      expect(answer(await init(id, q, 1, version))).toEqual([0, q, 2]);
    }
    expect(answer(await init('kip360-retry', p, e))).toEqual([0, p, e + 1]);
    expect(answer(await init('kip360-retry', p, e))).toEqual([0, p, e + 1]);
  });

  it('a stale pair that is not the previous one is still fenced (PRODUCER_FENCED v4+, INVALID_PRODUCER_EPOCH v3)', async () => {
    raw ??= await RawKafka.connect(broker.kafkaPort);
    const f = await init('kip360-stale', -1n, -1);
    const p = f.producerId as bigint;
    expect(answer(await init('kip360-stale', p, 0))).toEqual([0, p, 1]);
    expect(answer(await init('kip360-stale', p, 1))).toEqual([0, p, 2]);
    // Epoch 0 is two bumps old: not a retry of the last one.
    expect((await init('kip360-stale', p, 0)).errorCode).toBe(kafkaErrorCode('PRODUCER_FENCED'));
    expect((await init('kip360-stale', p, 0, 3)).errorCode).toBe(kafkaErrorCode('INVALID_PRODUCER_EPOCH'));
    expect((await init('kip360-stale', p, 9)).errorCode).toBe(kafkaErrorCode('PRODUCER_FENCED'));
    expect((await init('kip360-stale', p + 1000n, 1)).errorCode).toBe(kafkaErrorCode('INVALID_PRODUCER_ID_MAPPING'));
    // The previous pair is still a retry; nothing above moved the epoch.
    expect(answer(await init('kip360-stale', p, 1))).toEqual([0, p, 2]);
    // A bump without a pair (v0-2, a new producer) forgets the previous pair: epoch 1 is fenced now.
    const plain = await raw!.call(22, 1, { transactionalId: 'kip360-stale', transactionTimeoutMs: 60_000 });
    expect(answer(plain)).toEqual([0, p, 3]);
    expect((await init('kip360-stale', p, 1)).errorCode).toBe(kafkaErrorCode('PRODUCER_FENCED'));
    expect((await init('kip360-stale', p, 2)).errorCode).toBe(kafkaErrorCode('PRODUCER_FENCED'));
  });

  // Kafka's coordinator fences an InitProducerId that finds a transaction ongoing, the previous pair's
  // retry too: the transaction is aborted at a new epoch nobody is given, the answer is
  // CONCURRENT_TRANSACTIONS, and the retry then finds neither its pair nor a previous one.
  it('the previous pair sent again while the new epoch has a transaction open aborts it at a new epoch: CONCURRENT_TRANSACTIONS, then fenced', async () => {
    raw ??= await RawKafka.connect(broker.kafkaPort);
    const c = await broker.connect();
    try {
      const id = 'kip360-open';
      await c.command('CREATE', { topic: id, partitions: 1 });
      const p = (await init(id, -1n, -1)).producerId as bigint;
      expect(answer(await init(id, p, 0))).toEqual([0, p, 1]);
      // The producer got epoch 1 and begins a transaction.
      const added = await raw.call(24, 1, { transactionalId: id, producerId: p, producerEpoch: 1, topics: [{ name: id, partitions: [0] }] });
      expect(((added.results as KafkaStruct[])[0]!.results as KafkaStruct[])[0]!.errorCode).toBe(0);
      expect(await c.command('TXN_STATUS', { transactional_id: id })).toMatch(/\bstate=open\b.*\bepoch=1\b/);
      // A copy of the request that bumped epoch 0 arrives now (a zombie, or a late retry).
      expect((await init(id, p, 0)).errorCode).toBe(kafkaErrorCode('CONCURRENT_TRANSACTIONS'));
      const status = await c.command('TXN_STATUS', { transactional_id: id });
      expect(status).toMatch(/\bstate=aborted\b/);
      expect(status).toMatch(/\bepoch=2\b/);
      // The transaction's producer is fenced, and so is the retry: its pair is no longer the previous one.
      expect((await raw.call(26, 2, { transactionalId: id, producerId: p, producerEpoch: 1, committed: true })).errorCode).toBe(kafkaErrorCode('PRODUCER_FENCED'));
      expect((await init(id, p, 0)).errorCode).toBe(kafkaErrorCode('PRODUCER_FENCED'));
      expect((await init(id, p, 0, 3)).errorCode).toBe(kafkaErrorCode('INVALID_PRODUCER_EPOCH'));
      // A new producer of the id starts past the fencing epoch.
      expect(answer(await raw.call(22, 1, { transactionalId: id, transactionTimeoutMs: 60_000 }))).toEqual([0, p, 3]);
    } finally {
      await c.close();
    }
  });

  it('two producers naming the same current pair at once both get the one bump (the check runs under the coordinator lock of the id)', async () => {
    raw ??= await RawKafka.connect(broker.kafkaPort);
    const f = await init('kip360-race', -1n, -1);
    const p = f.producerId as bigint;
    const others = await Promise.all([0, 1, 2].map(() => RawKafka.connect(broker.kafkaPort)));
    try {
      const send = (r: RawKafka) => r.call(22, 4, { transactionalId: 'kip360-race', transactionTimeoutMs: 60_000, producerId: p, producerEpoch: 0 });
      const answers = await Promise.all(others.map(send));
      expect(answers.map(answer)).toEqual(others.map(() => [0, p, 1]));
      expect(answer(await init('kip360-race', p, 1))).toEqual([0, p, 2]);
    } finally {
      for (const r of others) r.socket.destroy();
    }
  });

  it('the retry is recognised after a broker restart (the previous pair is reloaded from __transaction_state)', async () => {
    raw ??= await RawKafka.connect(broker.kafkaPort);
    const f = await init('kip360-restart', -1n, -1);
    const p = f.producerId as bigint;
    expect(answer(await init('kip360-restart', p, 0))).toEqual([0, p, 1]);
    raw.socket.destroy();
    raw = undefined;
    await broker.restart();
    raw = await RawKafka.connect(broker.kafkaPort);
    // The coordinator loads its state after the restart: COORDINATOR_LOAD_IN_PROGRESS until then.
    let again: KafkaStruct | undefined;
    await until(async () => {
      again = await init('kip360-restart', p, 0);
      return again.errorCode !== kafkaErrorCode('COORDINATOR_LOAD_IN_PROGRESS') && again.errorCode !== kafkaErrorCode('NOT_COORDINATOR');
    }, 20_000, 'the coordinator to load');
    expect(answer(again!)).toEqual([0, p, 1]);
    expect(answer(await init('kip360-restart', p, 1))).toEqual([0, p, 2]);
  });
});
