/**
 * Cluster mode: a coordinator that takes a `__transaction_state` partition over replays it to its log end,
 * past the HWM, and a decision (prepare_commit / prepare_abort) it finds there is not on the in-sync
 * replicas yet: another change of leader may still lose it, and the next coordinator then ends the
 * transaction the other way. So its markers wait until the HWM passes the decision (Kafka writes markers
 * only once PREPARE is replicated); meanwhile the id answers the retriable COORDINATOR_LOADING
 * (docs/architecture.md, "Transaction coordinator"). Without that, a takeover's commit markers and the next
 * coordinator's abort markers left the transaction committed on one partition and aborted on another.
 * Real partitions, the leader check and the replication wait faked as in
 * test/unit/coordinator/replication-timeout.test.ts.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Isolation, Partition } from 'tributary-broker/partition/partition.js';
import { replicatedAppend } from 'tributary-broker/partition/internal-log.js';
import { TXN_STATE_TOPIC } from 'tributary-broker/txn/txn-log.js';
import type { TxnTargets } from 'tributary-broker/txn/txn-targets.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type Coordinators, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { expectError, rec, removeDir, tempDir, until } from '../../helpers/util.js';

const TOPIC = 'data';
const ID = 'tx';
const RC = { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_committed' as Isolation };
let dir: string;
let c: Coordinators;
let clock: FakeClock;
/** 'timeout': the next appends' replication waits fail after the append (outcome unknown). */
let fault: 'none' | 'timeout' = 'none';
/** Markers written to the data partitions, in order. */
let markers: string[] = [];
/** While true, the marker of partition 1 is refused (its leader unreachable). */
let refuseP1 = false;

function recording(local: TxnTargets): TxnTargets {
  return Object.assign(Object.create(local) as TxnTargets, {
    async marker(...args: Parameters<TxnTargets['marker']>): Promise<void> {
      if (refuseP1 && args[1] === 1) throw new TributaryError('NOT_ENOUGH_REPLICAS', { reason: 'injected' });
      markers.push(`${args[4]}@${args[1]}`);
      await local.marker(...args);
    },
  });
}

beforeEach(async () => {
  dir = await tempDir('trib-txn-past-hwm-');
  fault = 'none';
  markers = [];
  refuseP1 = false;
  clock = new FakeClock();
  c = await openCoordinators(dir, clock, {
    topics: { [TOPIC]: 2 },
    targets: recording,
    // As the cluster wires it (broker.ts), with the leader check and the replication wait faked.
    txnAppend: replicatedAppend(
      () => 1,
      async (part, lastOffset) => {
        if (fault === 'timeout') throw new TributaryError('request_timeout', { reason: 'injected: the in-sync replicas did not confirm the record in time' });
        part.setReplicatedHighWatermark(lastOffset + 1);
      },
    ),
  });
  // As a cluster's leader: the HWM moves only when the fake replication says so.
  for (const p of c.topics.get(TXN_STATE_TOPIC).partitions) p.enableReplication(() => {});
});
afterEach(async () => {
  await c.close().catch(() => {});
  await removeDir(dir);
});

const statePartition = (): Partition => c.topics.get(TXN_STATE_TOPIC).partitions[c.txns.partitionFor(ID)]!;
const visible = async (p: number) => (await c.topics.get(TOPIC).partition(p).read(0, RC)).records.map((r) => r.value.toString());

/** An open transaction with a record on each data partition. */
async function opened(): Promise<string> {
  const { producerId } = await c.txns.initProducerId(ID, 60_000);
  await c.txns.begin(ID, producerId, 0);
  await c.txns.publish(ID, producerId, 0, TOPIC, 0, rec('a0'), 1);
  await c.txns.publish(ID, producerId, 0, TOPIC, 1, rec('a1'), 2);
  return producerId;
}

/** END_TXN whose decision is appended but whose replication times out: outcome unknown, no markers. */
async function decidedUnknown(producerId: string, result: 'commit' | 'abort'): Promise<void> {
  fault = 'timeout';
  await expectError(c.txns.endTxn(ID, producerId, 0, result), 'request_timeout', { outcome: 'unknown' });
  fault = 'none';
  expect(markers).toEqual([]);
  expect(c.txns.status(ID).state).toBe('open');
}

/** As in a cluster: this broker leads the id's partition again and replays it (what its log holds). */
async function takeOver(): Promise<void> {
  c.txns.enableOwnership((q) => new TributaryError('NOT_COORDINATOR', { partition: q }), () => true, () => true);
  c.txns.unloadPartition(c.txns.partitionFor(ID));
  await c.txns.loadPartition(c.txns.partitionFor(ID));
}

/** A takeover by a leader whose followers are gone: nothing it appends is replicated (it is about to fail). */
async function takeOverCutOff(): Promise<void> {
  fault = 'timeout';
  try {
    await takeOver();
  } finally {
    fault = 'none';
  }
}

/** The next leader is an in-sync replica without the records past the HWM (they are lost). */
async function loseUnreplicated(): Promise<void> {
  const p = statePartition();
  await p.truncateTo(p.highWatermark);
}

const state = (): string => {
  try {
    return c.txns.status(ID).state;
  } catch (err) {
    return (err as TributaryError).code;
  }
};

describe('a decision replayed from past the HWM', () => {
  it('writes no marker until the HWM passes it; meanwhile the id answers COORDINATOR_LOADING', async () => {
    const producerId = await opened();
    await decidedUnknown(producerId, 'commit');
    await takeOver();
    expect(markers).toEqual([]);
    expect(statePartition().highWatermark).toBeLessThan(statePartition().logEndOffset);
    expect(state()).toBe('committing');
    expect({ p0: await visible(0), p1: await visible(1) }).toEqual({ p0: [], p1: [] });
    // Not answered as committed (another change of leader may still lose the decision), nor finished here.
    await expectError(c.txns.endTxn(ID, producerId, 0, 'commit'), 'COORDINATOR_LOADING');
    await expectError(c.txns.initProducerId(ID, 60_000), 'COORDINATOR_LOADING');
    await expectError(c.txns.begin(ID, producerId, 0), 'COORDINATOR_LOADING');
    expect(markers).toEqual([]);
    // The followers catch up: the decision is committed, and finished.
    const p = statePartition();
    p.setReplicatedHighWatermark(p.logEndOffset);
    await until(() => state() === 'committed', 5000, 'the transaction committed');
    expect({ p0: await visible(0), p1: await visible(1) }).toEqual({ p0: ['a0'], p1: ['a1'] });
    await expect(c.txns.endTxn(ID, producerId, 0, 'commit')).resolves.toBe('committed');
  });

  it("looks at the HWM again on the coordinator's clock after a wait that ended without it passing the decision", async () => {
    const producerId = await opened();
    await decidedUnknown(producerId, 'commit');
    await takeOver();
    expect(state()).toBe('committing');
    const armed = clock.pending;
    // The wait for the HWM ends without it passing the decision (the partition woke its waiters, as when
    // this broker's lead is in doubt): the next look waits 100 ms of the coordinator's clock, not of the real one.
    statePartition().wakeAll();
    await until(() => clock.pending > armed, 5000, 'the next look at the HWM armed on the clock');
    const p = statePartition();
    p.setReplicatedHighWatermark(p.logEndOffset);
    await clock.advance(100);
    await until(() => state() === 'committed', 5000, 'the transaction committed');
    expect(markers).toEqual(['commit@0', 'commit@1']);
  });

  it('a commit lost with the next change of leader: the next coordinator aborts it, and no partition has committed it', async () => {
    const producerId = await opened();
    await decidedUnknown(producerId, 'commit');
    // Were its markers written, partition 0 would commit (partition 1's leader is unreachable meanwhile).
    refuseP1 = true;
    await takeOverCutOff();
    refuseP1 = false;
    expect(state()).toBe('committing');
    await loseUnreplicated();
    await takeOver();
    // Replayed open: aborted by the coordinator (cause recovered).
    await until(() => state() === 'aborted', 5000, 'the transaction aborted');
    expect({ p0: await visible(0), p1: await visible(1) }).toEqual({ p0: [], p1: [] });
    expect(markers).toEqual(['abort@0', 'abort@1']);
  });

  it('an abort lost with the next change of leader, over a commit the replicas have: committed on every partition', async () => {
    const producerId = await opened();
    await decidedUnknown(producerId, 'commit');
    // The commit's decision reaches the in-sync replicas after all; then an abort's does not.
    statePartition().setReplicatedHighWatermark(statePartition().logEndOffset);
    await decidedUnknown(producerId, 'abort');
    await takeOverCutOff();
    expect(state()).toBe('aborting');
    await loseUnreplicated();
    await takeOver();
    await until(() => state() === 'committed', 5000, 'the transaction committed');
    expect({ p0: await visible(0), p1: await visible(1) }).toEqual({ p0: ['a0'], p1: ['a1'] });
    expect(markers).toEqual(['commit@0', 'commit@1']);
  });
});
