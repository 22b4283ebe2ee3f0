/**
 * A group coordinator frozen (SIGSTOP) past its lease and its members' session timeout, then resumed.
 * Its partition of `__consumer_offsets` moved meanwhile, so nothing it decides on resume may count: its
 * session timer must not expire the members in its memory (its write of that would be refused anyway),
 * and a member's heartbeat that waited in its socket must get NOT_COORDINATOR, not member_not_found,
 * so the member finds the new coordinator and resumes there with its id and generation
 * (docs/architecture.md, "Cluster mode").
 */
import { beforeEach, describe, expect, it } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type TestCluster, useCluster } from '../helpers/cluster.js';
import { GroupMember, groupStatus, kv } from '../integration/groups/helpers.js';

const TOPIC = 'paused-coord';
const GROUP = 'g-paused';

describe('a group coordinator resumed after a pause past its lease', () => {
  const getCluster = useCluster(3);
  let cluster: TestCluster;
  beforeEach(() => {
    cluster = getCluster();
  });

  it('answers NOT_COORDINATOR instead of expiring members it no longer coordinates', async () => {
    const admin = await cluster.connect(0);
    await admin.command('CREATE', { topic: TOPIC, partitions: 2, replication_factor: 3 });
    const coord = kv(await admin.command('FIND_COORDINATOR', { group: GROUP }));
    const coordId = Number(coord.get('coordinator_id'));
    const offsetsPartition = Number(coord.get('partition'));
    await cluster.waitFor('the coordinator partition fully replicated', async () => (await cluster.leaderOf('__consumer_offsets', offsetsPartition)).isr.length === 3);

    const member = new GroupMember(await cluster.connect(coordId), TOPIC, GROUP, 'zombie-test');
    // A session shorter than the pause: a coordinator that counted the pause against it would expire it.
    await member.join({ session_timeout_ms: 1000 });
    await member.sync();
    const { id, generation } = member;
    await member.heartbeat();

    await cluster.broker(coordId).kill('SIGSTOP');
    // Waits in the frozen broker's socket; read only after its timers had their chance to run on resume.
    const queued = member.heartbeat().then(
      (r) => ({ ok: true as const, r }),
      (err: unknown) => ({ ok: false as const, err }),
    );
    const others = [0, 1, 2].filter((b) => b !== coordId);
    // Asked of a live broker: the frozen one accepts connections but answers nothing.
    const next = await cluster.waitFor('the coordinator partition led elsewhere', async () => {
      const p = (await cluster.status(others[0])).partitions.find((x) => x.topic === '__consumer_offsets' && x.partition === offsetsPartition);
      return p && others.includes(p.leader) ? { id: p.leader } : false;
    });
    // The new coordinator restored the member with a full session; keep it alive there meanwhile.
    const moved = new GroupMember(await cluster.connect(next.id), TOPIC, GROUP, 'zombie-test');
    moved.id = id;
    moved.generation = generation;
    await cluster.waitFor('the member heartbeating at the new coordinator', async () => {
      try {
        await moved.heartbeat();
        return true;
      } catch (err) {
        if (err instanceof TributaryError && (err.code === 'COORDINATOR_LOADING' || err.code === 'NOT_COORDINATOR')) return false;
        throw err;
      }
    });

    await cluster.broker(coordId).kill('SIGCONT');
    const outcome = await queued;
    expect(outcome.ok).toBe(false);
    const err = (outcome as { err: unknown }).err as TributaryError;
    expect(err).toBeInstanceOf(TributaryError);
    expect(err.code).toBe('NOT_COORDINATOR');

    // The group at the new coordinator still has exactly that member, same id and generation.
    await moved.heartbeat();
    const s = await groupStatus(await cluster.connect(next.id), GROUP);
    expect(s.members.map((m) => m.member_id)).toEqual([id]);
    expect(s.generation).toBe(generation);
  }, 120_000);
});
