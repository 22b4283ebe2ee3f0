/**
 * A transaction open at the last producer epoch (MAX_PRODUCER_EPOCH) that the coordinator aborts by itself
 * (its timeout, or a newer INIT_PRODUCER_ID): the epoch cannot go up, so the id moves to a new producer
 * id; the abort's markers must still name the producer id and epoch its records carry, or the partitions
 * keep that transaction open forever (the LSO stuck below it, read_committed readers stalled).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { MAX_PRODUCER_EPOCH } from 'tributary-protocol/record.js';
import { TXN_STATE_TOPIC, TxnLog, type TxnMetadata } from 'tributary-broker/txn/txn-log.js';
import { type Coordinators, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { errorCode, rec, removeDir, tempDir, until } from '../../helpers/util.js';

const TOPIC = 'data';
let dir: string;
let clock: FakeClock;
let c: Coordinators;

beforeEach(async () => {
  dir = await tempDir('trib-txn-overflow-');
  clock = new FakeClock();
  c = await openCoordinators(dir, clock, { topics: { [TOPIC]: 1 } });
});

afterEach(async () => {
  await c.close();
  await removeDir(dir);
});

/** Puts the id at the last epoch: its state record rewritten, then the coordinator restarted on it. */
async function atLastEpoch(id: string): Promise<string> {
  const { producerId } = await c.txns.initProducerId(id, 1000);
  const log = new TxnLog(() => c.topics.get(TXN_STATE_TOPIC).partitions);
  const meta: TxnMetadata = { transactionalId: id, producerId, epoch: MAX_PRODUCER_EPOCH, state: 'empty', timeoutMs: 1000, startedMs: 0, partitions: [], offsets: [], updatedMs: clock.now() };
  await log.write(meta);
  await c.close();
  c = await openCoordinators(dir, clock, { topics: { [TOPIC]: 1 } });
  expect(c.txns.status(id)).toMatchObject({ producerId, epoch: MAX_PRODUCER_EPOCH });
  return producerId;
}

describe('a coordinator abort at the last producer epoch', () => {
  it('a timeout abort closes the transaction on its partitions and fences the old pair', async () => {
    const p = await atLastEpoch('ov-1');
    await c.txns.begin('ov-1', p, MAX_PRODUCER_EPOCH);
    const a = await c.txns.publish('ov-1', p, MAX_PRODUCER_EPOCH, TOPIC, 0, rec('a'), 1);
    const part = c.topics.get(TOPIC).partitions[0]!;
    expect(part.lastStableOffset).toBe(a.offset);
    await clock.advance(1000);
    await until(() => c.txns.status('ov-1').state === 'aborted', 5000, 'the timeout abort');
    const s = c.txns.status('ov-1');
    expect(s.producerId).not.toBe(p);
    expect(s.epoch).toBe(0);
    // The marker closed the transaction the records opened: the LSO is past it.
    expect(part.lastStableOffset).toBe(part.logEndOffset);
    expect(await errorCode(c.txns.begin('ov-1', p, MAX_PRODUCER_EPOCH))).toBe('invalid_producer_epoch');
  });

  it('a newer INIT_PRODUCER_ID (KIP-360) aborts it on its partitions; its retry gets the new pair', async () => {
    const p = await atLastEpoch('ov-2');
    await c.txns.begin('ov-2', p, MAX_PRODUCER_EPOCH);
    await c.txns.publish('ov-2', p, MAX_PRODUCER_EPOCH, TOPIC, 0, rec('a'), 1);
    const part = c.topics.get(TOPIC).partitions[0]!;
    const next = await c.txns.initProducerId('ov-2', 1000, undefined, { producerId: p, epoch: MAX_PRODUCER_EPOCH });
    expect(next.producerId).not.toBe(p);
    expect(next.epoch).toBe(0);
    expect(part.lastStableOffset).toBe(part.logEndOffset);
    expect(await c.txns.initProducerId('ov-2', 1000, undefined, { producerId: p, epoch: MAX_PRODUCER_EPOCH })).toEqual(next);
  });

  it('a restart between the decision and the markers still marks the old pair (the decision record keeps it)', async () => {
    const p = await atLastEpoch('ov-3');
    await c.close();
    // The markers fail (a full disk) until the restart.
    c = await openCoordinators(dir, clock, {
      topics: { [TOPIC]: 1 },
      targets: (local) =>
        Object.assign(Object.create(local) as typeof local, {
          marker: () => Promise.reject(new TributaryError('storage_error', { reason: 'disk full' })),
        }),
    });
    await c.txns.begin('ov-3', p, MAX_PRODUCER_EPOCH);
    await c.txns.publish('ov-3', p, MAX_PRODUCER_EPOCH, TOPIC, 0, rec('a'), 1);
    await clock.advance(1000);
    await until(() => c.txns.status('ov-3').state === 'aborting', 5000, 'the timeout decision');
    await c.close();
    c = await openCoordinators(dir, clock, { topics: { [TOPIC]: 1 } });
    expect(c.txns.status('ov-3')).toMatchObject({ state: 'aborted', epoch: 0 });
    expect(c.txns.status('ov-3').producerId).not.toBe(p);
    const part = c.topics.get(TOPIC).partitions[0]!;
    expect(part.lastStableOffset).toBe(part.logEndOffset);
  });
});
