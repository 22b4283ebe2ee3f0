/**
 * A transaction coordinator that was replaced (cut off, paused past its lease) may still have a
 * TXN_APPEND on its way to a data leader. If it arrives after the new coordinator's abort marker, it would
 * open a new transaction of the same producer epoch there, and the producer's next commit would make the
 * aborted record visible to read_committed readers. The data leader refuses appends from a coordinator
 * older than one it knows of, from etcd or from a marker it wrote (docs/protocol.md, cluster mode).
 */
import { beforeEach, describe, expect, it } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type TestCluster, useCluster } from '../helpers/cluster.js';
import { kv } from '../integration/groups/helpers.js';

const TOPIC = 'stale-txn';

describe('TXN_APPEND and TXN_MARKER from a replaced transaction coordinator', () => {
  const getCluster = useCluster(3);
  let cluster: TestCluster;
  beforeEach(() => {
    cluster = getCluster();
  });

  /** A fully replicated topic; its partition's leader and the leader epoch of `txnPartition` (the coordinator's). */
  async function createTopic(topic: string, txnPartition: number): Promise<{ leader: number; coordEpoch: number }> {
    const admin = await cluster.connect(0);
    await admin.command('CREATE', { topic, partitions: 1, replication_factor: 3 });
    return cluster.waitFor('leaders of the topic and of the transaction partition', async () => {
      const s = await cluster.status();
      const data = s.partitions.find((p) => p.topic === topic && p.partition === 0);
      const txn = s.partitions.find((p) => p.topic === '__transaction_state' && p.partition === txnPartition);
      return data && txn && data.leader >= 0 && txn.leader >= 0 && data.isr.length === 3 ? { leader: data.leader, coordEpoch: txn.leader_epoch } : false;
    });
  }

  it('is refused once a newer coordinator is known, so an aborted record never joins the next transaction', async () => {
    const txnPartition = 0;
    const { leader, coordEpoch } = await createTopic(TOPIC, txnPartition);
    const conn = await cluster.connect(leader);
    const fields = { topic: TOPIC, partition: 0, producerId: 'p-stale', epoch: 0, coordinator_partition: txnPartition };

    // From the current coordinator: accepted (a transaction opens), then aborted by its marker.
    const ok = kv(await conn.command('TXN_APPEND', { ...fields, coordinator_epoch: coordEpoch, message: 'first' }));
    expect(Number(ok.get('offset'))).toBe(0);
    await conn.command('TXN_MARKER', { ...fields, result: 'abort', coordinator_epoch: coordEpoch });

    // A newer coordinator (its epoch not yet in this broker's view of etcd) aborts the producer's
    // transaction here; then the old coordinator's delayed append arrives.
    await conn.command('TXN_MARKER', { ...fields, result: 'abort', coordinator_epoch: coordEpoch + 1 });
    const late = await conn.command('TXN_APPEND', { ...fields, coordinator_epoch: coordEpoch, message: 'late' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(late).toBeInstanceOf(TributaryError);
    expect((late as TributaryError).code).toBe('NOT_COORDINATOR');

    // Nothing was appended for it: the log holds the first record and the two markers only.
    const offsets = kv(await conn.command('LIST_OFFSETS', { topic: TOPIC, partition: 0 })).get('offsets')!;
    expect(offsets).toMatch(/leo=3/);
    // An append without the coordinator's identity is refused outright.
    await expect(conn.command('TXN_APPEND', { ...fields, coordinator_partition: undefined, message: 'anon' })).rejects.toMatchObject({ code: 'invalid_parameter' });
  }, 60_000);

  it('refuses a TXN_MARKER from a replaced coordinator, so it cannot end the next transaction of the producer early', async () => {
    const txnPartition = 0;
    const { leader, coordEpoch } = await createTopic(`${TOPIC}-m`, txnPartition);
    const conn = await cluster.connect(leader);
    const fields = { topic: `${TOPIC}-m`, partition: 0, producerId: 'p-marker', epoch: 0, coordinator_partition: txnPartition };
    // A newer coordinator (known here from its marker) opens the producer's next transaction.
    const newer = coordEpoch + 5;
    await conn.command('TXN_MARKER', { ...fields, producerId: 'p-other', result: 'abort', coordinator_epoch: newer });
    const open = kv(await conn.command('TXN_APPEND', { ...fields, coordinator_epoch: newer, message: 'open' }));
    expect(Number(open.get('offset'))).toBe(1);

    // The replaced coordinator's delayed commit marker of an earlier transaction arrives.
    const late = await conn.command('TXN_MARKER', { ...fields, result: 'commit', coordinator_epoch: newer - 1 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(late).toMatchObject({ code: 'NOT_COORDINATOR' });
    // Nothing written for it, and the open transaction stays invisible to read_committed.
    expect(kv(await conn.command('LIST_OFFSETS', { topic: `${TOPIC}-m`, partition: 0 })).get('offsets')).toMatch(/leo=2/);
    const committed = await conn.consume({ topic: `${TOPIC}-m`, partition: 0, offset: 0, batch: 10, max_bytes: 1 << 20, isolation: 'read_committed' });
    expect(committed.records.map((r) => r.value.toString())).not.toContain('open');

    // The live coordinator's marker ends it.
    await conn.command('TXN_MARKER', { ...fields, result: 'commit', coordinator_epoch: newer });
    const after = await conn.consume({ topic: `${TOPIC}-m`, partition: 0, offset: 0, batch: 10, max_bytes: 1 << 20, isolation: 'read_committed' });
    expect(after.records.map((r) => r.value.toString())).toContain('open');
  }, 60_000);
});
