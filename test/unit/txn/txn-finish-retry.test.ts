/**
 * A decided transaction whose finish failed (a marker written but not acknowledged: in a cluster, the
 * partition could not replicate it while etcd was unreachable) is finished again later. That retry must
 * finish that transaction and nothing else: not the producer's next transaction, and not after this
 * coordinator gave its partition up and loaded it again. Real partitions, a fake clock.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Isolation } from 'tributary-broker/partition/partition.js';
import type { TransactionCoordinator } from 'tributary-broker/txn/txn-coordinator.js';
import type { TxnTargets } from 'tributary-broker/txn/txn-targets.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type Coordinators, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { errorCode, rec, removeDir, tempDir, until } from '../../helpers/util.js';

const TOPIC = 'data';
const RC = { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_committed' as Isolation };

let dir: string;
let clock: FakeClock;
let c: Coordinators;
let txns: TransactionCoordinator;
/** Markers to write and then fail, as a leader whose replicas cannot acknowledge them does. */
let failMarkers = 0;
const markers: string[] = [];

function flakyMarkers(local: TxnTargets): TxnTargets {
  return Object.assign(Object.create(local) as TxnTargets, {
    async marker(...args: Parameters<TxnTargets['marker']>): Promise<void> {
      markers.push(`${args[4]} p${args[1]}`);
      await local.marker(...args);
      if (failMarkers > 0) {
        failMarkers--;
        throw new TributaryError('NOT_ENOUGH_REPLICAS', { topic: args[0], partition: args[1] });
      }
    },
  });
}

beforeEach(async () => {
  dir = await tempDir('trib-txn-retry-');
  clock = new FakeClock();
  failMarkers = 0;
  markers.length = 0;
  c = await openCoordinators(dir, clock, { topics: { [TOPIC]: 2 }, targets: flakyMarkers });
  txns = c.txns;
});

afterEach(async () => {
  await c.close();
  await removeDir(dir);
});

const visible = async (p: number) => (await c.topics.get(TOPIC).partition(p).read(0, RC)).records.map((r) => r.value.toString());

/** A transaction of `id` whose commit fails after its marker reached partition 0; its retry is armed. */
async function commitThatFails(id: string): Promise<string> {
  const { producerId } = await txns.initProducerId(id, 60_000);
  await txns.begin(id, producerId, 0);
  await txns.publish(id, producerId, 0, TOPIC, 0, rec('first'), 1);
  failMarkers = 1;
  // Decided durably: answered so, though the finish failed (it is retried).
  expect(await txns.endTxn(id, producerId, 0, 'commit')).toBe('committed');
  expect(txns.status(id).state).toBe('committing');
  expect(clock.pending).toBeGreaterThan(0); // the retry
  return producerId;
}

describe('TransactionCoordinator: retrying a failed finish', () => {
  it('the Kafka port\'s EndTxn succeeds once the decision is durable, though its finish failed (retried by the coordinator)', async () => {
    const id = 'tx-kafka';
    const { producerId } = await txns.initProducerId(id, 60_000);
    await txns.begin(id, producerId, 0);
    await txns.publish(id, producerId, 0, TOPIC, 0, rec('k'), 1);
    failMarkers = 1;
    // Kafka's clients do not retry EndTxn: an error here would have the application give up a commit.
    await txns.kafka.endTxn(id, producerId, 0, 'commit');
    expect(txns.status(id).state).toBe('committing');
    await clock.advance(5_000);
    await until(() => txns.status(id).state === 'committed', 5_000, 'the retried finish');
    expect(await visible(0)).toEqual(['k']);
    // A decision that was not made is still an error: an abort of the committed transaction.
    expect(await errorCode(txns.kafka.endTxn(id, producerId, 0, 'abort'))).toBe('invalid_txn_state');
  });

  it('END_TXN answers the durable decision though its markers failed; read_committed waits for the markers', async () => {
    const id = 'tx-main';
    const { producerId } = await txns.initProducerId(id, 60_000);
    await txns.begin(id, producerId, 0);
    await txns.publish(id, producerId, 0, TOPIC, 0, rec('m0'), 1);
    await txns.publish(id, producerId, 0, TOPIC, 1, rec('m1'), 2);
    // Partition 1's leader cannot replicate its marker, three times over.
    failMarkers = 0;
    const failing = new Set([1]);
    let failuresLeft = 3;
    const targets = (txns as unknown as { deps: { targets: TxnTargets } }).deps.targets;
    const marker = targets.marker.bind(targets);
    targets.marker = async (...args: Parameters<TxnTargets['marker']>) => {
      if (failing.has(args[1]) && failuresLeft-- > 0) throw new TributaryError('NOT_ENOUGH_REPLICAS', { topic: args[0], partition: args[1] });
      return marker(...args);
    };
    expect(await txns.endTxn(id, producerId, 0, 'commit')).toBe('committed');
    expect(txns.status(id).state).toBe('committing');
    // Partition 0 has its marker; partition 1's LSO stays below the transaction until its marker lands.
    expect(await visible(0)).toEqual(['m0']);
    expect(await visible(1)).toEqual([]);
    // A retried END_TXN tries the finish again, fails again, and answers the decision again.
    expect(await txns.endTxn(id, producerId, 0, 'commit')).toBe('committed');
    expect(await errorCode(txns.endTxn(id, producerId, 0, 'abort'))).toBe('invalid_txn_state');
    // The next transaction cannot begin while this one's markers may still be written.
    expect(await errorCode(txns.begin(id, producerId, 0))).toBe('NOT_ENOUGH_REPLICAS');
    expect(await visible(1)).toEqual([]);
    // The coordinator's retry writes it.
    await clock.advance(5_000);
    await until(() => txns.status(id).state === 'committed', 5_000, 'the retried finish');
    expect(await visible(1)).toEqual(['m1']);
    await txns.begin(id, producerId, 0);
    expect(txns.status(id).state).toBe('open');
  });

  it('does not end the next transaction of the producer once the failed one was finished by a retried END_TXN', async () => {
    const id = 'tx-next';
    const producerId = await commitThatFails(id);
    // The producer retries its END_TXN: that finishes the transaction.
    expect(await txns.endTxn(id, producerId, 0, 'commit')).toBe('committed');
    expect(await visible(0)).toEqual(['first']);

    // Its next transaction is open when the retry armed by the failure falls due.
    await txns.begin(id, producerId, 0);
    await txns.publish(id, producerId, 0, TOPIC, 1, rec('second'), 1);
    markers.length = 0;
    await clock.advance(5_000);
    // END_TXN queues behind the retry (one lock per transactional id): the retry ran by the time it answers.
    expect(await txns.endTxn(id, producerId, 0, 'commit')).toBe('committed');
    expect(markers).toEqual(['commit p1']);
    expect(await visible(1)).toEqual(['second']);
    expect(txns.status(id)).toMatchObject({ state: 'committed', epoch: 0 });
  });

  it('does not act on a transaction of a partition this coordinator gave up, even once it leads that partition again', async () => {
    txns.enableOwnership(
      (p) => new TributaryError('NOT_COORDINATOR', { partition: p }),
      () => true,
    );
    await Promise.all([txns.loadPartition(0), txns.loadPartition(1)]);
    const id = 'tx-moved';
    const producerId = await commitThatFails(id);
    const tp = txns.partitionFor(id);

    // The partition moves away and back: loading it finishes the decided transaction from the log.
    txns.unloadPartition(tp);
    await txns.loadPartition(tp);
    expect(txns.status(id).state).toBe('committed');
    expect(await visible(0)).toEqual(['first']);

    // The producer's next transaction writes to the same partition.
    await txns.begin(id, producerId, 0);
    await txns.publish(id, producerId, 0, TOPIC, 0, rec('second'), 1);
    markers.length = 0;
    await clock.advance(5_000);
    // BEGIN_TXN again (answered, the transaction is open) queues behind any retry of this id.
    await txns.begin(id, producerId, 0);
    expect(markers).toEqual([]);
    expect(txns.status(id)).toMatchObject({ state: 'open', partitions: 1 });
    // Still open: nothing of it is visible to read_committed.
    expect(await visible(0)).toEqual(['first']);
    expect(await txns.endTxn(id, producerId, 0, 'commit')).toBe('committed');
    expect(await visible(0)).toEqual(['first', 'second']);
  });

  it('END_TXN answers NOT_COORDINATOR when this coordinator gave the id up while its markers failed', async () => {
    txns.enableOwnership(
      (p) => new TributaryError('NOT_COORDINATOR', { partition: p }),
      () => true,
    );
    await Promise.all([txns.loadPartition(0), txns.loadPartition(1)]);
    const id = 'tx-given-up';
    const { producerId } = await txns.initProducerId(id, 60_000);
    await txns.begin(id, producerId, 0);
    await txns.publish(id, producerId, 0, TOPIC, 0, rec('g'), 1);
    // The marker fails after the id's partition moved to another coordinator.
    const targets = (txns as unknown as { deps: { targets: TxnTargets } }).deps.targets;
    targets.marker = async (...args: Parameters<TxnTargets['marker']>) => {
      txns.unloadPartition(txns.partitionFor(id));
      throw new TributaryError('NOT_ENOUGH_REPLICAS', { topic: args[0], partition: args[1] });
    };
    expect(await errorCode(txns.endTxn(id, producerId, 0, 'commit'))).toBe('NOT_COORDINATOR');
  });

  it('finishes the failed transaction when nothing else did', async () => {
    const id = 'tx-alone';
    await commitThatFails(id);
    markers.length = 0;
    await clock.advance(1_000);
    await expect.poll(() => txns.status(id).state).toBe('committed');
    expect(markers).toEqual(['commit p0']);
    expect(await visible(0)).toEqual(['first']);
  });
});
