/**
 * Transactions through the SDK against a real broker: `producer.transaction()` with send, sendOffsets,
 * commit and abort; fencing surfaced as ProducerFencedError; `await using` aborting a transaction left
 * open; a consume-transform-produce step with a Consumer whose offsets move only with the commit.
 */
import { describe, expect, it } from 'vitest';
import { Consumer } from 'tributary-client/consumer.js';
import type { Producer, ProducerOptions } from 'tributary-client/producer.js';
import { ProducerFencedError, TransactionStateError } from 'tributary-client/transaction.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { useProducerSuite } from '../../helpers/sdk-producers.js';
import { fetchOffset } from '../groups/helpers.js';
import { readAll } from '../transactions/helpers.js';
import { until } from '../../helpers/util.js';

describe('SDK transactions', () => {
  const suite = useProducerSuite(['--offsets-topic-partitions', '2', '--transaction-state-partitions', '2', '--group-join-window-ms', '20'], async (admin) => {
    await admin.command('CREATE', { topic: 'sdk-tx', partitions: 2 });
    await admin.command('CREATE', { topic: 'sdk-tx-runs', partitions: 2 });
  });
  const { producers } = suite;
  const producer = (opts: Partial<ProducerOptions> = {}): Producer => producers.make(opts);

  const committedValues = async (topic: string, partitions: number[]) =>
    (await Promise.all(partitions.map((p) => readAll(suite.admin, topic, p, 'read_committed')))).flat().map((r) => r.value);

  it('records become visible on commit, all of them, and never after abort', async () => {
    const p = producer({ transactionalId: 'sdk-vis' });
    const t1 = await p.transaction();
    const meta = await t1.send({ topic: 'sdk-tx', messages: [{ value: 'c1', partition: 0 }, { value: 'c2', partition: 1 }, { key: 'k', value: 'c3' }] });
    expect(meta.map((m) => m.partition).slice(0, 2)).toEqual([0, 1]);
    expect(meta.every((m) => m.offset >= 0)).toBe(true);
    expect(await committedValues('sdk-tx', [0, 1])).toEqual([]);
    await t1.commit();
    expect(t1.state).toBe('committed');
    expect((await committedValues('sdk-tx', [0, 1])).sort()).toEqual(['c1', 'c2', 'c3']);

    const t2 = await p.transaction();
    await t2.send({ topic: 'sdk-tx', messages: [{ value: 'a1', partition: 0 }] });
    await t2.abort();
    const t3 = await p.transaction();
    await t3.send({ topic: 'sdk-tx', messages: Array.from({ length: 50 }, (_, i) => ({ value: `bulk${i}`, partition: 1 })) });
    await t3.commit();
    const values = await committedValues('sdk-tx', [0, 1]);
    expect(values).not.toContain('a1');
    expect(values.filter((v) => v.startsWith('bulk'))).toEqual(Array.from({ length: 50 }, (_, i) => `bulk${i}`));
  });

  it("metadata: 'runs': each run's offsets hold exactly its messages once committed", async () => {
    const p = producer({ transactionalId: 'sdk-runs' });
    const t = await p.transaction();
    // One earlier record in partition 1, so the runs' offsets there do not start at 0.
    await t.send({ topic: 'sdk-tx-runs', messages: [{ value: 'before', partition: 1 }] });
    const messages = [0, 0, 1, 1, 1, 0].map((partition, i) => ({ value: `r${i}`, partition }));
    const runs = await t.send({ topic: 'sdk-tx-runs', messages }, { metadata: 'runs' });
    await expect(t.send({ topic: 'sdk-tx-runs', messages }, { metadata: 'run' } as never)).rejects.toMatchObject({ code: 'invalid_config' });
    await t.commit();
    expect(runs.map((r) => [r.partition, r.first, r.count])).toEqual([
      [0, 0, 2],
      [1, 2, 3],
      [0, 5, 1],
    ]);
    for (const r of runs) {
      const log = await readAll(suite.admin, 'sdk-tx-runs', r.partition, 'read_committed');
      const stored = log.filter((x) => x.offset >= r.baseOffset && x.offset < r.baseOffset + r.count).map((x) => x.value);
      expect(stored).toEqual(messages.slice(r.first, r.first + r.count).map((m) => m.value));
    }
  });

  it('transaction markers never reach a handler, in either isolation or mode, and the committed offset moves past them', async () => {
    await suite.admin.command('CREATE', { topic: 'sdk-markers', partitions: 1 });
    const p = producer({ transactionalId: 'sdk-markers' });
    // offsets 0-1 committed txn + marker at 2, 3 aborted + marker at 4, 5-6 committed + marker at 7 (the end)
    const t1 = await p.transaction();
    await t1.send({ topic: 'sdk-markers', messages: [{ value: 'c0', partition: 0 }, { value: 'c1', partition: 0 }] });
    await t1.commit();
    const t2 = await p.transaction();
    await t2.send({ topic: 'sdk-markers', messages: [{ value: 'a3', partition: 0 }] });
    await t2.abort();
    const t3 = await p.transaction();
    await t3.send({ topic: 'sdk-markers', messages: [{ value: 'c5', partition: 0 }, { value: 'c6', partition: 0 }] });
    await t3.commit();
    const end = Number(/latest=(\d+)/.exec(await suite.admin.command('LIST_OFFSETS', { topic: 'sdk-markers', partition: 0 }))![1]);
    expect(end).toBe(8);
    for (const isolation of ['read_uncommitted', 'read_committed'] as const) {
      for (const mode of ['poll', 'stream'] as const) {
        const group = `g-markers-${isolation}-${mode}`;
        const c = new Consumer({ brokers: [suite.broker.address], groupId: group, topic: 'sdk-markers', autoOffsetReset: 'earliest', isolation, mode, autoCommitIntervalMs: 50 });
        const seen: Array<{ offset: number; value: string }> = [];
        const run = c.run({ eachMessage: ({ message }) => void seen.push({ offset: message.offset, value: message.value.toString() }) });
        try {
          const expected = isolation === 'read_committed' ? ['c0', 'c1', 'c5', 'c6'] : ['c0', 'c1', 'a3', 'c5', 'c6'];
          await until(async () => (await fetchOffset(suite.admin, 'sdk-markers', group, 0)).offset === end, 10_000, `${group} committed past the last marker`);
          expect(seen.map((m) => m.value), group).toEqual(expected);
          expect(seen.map((m) => m.offset), group).toEqual(isolation === 'read_committed' ? [0, 1, 5, 6] : [0, 1, 3, 5, 6]);
        } finally {
          await c.close();
          await run;
        }
      }
    }
  });

  it('binary keys and values, headers and timestamps travel in a transaction as in a plain send; bad messages are refused', async () => {
    await suite.admin.command('CREATE', { topic: 'sdk-tx-bin', partitions: 1 });
    const p = producer({ transactionalId: 'sdk-bin' });
    const t = await p.transaction();
    const value = Buffer.from([0x00, 0xff, 0xc3, 0x28]);
    await expect(t.send({ topic: 'sdk-tx-bin', messages: [{ value: 'ok' }, { value: 'x', parition: 0 } as never] })).rejects.toThrow(/unknown field parition \(did you mean partition\?\)/);
    await expect(t.send({ topic: 'sdk-tx-bin', messages: [{ value: 42 } as never] })).rejects.toThrow(/value must be/);
    await expect(t.send({ topic: 'sdk-tx-bin', messages: [{ value: 'x', partition: -1 }] })).rejects.toThrow(/partition must be/);
    const meta = await t.send({
      topic: 'sdk-tx-bin',
      messages: [
        { key: Buffer.from([0xfe]), value, headers: [{ key: 'h', value: Buffer.from([0x80]) }, { key: 'h', value: 'two' }], timestamp: new Date(1_700_000_000_000) },
        { value: new Uint8Array([1, 2, 3]), partition: 0 },
      ],
    });
    await t.commit();
    expect(meta.map((m) => m.offset)).toEqual([0, 1]); // the refused sends took no seqNum and wrote nothing
    const records = (await suite.admin.consume({ topic: 'sdk-tx-bin', partition: 0, offset: 0, isolation: 'read_committed', batch: 10 })).records;
    expect(records[0]!.value.equals(value)).toBe(true);
    expect(records[0]!.key!.equals(Buffer.from([0xfe]))).toBe(true);
    expect(records[0]!.timestamp).toBe(1_700_000_000_000);
    expect(records[0]!.headers.map((h) => [h.key, h.value.toString('hex')])).toEqual([
      ['h', '80'],
      ['h', Buffer.from('two').toString('hex')],
    ]);
    expect([...records[1]!.value]).toEqual([1, 2, 3]);
  });

  it('one transaction at a time; a transactional producer has no plain send', async () => {
    const p = producer({ transactionalId: 'sdk-one' });
    const t = await p.transaction();
    await expect(p.transaction()).rejects.toBeInstanceOf(TransactionStateError);
    await expect(p.send({ topic: 'sdk-tx', messages: [{ value: 'x' }] })).rejects.toBeInstanceOf(TransactionStateError);
    await t.commit();
    await expect(t.send({ topic: 'sdk-tx', messages: [{ value: 'late' }] })).rejects.toBeInstanceOf(TransactionStateError);
    const again = await p.transaction();
    await again.abort();
    expect(() => producer({ transactionTimeoutMs: 1000 })).toThrow(/transactionalId/);
    expect(() => producer({ transactionalId: 'has space' })).toThrow(/transactionalId/);
  });

  it('a second producer with the same id fences the first: ProducerFencedError on send, commit and transaction()', async () => {
    const zombie = producer({ transactionalId: 'sdk-fence' });
    const zt = await zombie.transaction();
    await zt.send({ topic: 'sdk-tx', messages: [{ value: 'zombie-1', partition: 0 }] });
    const fresh = producer({ transactionalId: 'sdk-fence' });
    const ft = await fresh.transaction(); // aborts the zombie's open transaction
    await expect(zt.send({ topic: 'sdk-tx', messages: [{ value: 'zombie-2', partition: 0 }] })).rejects.toBeInstanceOf(ProducerFencedError);
    await expect(zt.commit()).rejects.toBeInstanceOf(TransactionStateError); // its send failed: only abort is left
    await expect(zt.abort()).rejects.toBeInstanceOf(ProducerFencedError);
    await expect(zombie.transaction()).rejects.toBeInstanceOf(ProducerFencedError);
    await ft.send({ topic: 'sdk-tx', messages: [{ value: 'fresh-1', partition: 0 }] });
    await ft.commit();
    const values = await committedValues('sdk-tx', [0]);
    expect(values).toContain('fresh-1');
    expect(values).not.toContain('zombie-1');
    expect(values).not.toContain('zombie-2');
    const err = await zombie.transaction().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TributaryError);
    expect((err as TributaryError).code).toBe('producer_fenced');
  });

  it('await using aborts a transaction that was neither committed nor aborted', async () => {
    const p = producer({ transactionalId: 'sdk-using' });
    {
      await using t = await p.transaction();
      await t.send({ topic: 'sdk-tx', messages: [{ value: 'scoped', partition: 1 }] });
    }
    const status = await suite.admin.command('TXN_STATUS', { transactional_id: 'sdk-using' });
    expect(status).toMatch(/state=aborted/);
    expect(await committedValues('sdk-tx', [1])).not.toContain('scoped');
    const next = await p.transaction(); // the producer may begin again
    await next.commit();
  });

  it('consume-transform-produce: output and input offsets commit together', async () => {
    await suite.admin.command('CREATE', { topic: 'sdk-in', partitions: 2 });
    await suite.admin.command('CREATE', { topic: 'sdk-out', partitions: 2 });
    for (let i = 0; i < 20; i++) await suite.admin.command('PUBLISH', { topic: 'sdk-in', partition: i % 2, message: `in${i}` });
    const p = producer({ transactionalId: 'sdk-eos' });
    const consumer = new Consumer({
      brokers: [suite.broker.address],
      groupId: 'sdk-eos-g',
      topic: 'sdk-in',
      autoCommit: false,
      autoOffsetReset: 'earliest',
      sessionTimeoutMs: 3000,
      heartbeatIntervalMs: 200,
      maxWaitMs: 100,
    });
    let batches = 0;
    let failOnce = true;
    const done = new Promise<void>((resolve) => {
      let seen = 0;
      void consumer.run({
        eachBatch: async ({ partition, messages }) => {
          const t = await p.transaction();
          await t.send({ topic: 'sdk-out', messages: messages.map((m) => ({ value: m.value.toString().toUpperCase(), partition })) });
          await t.sendOffsets({ consumer, offsets: [{ partition, offset: messages[messages.length - 1]!.offset + 1 }] });
          if (failOnce) {
            // The first batch is aborted: its output never shows and its offsets do not move, so it is read again.
            failOnce = false;
            await t.abort();
            throw new Error('processing failed');
          }
          await t.commit();
          batches++;
          seen += messages.length;
          if (seen >= 20) resolve();
        },
      });
    });
    await done;
    await consumer.close();
    expect(batches).toBeGreaterThan(0);
    const out = (await committedValues('sdk-out', [0, 1])).sort();
    expect(out).toEqual(Array.from({ length: 20 }, (_, i) => `IN${i}`).sort());
    expect(await fetchOffset(suite.admin, 'sdk-in', 'sdk-eos-g', 0)).toEqual({ offset: 10, committed: true });
    expect(await fetchOffset(suite.admin, 'sdk-in', 'sdk-eos-g', 1)).toEqual({ offset: 10, committed: true });
  });

  it('a sendOffsets that failed leaves the transaction abortable only: its output never commits without the offsets', async () => {
    await suite.admin.command('CREATE', { topic: 'sdk-so-in', partitions: 1 });
    await suite.admin.command('PUBLISH', { topic: 'sdk-so-in', partition: 0, message: 'i0' });
    const consumer = new Consumer({ brokers: [suite.broker.address], groupId: 'sdk-so-g', topic: 'sdk-so-in', autoCommit: false, autoOffsetReset: 'earliest', sessionTimeoutMs: 3000 });
    try {
      let got = false;
      void consumer.run({ eachMessage: async () => void (got = true) });
      await until(() => got, 10_000, 'the consumer to read');
      const p = producer({ transactionalId: 'sdk-so' });
      const t = await p.transaction();
      await t.send({ topic: 'sdk-tx', messages: [{ value: 'without-offsets', partition: 1 }] });
      // A generation the consumer does not have: refused by the coordinator.
      const stale = { memberId: consumer.memberId, generation: consumer.generation + 7, options: consumer.options };
      await expect(t.sendOffsets({ consumer: stale, offsets: [{ partition: 0, offset: 1 }] })).rejects.toBeInstanceOf(TributaryError);
      await expect(t.commit()).rejects.toBeInstanceOf(TransactionStateError);
      await t.abort();
      expect(t.state).toBe('aborted');
      expect(await committedValues('sdk-tx', [1])).not.toContain('without-offsets');
      expect(await fetchOffset(suite.admin, 'sdk-so-in', 'sdk-so-g', 0)).toMatchObject({ committed: false });
    } finally {
      await consumer.close();
    }
  });

  it('commit and abort called together: one END_TXN; the other is refused and the state stays the decided one, also when close() comes during a commit', async () => {
    const p = producer({ transactionalId: 'sdk-race' });
    const t = await p.transaction();
    await t.send({ topic: 'sdk-tx', messages: [{ value: 'raced', partition: 0 }] });
    const commit = t.commit();
    const again = t.commit();
    expect(t.state).toBe('committing');
    await expect(t.abort()).rejects.toBeInstanceOf(TransactionStateError);
    await expect(t.send({ topic: 'sdk-tx', messages: [{ value: 'late', partition: 0 }] })).rejects.toBeInstanceOf(TransactionStateError);
    await commit;
    await again;
    expect(t.state).toBe('committed');
    expect(await committedValues('sdk-tx', [0])).toContain('raced');
    expect(await committedValues('sdk-tx', [0])).not.toContain('late');

    const closing = producer({ transactionalId: 'sdk-race-close' });
    const u = await closing.transaction();
    await u.send({ topic: 'sdk-tx', messages: [{ value: 'closed-while-committing', partition: 0 }] });
    const committing = u.commit();
    await closing.close();
    await committing;
    expect(u.state).toBe('committed');
    expect(await committedValues('sdk-tx', [0])).toContain('closed-while-committing');
  });
});
