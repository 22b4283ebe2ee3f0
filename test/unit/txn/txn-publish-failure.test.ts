/**
 * A transactional record whose append fails with a retriable error (its partition's leader went away
 * mid-request, the peer connection stalled) may or may not have been appended, so it is never appended
 * again: the transaction can only be aborted. The producer must be told so at once, not given a
 * retriable error it would retry (its retry gets the same failed result) until the transaction times
 * out. Real partitions, a fake clock.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { TransactionCoordinator } from 'tributary-broker/txn/txn-coordinator.js';
import type { TxnTargets } from 'tributary-broker/txn/txn-targets.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { RecordAttr } from 'tributary-protocol/record.js';
import { type Coordinators, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { rec, removeDir, tempDir } from '../../helpers/util.js';

const TOPIC = 'data';

let dir: string;
let c: Coordinators;
let txns: TransactionCoordinator;
/** The next append fails with this error (after reaching the partition or not: the coordinator cannot know). */
let failNext: TributaryError | undefined;

function flakyAppends(local: TxnTargets): TxnTargets {
  return Object.assign(Object.create(local) as TxnTargets, {
    async append(...args: Parameters<TxnTargets['append']>): Promise<{ offset: number }> {
      const err = failNext;
      failNext = undefined;
      if (err) throw err;
      return local.append(...args);
    },
  });
}

beforeEach(async () => {
  dir = await tempDir('trib-txn-publish-');
  failNext = undefined;
  c = await openCoordinators(dir, new FakeClock(), { topics: { [TOPIC]: 2 }, targets: flakyAppends });
  txns = c.txns;
});

afterEach(async () => {
  await c.close();
  await removeDir(dir);
});

async function rejection(p: () => Promise<unknown>): Promise<TributaryError> {
  try {
    await p();
  } catch (err) {
    return err as TributaryError;
  }
  throw new Error('expected a rejection');
}

describe('TransactionCoordinator: a record whose append failed', () => {
  it('answers invalid_txn_state (not retriable) naming the cause, to the request and to its retries; only an abort ends it', async () => {
    const id = 'tx-spoiled';
    const { producerId } = await txns.initProducerId(id, 60_000);
    await txns.begin(id, producerId, 0);
    await txns.publish(id, producerId, 0, TOPIC, 0, rec('ok'), 1);
    failNext = new TributaryError('COORDINATOR_NOT_AVAILABLE', { reason: 'the partition leader is not answering' });

    const first = await rejection(() => txns.publish(id, producerId, 0, TOPIC, 1, rec('lost?'), 2));
    expect(first).toMatchObject({ code: 'invalid_txn_state', retriable: false });
    expect(first.fields.reason).toContain('record 2 of the transaction failed (COORDINATOR_NOT_AVAILABLE)');
    // The retry of that record, and any next one, get the same answer: nothing is appended again.
    const retry = await rejection(() => txns.publish(id, producerId, 0, TOPIC, 1, rec('lost?'), 2));
    expect(retry).toMatchObject({ code: 'invalid_txn_state', retriable: false });
    expect((await rejection(() => txns.publish(id, producerId, 0, TOPIC, 1, rec('next'), 3))).code).toBe('invalid_txn_state');
    expect((await rejection(() => txns.endTxn(id, producerId, 0, 'commit'))).code).toBe('invalid_txn_state');
    expect(await txns.endTxn(id, producerId, 0, 'abort')).toBe('aborted');
    // Partition 1 was registered before the failed append: it got the abort marker, and nothing else.
    const all = await c.topics.get(TOPIC).partition(1).read(0, { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_uncommitted' });
    expect(all.records.map((r) => r.attributes & RecordAttr.CONTROL)).toEqual([RecordAttr.CONTROL]);
  });

  it('keeps a non-retriable failure as it is: the producer learns what was wrong with the record', async () => {
    const id = 'tx-bad';
    const { producerId } = await txns.initProducerId(id, 60_000);
    await txns.begin(id, producerId, 0);
    failNext = new TributaryError('record_too_large', { size: 10, max: 1 });
    const err = await rejection(() => txns.publish(id, producerId, 0, TOPIC, 0, rec('big'), 1));
    expect(err.code).toBe('record_too_large');
    // Still spoiled: the commit is refused.
    expect((await rejection(() => txns.endTxn(id, producerId, 0, 'commit'))).code).toBe('invalid_txn_state');
  });
});
