/**
 * A decided transaction whose markers cannot be written when its coordinator loads it (a restart, or a
 * takeover of its `__transaction_state` partition in a cluster) holds back only its own id, not the load
 * (docs/architecture.md, "Transaction coordinator"): the load completes, every other id is served, the
 * finish is retried in the background with backoff until the markers land, and the decision stands.
 * Meanwhile the id's next transaction cannot begin (the retriable failure, CONCURRENT_TRANSACTIONS on the
 * Kafka port). The retries end with the coordinator or with its partition. Real partitions and targets,
 * with the stuck topic's markers (and offsets) refused as a full disk refuses them; a fake clock.
 */
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Isolation } from 'tributary-broker/partition/partition.js';
import type { TransactionCoordinator } from 'tributary-broker/txn/txn-coordinator.js';
import { ConcurrentTransactionsError } from 'tributary-broker/txn/txn-kafka.js';
import type { TxnTargets } from 'tributary-broker/txn/txn-targets.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type Coordinators, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { expectError, rec, removeDir, tempDir, until } from '../../helpers/util.js';

const STUCK = 'stuck';
const OTHER = 'other';
const IN = 'in';
const TOPICS = { [STUCK]: 1, [OTHER]: 1, [IN]: 1 };
const RC = { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_committed' as Isolation };
/** The longest backoff between two attempts (txn-finisher.ts): advancing this far runs the next one. */
const MAX_BACKOFF_MS = 10_000;

let dir: string;
let clock: FakeClock;
let c: Coordinators;
/** While true, STUCK's markers and IN's transactional offsets are refused with storage_error. */
let refusing = false;
let markerCalls = 0;
let logs: Array<Record<string, unknown>>;

function refusingTargets(local: TxnTargets): TxnTargets {
  return Object.assign(Object.create(local) as TxnTargets, {
    async marker(...args: Parameters<TxnTargets['marker']>): Promise<void> {
      markerCalls++;
      if (refusing && args[0] === STUCK) throw new TributaryError('storage_error', { reason: 'injected: no space left on device' });
      await local.marker(...args);
    },
    async applyOffsets(...args: Parameters<TxnTargets['applyOffsets']>): Promise<void> {
      if (refusing && args[2] === IN) throw new TributaryError('storage_error', { reason: 'injected: offsets not written' });
      await local.applyOffsets(...args);
    },
  });
}

const open = () =>
  openCoordinators(dir, clock, {
    topics: TOPICS,
    targets: refusingTargets,
    logger: pino({ level: 'info' }, { write: (line: string) => logs.push(JSON.parse(line) as Record<string, unknown>) }),
  });

beforeEach(async () => {
  dir = await tempDir('trib-txn-load-markers-');
  clock = new FakeClock();
  refusing = false;
  markerCalls = 0;
  logs = [];
  c = await open();
});

afterEach(async () => {
  refusing = false;
  await c.close().catch(() => {});
  await removeDir(dir);
});

const visible = async (topic: string) => (await c.topics.get(topic).partition(0).read(0, RC)).records.map((r) => r.value.toString());

/** A transaction of `id` writing `value` to STUCK, decided `result` while its markers are refused. */
async function decideStuck(txns: TransactionCoordinator, id: string, value: string, result: 'commit' | 'abort', offsets = false): Promise<string> {
  const { producerId } = await txns.initProducerId(id, 60_000);
  await txns.begin(id, producerId, 0);
  await txns.publish(id, producerId, 0, STUCK, 0, rec(value), 1);
  if (offsets) {
    // Consume-process-produce: the input's offsets go with the output (a Kafka group, no member named).
    await c.topics.get(IN).partition(0).append([rec('i0'), rec('i1')]);
    const none = { memberId: '', instanceId: null, generation: -1 };
    await txns.sendOffsets(id, producerId, 0, { group: 'g', topic: IN, member: '', generation: -1, entries: [{ partition: 0, offset: 2 }], classic: none });
  }
  refusing = true;
  // Durably decided: answered as decided, though the markers failed.
  expect(await txns.endTxn(id, producerId, 0, result)).toBe(result === 'commit' ? 'committed' : 'aborted');
  return producerId;
}

/** A whole transaction of `id` on OTHER: init, begin, one record, commit. */
async function commitOther(txns: TransactionCoordinator, id: string, value: string): Promise<void> {
  const { producerId, epoch } = await txns.initProducerId(id, 60_000);
  await txns.begin(id, producerId, epoch);
  await txns.publish(id, producerId, epoch, OTHER, 0, rec(value), 1);
  expect(await txns.endTxn(id, producerId, epoch, 'commit')).toBe('committed');
}

describe('TransactionCoordinator: decided transactions whose markers fail when it loads them', () => {
  it('a restart completes and serves other ids; the stuck id waits, retried in the background until its markers land', async () => {
    const committed = await decideStuck(c.txns, 'tx-commit', 'c1', 'commit', true);
    const aborted = await decideStuck(c.txns, 'tx-abort', 'a1', 'abort');
    await c.close();

    // The restart finds both decided and their markers still refused: it completes all the same.
    c = await open();
    const txns = c.txns;
    expect(txns.status('tx-commit').state).toBe('committing');
    expect(txns.status('tx-abort').state).toBe('aborting');
    expect(logs.some((l) => l.msg === 'transaction coordinator loaded' && l.finished === 0 && l.pending === 2)).toBe(true);
    const retried = logs.filter((l) => l.level === 40 && l.transactionalId === 'tx-commit' && String(l.msg).includes('retrying'));
    expect(retried[0]).toMatchObject({ result: 'commit', partitions: [`${STUCK}[0]`], attempt: 1 });

    // Every other id works.
    await commitOther(txns, 'tx-other', 'o1');
    expect(await visible(OTHER)).toEqual(['o1']);

    // The stuck ids cannot start anything new, and are told to retry.
    for (const [id, pid] of [
      ['tx-commit', committed],
      ['tx-abort', aborted],
    ] as const) {
      expect((await expectError(txns.begin(id, pid, 0), 'storage_error')).retriable).toBe(true);
      expect((await expectError(txns.initProducerId(id, 60_000), 'storage_error')).retriable).toBe(true);
      await expect(txns.kafka.addPartitions(id, pid, 0, [{ topic: OTHER, partition: 0 }])).rejects.toBeInstanceOf(ConcurrentTransactionsError);
      await expectError(
        Promise.resolve().then(() => txns.publish(id, pid, 0, OTHER, 0, rec('no'), 1)),
        'invalid_txn_state',
      );
      // Still the decided transaction, at its epoch: nothing was reversed or bumped.
      expect(txns.status(id)).toMatchObject({ epoch: 0, partitions: 1 });
    }
    expect(txns.status('tx-commit').state).toBe('committing');
    expect(txns.status('tx-abort').state).toBe('aborting');
    // The commit's offsets are pending again: a member taking the partition over does not start below them.
    await expectError(
      Promise.resolve().then(() => c.groups.fetchOffset('g', IN, 0)),
      'UNSTABLE_OFFSET_COMMIT',
    );
    expect(await visible(STUCK)).toEqual([]);

    // The disk has room again: the next retry finishes both as decided.
    refusing = false;
    await clock.advance(MAX_BACKOFF_MS);
    await until(() => txns.status('tx-commit').state === 'committed' && txns.status('tx-abort').state === 'aborted', 5_000, 'the background retries');
    expect(await visible(STUCK)).toEqual(['c1']);
    expect(c.groups.fetchOffset('g', IN, 0)).toEqual({ offset: 2, committed: true });
    await txns.begin('tx-commit', committed, 0);
    expect(txns.status('tx-commit').state).toBe('open');
  });

  it('stopping the coordinator ends the background retry: no timer is left', async () => {
    await decideStuck(c.txns, 'tx-stop', 's1', 'commit');
    await c.close();
    c = await open();
    expect(c.txns.status('tx-stop').state).toBe('committing');
    expect(clock.pending).toBeGreaterThan(0);
    await c.close();
    expect(clock.pending).toBe(0);
    const calls = markerCalls;
    await clock.advance(10 * MAX_BACKOFF_MS);
    expect(markerCalls).toBe(calls);
  });

  it('a takeover in a cluster completes the load: the partition serves its other ids; giving it up ends the retry', async () => {
    const txns = c.txns;
    txns.enableOwnership(
      (p) => new TributaryError('NOT_COORDINATOR', { partition: p }),
      () => true,
    );
    await Promise.all([txns.loadPartition(0), txns.loadPartition(1)]);
    const stuck = 'tx-takeover';
    const tp = txns.partitionFor(stuck);
    // Another id of the same __transaction_state partition.
    let other = 'tx-neighbour-0';
    for (let i = 1; txns.partitionFor(other) !== tp; i++) other = `tx-neighbour-${i}`;
    const producerId = await decideStuck(txns, stuck, 't1', 'commit');

    // Moved away and back (a takeover replays the partition), the markers still refused: loaded all the same.
    txns.unloadPartition(tp);
    await txns.loadPartition(tp);
    expect(txns.status(stuck).state).toBe('committing');
    await commitOther(txns, other, 'n1');
    expect(await visible(OTHER)).toEqual(['n1']);
    await expectError(txns.begin(stuck, producerId, 0), 'storage_error');

    // Given up again: its retry ends with it.
    const pending = clock.pending;
    txns.unloadPartition(tp);
    expect(clock.pending).toBeLessThan(pending);
    const calls = markerCalls;
    await clock.advance(10 * MAX_BACKOFF_MS);
    expect(markerCalls).toBe(calls);

    // Taken over once the disk has room: the load finishes it.
    refusing = false;
    await txns.loadPartition(tp);
    expect(txns.status(stuck).state).toBe('committed');
    expect(await visible(STUCK)).toEqual(['t1']);
    // Short: a load held by the markers (the defect) never completes.
  }, 15_000);
});
