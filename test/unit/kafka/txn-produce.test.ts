/**
 * A transactional Produce batch at a leader whose transaction coordinator is another broker
 * (kafka/apis/txn-produce.ts): appended only after the coordinator said the partition is in the open
 * transaction, and only if no marker reached the partition meanwhile; batches of one producer keep their
 * order. The coordinator is a stub answering TXN_VERIFY as the test scripts it; the partition is real.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { Partition } from 'tributary-broker/partition/partition.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { transactionalAppend } from 'tributary-broker/kafka/apis/txn-produce.js';
import type { KafkaRequestContext } from 'tributary-broker/kafka/context.js';
import { rec, removeDir, tempDir } from '../../helpers/util.js';

const dirs: string[] = [];
const parts: Partition[] = [];
afterEach(async () => {
  for (const p of parts.splice(0)) await p.close().catch(() => {});
  for (const d of dirs.splice(0)) await removeDir(d);
});

async function partition(): Promise<Partition> {
  const dir = await tempDir('trib-txn-produce-');
  dirs.push(dir);
  const p = new Partition('t', 0, await PartitionLog.open(dir, { flush: 'os' }));
  parts.push(p);
  await Promise.all([p.whenTxnIndexReady(), p.whenProducerStateReady()]);
  return p;
}

/**
 * A leader's context whose coordinator (another broker) answers TXN_VERIFY with `answer`; once `here.now`
 * is set, the id's coordinator is this broker, whose own check lets every batch through (counted in
 * `here.appends`).
 */
function leaderContext(answer: (fields: Record<string, unknown>) => Promise<void>): {
  ctx: KafkaRequestContext;
  asked: Array<Record<string, unknown>>;
  here: { now: boolean; appends: number };
} {
  const asked: Array<Record<string, unknown>> = [];
  const here = { now: false, appends: 0 };
  const cluster = {
    coordinatesHere: () => here.now,
    requireLeader: () => ({ leaderEpoch: 4 }),
    leaderPeer: async () => ({
      command: async (name: string, fields: Record<string, unknown>) => {
        expect(name).toBe('TXN_VERIFY');
        asked.push(fields);
        await answer(fields);
        return 'OK';
      },
    }),
  };
  const kafka = {
    verify: async () => {},
    append: async (_id: string, _p: string, _e: number, _t: string, _n: number, start: () => Promise<unknown>) => {
      here.appends++;
      return start();
    },
  };
  const transactions = { partitionFor: () => 0, kafka };
  // Authentication off: no caller to pass on to the id's coordinator (docs/security.md, "Transactional ids").
  const security = { txnCaller: () => undefined };
  return { ctx: { broker: { cluster, transactions, security } } as unknown as KafkaRequestContext, asked, here };
}

const batch = (firstSequence: number, n = 1) => ({ producerId: '7', epoch: 0, firstSequence, lastSequence: firstSequence + n - 1 });
const values = async (p: Partition) => (await p.log.read(0, { maxRecords: 100, maxBytes: 1 << 20 })).filter((r) => (r.attributes ?? 0) === 0 || r.value.length > 2).map((r) => r.value.toString());

describe('a transactional batch verified with a remote coordinator', () => {
  it('is appended once the coordinator says the partition is in the transaction', async () => {
    const p = await partition();
    const { ctx, asked } = leaderContext(async () => {});
    const res = await transactionalAppend(ctx, 'tx', batch(0, 2), p, [rec('a'), rec('b')], 4);
    expect(res).toMatchObject({ baseOffset: 0, lastOffset: 1, duplicate: false });
    expect(asked).toEqual([{ transactional_id: 'tx', producerId: '7', epoch: 0, topic: 't', partition: 0 }]);
    expect(p.txnIndex()!.openTxn('7')).toBeDefined();
  });

  it("is refused with the coordinator's error, nothing appended", async () => {
    const p = await partition();
    const { ctx } = leaderContext(async () => {
      throw new TributaryError('invalid_txn_state', { reason: 'not added' });
    });
    await expect(transactionalAppend(ctx, 'tx', batch(0), p, [rec('a')], 4)).rejects.toMatchObject({ code: 'invalid_txn_state' });
    expect(p.logEndOffset).toBe(0);
  });

  it("is refused when its producer's marker reached the partition while the coordinator answered: it never lands after the marker", async () => {
    const p = await partition();
    await p.appendTransactional([rec('earlier')], { producerId: '7', epoch: 0, firstSequence: 0, lastSequence: 0 });
    const { ctx } = leaderContext(async () => {
      // The transaction ends while the "yes" is on its way: its marker reaches the partition first.
      await p.writeMarker('7', 0, 'commit');
    });
    await expect(transactionalAppend(ctx, 'tx', batch(1), p, [rec('late')], 4)).rejects.toMatchObject({ code: 'invalid_txn_state' });
    // Only the earlier record and its marker: no record of the ended transaction after the marker.
    expect(p.logEndOffset).toBe(2);
    expect(p.txnIndex()!.openTxn('7')).toBeUndefined();
  });

  it("another producer's marker meanwhile does not refuse the batch", async () => {
    const p = await partition();
    await p.appendTransactional([rec('other')], { producerId: '8', epoch: 0, firstSequence: 0, lastSequence: 0 });
    const { ctx } = leaderContext(async () => {
      await p.writeMarker('8', 0, 'commit');
    });
    expect(await transactionalAppend(ctx, 'tx', batch(0), p, [rec('mine')], 4)).toMatchObject({ baseOffset: 2, duplicate: false });
  });

  it("keeps one producer's batches in the order they came, whatever order the coordinator answers in", async () => {
    const p = await partition();
    const gates: Array<() => void> = [];
    const { ctx } = leaderContext(() => new Promise<void>((resolve) => gates.push(resolve)));
    const first = transactionalAppend(ctx, 'tx', batch(0), p, [rec('one')], 4);
    const second = transactionalAppend(ctx, 'tx', batch(1), p, [rec('two')], 4);
    // The second batch is not even asked about before the first is appended.
    await new Promise((r) => setImmediate(r));
    expect(gates).toHaveLength(1);
    gates[0]!();
    expect((await first).baseOffset).toBe(0);
    await new Promise((r) => setImmediate(r));
    gates[1]!();
    expect((await second).baseOffset).toBe(1);
    expect(await values(p)).toEqual(['one', 'two']);
  });

  it('is refused as NOT_LEADER when the leadership moved while the coordinator answered', async () => {
    const p = await partition();
    const { ctx } = leaderContext(async () => {});
    await expect(transactionalAppend(ctx, 'tx', batch(0), p, [rec('a')], 3)).rejects.toMatchObject({ code: 'NOT_LEADER' });
    expect(p.logEndOffset).toBe(0);
  });

  it("a coordinator that never answers refuses the batch as retriable after the wait, nothing appended; the producer's retry goes through", async () => {
    const p = await partition();
    let calls = 0;
    const { ctx } = leaderContext(() => (++calls === 1 ? new Promise<void>(() => {}) : Promise.resolve()));
    const err = await transactionalAppend(ctx, 'tx', batch(0), p, [rec('held')], 4, 50).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'NOT_ENOUGH_REPLICAS', retriable: true });
    expect(p.logEndOffset).toBe(0);
    expect((await transactionalAppend(ctx, 'tx', batch(0), p, [rec('again')], 4, 50)).baseOffset).toBe(0);
    expect(await values(p)).toEqual(['again']);
  });

  it("a batch queued behind one the coordinator never answers gets no longer than its own wait, counted from its arrival", async () => {
    const p = await partition();
    const { ctx, asked } = leaderContext((f) => (f.epoch === 0 && asked.length === 1 ? new Promise<void>(() => {}) : Promise.resolve()));
    const first = transactionalAppend(ctx, 'tx', batch(0), p, [rec('held')], 4, 50);
    const queued = transactionalAppend(ctx, 'tx', batch(1), p, [rec('behind')], 4, 10);
    expect(await first.catch((e: unknown) => e)).toMatchObject({ code: 'NOT_ENOUGH_REPLICAS' });
    // Its 10 ms went by while the first one waited: refused at its turn, without a wait of its own.
    expect(await queued.catch((e: unknown) => e)).toMatchObject({ code: 'NOT_ENOUGH_REPLICAS', retriable: true });
    expect(asked).toHaveLength(1);
    expect(p.logEndOffset).toBe(0);
  });

  it("a batch retrying while the id's coordinator moves to this broker is not overtaken by the producer's next batch", async () => {
    const p = await partition();
    let tries = 0;
    let moved!: () => void;
    const movedHere = new Promise<void>((resolve) => (moved = resolve));
    const { ctx, here } = leaderContext(async () => {
      // The coordinator is moving: the first batch keeps retrying; it lands here meanwhile.
      if (++tries === 1) {
        here.now = true;
        moved();
      }
      throw new TributaryError('NOT_COORDINATOR', { reason: 'moving' });
    });
    const first = transactionalAppend(ctx, 'tx', batch(0), p, [rec('one')], 4);
    await movedHere;
    // The next batch arrives while this broker coordinates the id: it waits for the first one's turn.
    const second = transactionalAppend(ctx, 'tx', batch(1), p, [rec('two')], 4);
    expect((await first).baseOffset).toBe(0);
    expect((await second).baseOffset).toBe(1);
    expect(here.appends).toBe(1);
    expect(await values(p)).toEqual(['one', 'two']);
  });
});
