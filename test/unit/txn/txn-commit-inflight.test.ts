/**
 * END_TXN commit and the transaction's appends still in flight (a producer that publishes on one
 * connection and ends the transaction on another): the commit is decided only once they settled, and one
 * that failed refuses it, since the producer was told that record failed (docs/architecture.md,
 * "Transaction coordinator"). Both ports: TXN_PUBLISH and the Kafka port's transactional Produce. Real
 * partitions, appends held and failed on demand, a fake clock.
 */
import { describe, expect, it } from 'vitest';
import type { Isolation } from 'tributary-broker/partition/partition.js';
import type { TransactionCoordinator } from 'tributary-broker/txn/txn-coordinator.js';
import type { TxnTargets } from 'tributary-broker/txn/txn-targets.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { RecordAttr } from 'tributary-protocol/record.js';
import { type Coordinators, eachWithCoordinators } from '../../helpers/coordinators.js';
import { expectError, rec, } from '../../helpers/util.js';

const TOPIC = 'data';
const RC = { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_committed' as Isolation };
const RU = { maxRecords: 100, maxBytes: 1 << 20, isolation: 'read_uncommitted' as Isolation };

let c: Coordinators;
let txns: TransactionCoordinator;

/** An append held where it reaches its partition: the test lets it land, or fails it. */
interface Held {
  /** Resolves once the append reached its partition (and waits there). */
  reached: Promise<void>;
  land(): void;
  fail(err: TributaryError): void;
}

/** The next append's hold: its arrival, and the test's decision. */
let holdNext: { arrived: () => void; outcome: Promise<TributaryError | undefined> } | undefined;

/** The next append waits for the test's land() or fail(). */
function hold(): Held {
  let arrived!: () => void;
  const reached = new Promise<void>((resolve) => (arrived = resolve));
  let settle!: (err?: TributaryError) => void;
  const outcome = new Promise<TributaryError | undefined>((resolve) => (settle = resolve));
  holdNext = { arrived, outcome };
  return { reached, land: () => settle(), fail: (err) => settle(err) };
}

function heldAppends(local: TxnTargets): TxnTargets {
  return Object.assign(Object.create(local) as TxnTargets, {
    async append(...args: Parameters<TxnTargets['append']>): Promise<{ offset: number }> {
      const h = holdNext;
      holdNext = undefined;
      if (h) {
        h.arrived();
        const err = await h.outcome;
        if (err) throw err;
      }
      return local.append(...args);
    },
  });
}

eachWithCoordinators('trib-txn-inflight-', { topics: { [TOPIC]: 2 }, targets: heldAppends }, (x) => {
  holdNext = undefined;
  c = x;
  txns = x.txns;
});

const part = (p: number) => c.topics.get(TOPIC).partition(p);
const values = (rs: Array<{ value: Buffer }>) => rs.map((r) => r.value.toString());
const controls = (rs: Array<{ attributes: number }>) => rs.map((r) => (r.attributes & RecordAttr.CONTROL ? 'marker' : 'record'));

describe('END_TXN commit with appends of the transaction in flight', () => {
  it('refuses the commit when one of them fails: the transaction stays open, only an abort ends it', async () => {
    const id = 'tx-inflight-fail';
    const { producerId, epoch } = await txns.initProducerId(id, 60_000);
    await txns.begin(id, producerId, epoch);
    await txns.publish(id, producerId, epoch, TOPIC, 0, rec('landed'), 1);
    const held = hold();
    const publishing = txns.publish(id, producerId, epoch, TOPIC, 1, rec('in flight'), 2);
    publishing.catch(() => {});
    await held.reached;
    // END_TXN on another connection, before the publish was answered.
    const committing = txns.endTxn(id, producerId, epoch, 'commit');
    committing.catch(() => {});
    held.fail(new TributaryError('NOT_ENOUGH_REPLICAS', { topic: TOPIC, partition: 1 }));
    await expectError(publishing, 'invalid_txn_state');
    const refused = await expectError(committing, 'invalid_txn_state');
    expect(refused.fields.reason).toContain('record 2 of the transaction failed');
    // Not decided: still open, its commit refused again, its abort accepted.
    expect(txns.status(id).state).toBe('open');
    await expectError(txns.endTxn(id, producerId, epoch, 'commit'), 'invalid_txn_state');
    expect(await txns.endTxn(id, producerId, epoch, 'abort')).toBe('aborted');
    expect(values((await part(0).read(0, RC)).records)).toEqual([]);
    expect(controls((await part(0).read(0, RU)).records)).toEqual(['record', 'marker']);
  });

  it('decides the commit once they landed: every record before its partition\'s marker', async () => {
    const id = 'tx-inflight-ok';
    const { producerId, epoch } = await txns.initProducerId(id, 60_000);
    await txns.begin(id, producerId, epoch);
    const held = hold();
    const publishing = txns.publish(id, producerId, epoch, TOPIC, 1, rec('slow'), 1);
    await held.reached;
    const committing = txns.endTxn(id, producerId, epoch, 'commit');
    held.land();
    expect(await publishing).toMatchObject({ partition: 1, offset: 0 });
    expect(await committing).toBe('committed');
    expect(controls((await part(1).read(0, RU)).records)).toEqual(['record', 'marker']);
    expect(values((await part(1).read(0, RC)).records)).toEqual(['slow']);
  });

  it('Kafka port: a transactional Produce that fails while EndTxn commit waits for it refuses the commit', async () => {
    const id = 'k-inflight-fail';
    const { producerId, epoch } = await txns.initProducerId(id, 60_000);
    await txns.kafka.addPartitions(id, producerId, epoch, [
      { topic: TOPIC, partition: 0 },
      { topic: TOPIC, partition: 1 },
    ]);
    await txns.kafka.append(id, producerId, epoch, TOPIC, 0, () => part(0).appendTransactional([rec('landed')], { producerId, epoch, firstSequence: 0, lastSequence: 0 }));
    let started!: () => void;
    const reached = new Promise<void>((resolve) => (started = resolve));
    let failIt!: (err: Error) => void;
    const producing = txns.kafka.append(id, producerId, epoch, TOPIC, 1, () => {
      started();
      return new Promise<never>((_, reject) => (failIt = reject));
    });
    producing.catch(() => {});
    await reached;
    const committing = txns.kafka.endTxn(id, producerId, epoch, 'commit');
    committing.catch(() => {});
    failIt(new TributaryError('NOT_ENOUGH_REPLICAS', { topic: TOPIC, partition: 1 }));
    await expectError(producing, 'NOT_ENOUGH_REPLICAS');
    await expectError(committing, 'invalid_txn_state');
    expect(txns.status(id).state).toBe('open');
    await txns.kafka.endTxn(id, producerId, epoch, 'abort');
    expect(values((await part(0).read(0, RC)).records)).toEqual([]);
    expect(txns.status(id).state).toBe('aborted');
  });
});
