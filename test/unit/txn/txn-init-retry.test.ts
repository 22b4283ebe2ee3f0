/**
 * INIT_PRODUCER_ID naming the producer's id and epoch (Kafka's InitProducerId v3+, KIP-360): its bump is
 * remembered with the pair it replaced, so the same request sent again (its answer was lost) gets the
 * current pair without another bump; any other stale pair is fenced. The previous pair is durable (the
 * id's record in __transaction_state) and forgotten by any other move of the epoch.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { TxnLog } from 'tributary-broker/txn/txn-log.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { TransactionCoordinator } from 'tributary-broker/txn/txn-coordinator.js';
import { type Coordinators, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { errorCode, removeDir, tempDir, until } from '../../helpers/util.js';

const TOPIC = 'data';
let dir: string;
let clock: FakeClock;
let c: Coordinators;
let txns: TransactionCoordinator;

beforeEach(async () => {
  dir = await tempDir('trib-txn-retry-');
  clock = new FakeClock();
  c = await openCoordinators(dir, clock, { topics: { [TOPIC]: 1 } });
  txns = c.txns;
});

afterEach(async () => {
  await c.close();
  await removeDir(dir);
});

const init = (id: string, producerId: string, epoch: number) => txns.initProducerId(id, 60_000, undefined, { producerId, epoch });

describe('INIT_PRODUCER_ID with the producer id and epoch (KIP-360)', () => {
  it('a retry naming the pair the last bump replaced gets the current pair, without another bump; an older pair is fenced', async () => {
    const { producerId: p } = await txns.initProducerId('r-1', 60_000);
    expect(await init('r-1', p, 0)).toEqual({ producerId: p, epoch: 1 });
    expect(await init('r-1', p, 0)).toEqual({ producerId: p, epoch: 1 });
    expect(await init('r-1', p, 0)).toEqual({ producerId: p, epoch: 1 });
    expect(txns.status('r-1').epoch).toBe(1);
    // The producer goes on from epoch 1: its bump remembers epoch 1, and epoch 0 is just stale now.
    expect(await init('r-1', p, 1)).toEqual({ producerId: p, epoch: 2 });
    expect(await errorCode(init('r-1', p, 0))).toBe('producer_fenced');
    expect(await errorCode(init('r-1', p, 7))).toBe('producer_fenced');
    expect(await init('r-1', p, 1)).toEqual({ producerId: p, epoch: 2 });
    // Another producer id is not the id's (Kafka's INVALID_PRODUCER_ID_MAPPING).
    expect(await errorCode(init('r-1', String(Number(p) + 1000), 1))).toBe('invalid_producer_id_mapping');
    expect(txns.status('r-1').epoch).toBe(2);
  });

  it('the previous pair survives a restart (the id state record keeps it)', async () => {
    const { producerId: p } = await txns.initProducerId('r-2', 60_000);
    expect(await init('r-2', p, 0)).toEqual({ producerId: p, epoch: 1 });
    await c.close();
    c = await openCoordinators(dir, clock, { topics: { [TOPIC]: 1 } });
    txns = c.txns;
    await until(() => {
      try {
        return txns.status('r-2').epoch === 1;
      } catch {
        return false;
      }
    }, 5000, 'r-2 loaded');
    expect(await init('r-2', p, 0)).toEqual({ producerId: p, epoch: 1 });
    expect(txns.status('r-2').epoch).toBe(1);
  });

  it('an INIT_PRODUCER_ID without a pair, or a timeout abort, forgets the previous pair', async () => {
    const { producerId: p } = await txns.initProducerId('r-3', 60_000);
    expect(await init('r-3', p, 0)).toEqual({ producerId: p, epoch: 1 });
    expect(await txns.initProducerId('r-3', 60_000)).toEqual({ producerId: p, epoch: 2 });
    expect(await errorCode(init('r-3', p, 0))).toBe('producer_fenced');
    expect(await errorCode(init('r-3', p, 1))).toBe('producer_fenced');

    const { producerId: q } = await txns.initProducerId('r-4', 1000);
    expect(await txns.initProducerId('r-4', 1000, undefined, { producerId: q, epoch: 0 })).toEqual({ producerId: q, epoch: 1 });
    await txns.begin('r-4', q, 1);
    await clock.advance(1000);
    await until(() => txns.status('r-4').state === 'aborted', 5000, 'the timeout abort');
    expect(txns.status('r-4').epoch).toBe(2);
    expect(await errorCode(init('r-4', q, 0))).toBe('producer_fenced');
  });

  it('a bump that aborted an open transaction keeps the previous pair durable from its decision on (a crash before the last write)', async () => {
    const { producerId: p } = await txns.initProducerId('r-6', 60_000);
    await txns.begin('r-6', p, 0);
    await txns.publish('r-6', p, 0, TOPIC, 0, { key: null, value: Buffer.from('a') }, 1);
    // The abort's decision and end reach the log; the request's own write after them does not (a crash there).
    const real = TxnLog.prototype.write;
    let n = 0;
    const spy = vi.spyOn(TxnLog.prototype, 'write').mockImplementation(function (this: TxnLog, meta) {
      if (meta.transactionalId === 'r-6' && ++n === 3) return Promise.reject(new Error('crash'));
      return real.call(this, meta);
    });
    try {
      await expect(init('r-6', p, 0)).rejects.toThrow();
    } finally {
      spy.mockRestore();
    }
    expect(n).toBe(3);
    await c.close();
    c = await openCoordinators(dir, clock, { topics: { [TOPIC]: 1 } });
    txns = c.txns;
    expect(txns.status('r-6')).toMatchObject({ state: 'aborted', epoch: 1 });
    // The same request sent again (its answer lost) gets the pair its abort bumped to.
    expect(await init('r-6', p, 0)).toEqual({ producerId: p, epoch: 1 });
  });

  it('a bump whose abort cannot write its markers yet: the same request sent again gets the new pair, not producer_fenced', async () => {
    await c.close();
    let full = false;
    c = await openCoordinators(dir, clock, {
      topics: { [TOPIC]: 1 },
      targets: (local) =>
        Object.assign(Object.create(local) as typeof local, {
          marker: (...a: Parameters<typeof local.marker>) => (full ? Promise.reject(new TributaryError('storage_error', { reason: 'disk full' })) : local.marker(...a)),
        }),
    });
    txns = c.txns;
    const { producerId: p } = await txns.initProducerId('r-7', 60_000);
    await txns.begin('r-7', p, 0);
    await txns.publish('r-7', p, 0, TOPIC, 0, { key: null, value: Buffer.from('a') }, 1);
    full = true;
    await expect(init('r-7', p, 0)).rejects.toThrow();
    expect(txns.status('r-7')).toMatchObject({ state: 'aborting', epoch: 1 });
    // Sent again while the abort still cannot finish: refused (CONCURRENT_TRANSACTIONS on the Kafka port), not fenced.
    expect(await errorCode(init('r-7', p, 0))).toBe('storage_error');
    full = false;
    expect(await init('r-7', p, 0)).toEqual({ producerId: p, epoch: 1 });
    expect(txns.status('r-7')).toMatchObject({ state: 'aborted', epoch: 1 });
  });

  it('an id the coordinator does not know takes any pair (as Kafka creates it at epoch -1)', async () => {
    const r = await init('r-5', '0', 0);
    expect(r.epoch).toBe(0);
    expect(await init('r-5', r.producerId, 0)).toEqual({ producerId: r.producerId, epoch: 1 });
  });
});
