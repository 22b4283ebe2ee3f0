/**
 * SEND_OFFSETS_TO_TXN whose write to the transaction state log fails: the client is told it failed, so the
 * transaction may no longer commit (those offsets would go in with a commit the client believes has none
 * of them); only an abort, which stores none.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { TxnLog } from 'tributary-broker/txn/txn-log.js';
import { type Coordinators, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { errorCode, rec, removeDir, tempDir } from '../../helpers/util.js';

const OUT = 'out';
const IN = 'in';
let dir: string;
let c: Coordinators;

beforeEach(async () => {
  dir = await tempDir('trib-txn-offsets-fail-');
  c = await openCoordinators(dir, new FakeClock(), { topics: { [OUT]: 1, [IN]: 1 } });
});

afterEach(async () => {
  await c.close().catch(() => {});
  await removeDir(dir);
});

describe('SEND_OFFSETS_TO_TXN whose state write fails', () => {
  it('refuses the commit afterwards (abort only), and the abort stores none of the offsets', async () => {
    const txns = c.txns;
    const { producerId } = await txns.initProducerId('so-1', 60_000);
    await txns.begin('so-1', producerId, 0);
    await txns.publish('so-1', producerId, 0, OUT, 0, rec('o1'), 1);
    await c.topics.get(IN).partition(0).append([rec('i0'), rec('i1')]);
    const classic = { memberId: '', instanceId: null, generation: -1 };
    const real = TxnLog.prototype.write;
    const spy = vi.spyOn(TxnLog.prototype, 'write').mockImplementation(function (this: TxnLog, meta) {
      if (meta.transactionalId === 'so-1' && meta.offsets.length > 0 && meta.state === 'open') return Promise.reject(new Error('disk gone'));
      return real.call(this, meta);
    });
    try {
      await expect(txns.sendOffsets('so-1', producerId, 0, { group: 'g', topic: IN, member: '', generation: -1, entries: [{ partition: 0, offset: 2 }], classic })).rejects.toThrow();
    } finally {
      spy.mockRestore();
    }
    expect(await errorCode(txns.endTxn('so-1', producerId, 0, 'commit'))).toBe('invalid_txn_state');
    expect(await txns.endTxn('so-1', producerId, 0, 'abort')).toBe('aborted');
    expect(c.groups.fetchOffset('g', IN, 0)).toMatchObject({ committed: false });
  });
});
