/**
 * A transaction is decided only once its decision (prepare_commit / prepare_abort) is in
 * `__transaction_state` (docs/architecture.md, "Transaction coordinator"): a failed decision write leaves
 * it open, so a retried END_TXN does not write markers of a decision a crash would forget (recovery aborts
 * what it replays as open), which committed it on one partition and aborted it on another.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Isolation } from 'tributary-broker/partition/partition.js';
import type { TxnTargets } from 'tributary-broker/txn/txn-targets.js';
import type { TxnLog, TxnMetadata } from 'tributary-broker/txn/txn-log.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type Coordinators, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { errorCode, rec, removeDir, tempDir } from '../../helpers/util.js';

const TOPIC = 'data';
const RC = { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_committed' as Isolation };
let dir: string;
let clock: FakeClock;
let c: Coordinators;
let failMarkerP1 = false;

function flaky(local: TxnTargets): TxnTargets {
  return Object.assign(Object.create(local) as TxnTargets, {
    async marker(...args: Parameters<TxnTargets['marker']>): Promise<void> {
      if (failMarkerP1 && args[1] === 1) throw new TributaryError('storage_error', { reason: 'injected (or: the crash comes now)' });
      await local.marker(...args);
    },
  });
}

beforeEach(async () => {
  dir = await tempDir('trib-txn-decision-');
  clock = new FakeClock();
  c = await openCoordinators(dir, clock, { topics: { [TOPIC]: 2 }, targets: flaky });
});
afterEach(async () => {
  await c.close().catch(() => {});
  await removeDir(dir);
});

const visible = async (p: number) => (await c.topics.get(TOPIC).partition(p).read(0, RC)).records.map((r) => r.value.toString());

describe('END_TXN retry after a failed decision write', () => {
  it('never commits on one partition and aborts on another', async () => {
    const id = 'tx';
    const { producerId } = await c.txns.initProducerId(id, 60_000);
    await c.txns.begin(id, producerId, 0);
    await c.txns.publish(id, producerId, 0, TOPIC, 0, rec('a0'), 1);
    await c.txns.publish(id, producerId, 0, TOPIC, 1, rec('a1'), 2);

    const log = (c.txns as unknown as { deps: { log: TxnLog } }).deps.log;
    const write = log.write.bind(log);
    let failNext = 1;
    let failAll = false;
    log.write = async (m: TxnMetadata) => {
      if (failAll || failNext-- > 0) throw new TributaryError('storage_error', { reason: `injected: ${m.state} not written` });
      return write(m);
    };
    // The decision write fails: the client is told so.
    expect(await errorCode(c.txns.endTxn(id, producerId, 0, 'commit'))).toBe('storage_error');
    expect(c.txns.status(id).state).toBe('open');
    // The client retries END_TXN commit; the markers go out (p1's is where the crash comes), the end is not recorded.
    failAll = true;
    failMarkerP1 = true;
    expect(await errorCode(c.txns.endTxn(id, producerId, 0, 'commit'))).toBe('storage_error');

    // Restart (only the durable __transaction_state counts).
    log.write = write;
    failMarkerP1 = false;
    await c.close();
    c = await openCoordinators(dir, clock, { topics: { [TOPIC]: 2 }, targets: flaky });
    await expect.poll(() => c.txns.status(id).state).toBe('aborted');
    const p0 = await visible(0);
    const p1 = await visible(1);
    // One outcome everywhere.
    expect({ p0, p1 }).toEqual({ p0: [], p1: [] });
  });
});
