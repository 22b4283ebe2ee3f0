/**
 * Offset commits against a real broker: fencing (member, generation, ownership), monotonicity,
 * all-or-nothing batches, the committed offset as CONSUME's floor, zombies, admin resets, deletion,
 * lag in GROUP_STATUS and /metrics.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import type { BrokerProcess } from '../../helpers/launcher.js';
import { GroupMember, fetchAll, fetchOffset, fill, groupStatus, kv, settle, startBroker } from './helpers.js';
import { eventually, expectError, sleep } from '../../helpers/util.js';

const N = 20; // records per partition

describe('consumer group offsets', () => {
  let broker: BrokerProcess;
  let admin: Connection;

  beforeAll(async () => {
    broker = await startBroker();
    admin = await broker.connect();
    for (const t of ['o-basic', 'o-batch', 'o-zombie', 'o-reset', 'o-delete']) {
      await admin.command('CREATE', { topic: t, partitions: 4 });
      await fill(admin, t, 4, N);
    }
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  /** Two members of `group` on `topic`, settled: returns them with their owned partitions. */
  async function pair(topic: string, group: string): Promise<[GroupMember, GroupMember]> {
    const a = await GroupMember.connect(broker, topic, group, 'a');
    const b = await GroupMember.connect(broker, topic, group, 'b');
    await Promise.all([a.join(), b.join()]);
    await a.sync();
    await b.sync();
    await settle(admin, [a, b]);
    expect(a.owned).toHaveLength(2);
    expect(b.owned).toHaveLength(2);
    return [a, b];
  }

  it('commits and fetches; regressions are refused and change nothing; an equal commit is idempotent', async () => {
    const a = await GroupMember.connect(broker, 'o-basic', 'g-basic', 'solo');
    await a.join();
    expect(await a.sync()).toEqual([0, 1, 2, 3]);
    expect(await fetchOffset(admin, 'o-basic', 'g-basic', 0)).toEqual({ offset: 0, committed: false });
    expect(await a.commit(0, 10)).toBe('OK');
    expect(await fetchOffset(admin, 'o-basic', 'g-basic', 0)).toEqual({ offset: 10, committed: true });
    expect(await fetchOffset(admin, 'o-basic', 'g-basic', 1)).toEqual({ offset: 0, committed: false });

    await expectError(a.commit(0, 5), 'offset_regression', { current: '10', requested: '5' });
    expect(await fetchOffset(admin, 'o-basic', 'g-basic', 0)).toEqual({ offset: 10, committed: true });
    expect(await a.commit(0, 10)).toBe('OK');
    expect(await fetchOffset(admin, 'o-basic', 'g-basic', 0)).toEqual({ offset: 10, committed: true });
    // the end of the log is the highest valid commit; beyond it is refused
    expect(await a.commit(0, N)).toBe('OK');
    await expectError(a.commit(1, N + 1), 'invalid_parameter', { param: 'offset' });
    expect(await fetchOffset(admin, 'o-basic', 'g-basic', 1)).toEqual({ offset: 0, committed: false });
    // a fresh group / partition never committed
    expect(await fetchOffset(admin, 'o-basic', 'g-never', 2)).toEqual({ offset: 0, committed: false });
    // batch on the happy path
    expect(kv(await a.batchCommit('P1:3,P2:4')).get('batched')).toBe('2');
    expect(await fetchAll(admin, 'o-basic', 'g-basic', 4)).toEqual([
      { offset: N, committed: true },
      { offset: 3, committed: true },
      { offset: 4, committed: true },
      { offset: 0, committed: false },
    ]);
    // pipelined commits of one member are applied in order and all acknowledged
    const replies = await Promise.all(Array.from({ length: 15 }, (_, i) => a.commit(3, i + 1)));
    expect(replies.every((r) => r === 'OK')).toBe(true);
    expect(await fetchOffset(admin, 'o-basic', 'g-basic', 3)).toEqual({ offset: 15, committed: true });
  });

  it('rejects a BATCH_COMMIT with any bad entry and applies none of it', async () => {
    const [a] = await pair('o-batch', 'g-batch');
    const mine = a.owned;
    const other = [0, 1, 2, 3].filter((p) => !mine.includes(p));
    const [p, q] = mine as [number, number];
    expect(kv(await a.batchCommit(`P${p}:5,P${q}:5`)).get('batched')).toBe('2');
    const before = await fetchAll(admin, 'o-batch', 'g-batch', 4);

    await expectError(a.batchCommit(`P${p}:7,P${other[0]}:3`), 'NOT_OWNER', { partition: String(other[0]) });
    expect(await fetchAll(admin, 'o-batch', 'g-batch', 4)).toEqual(before);
    await expectError(a.batchCommit(`P${p}:7,P${q}:4`), 'offset_regression', { current: '5', requested: '4' });
    expect(await fetchAll(admin, 'o-batch', 'g-batch', 4)).toEqual(before);
    await expectError(a.batchCommit(`P${p}:7,P${p}:8`), 'invalid_parameter', { param: 'entries' });
    expect(await fetchAll(admin, 'o-batch', 'g-batch', 4)).toEqual(before);
    await expectError(a.batchCommit(`P${p}:7,P${q}:x`), 'invalid_parameter', { param: 'entries' });
    expect(await fetchAll(admin, 'o-batch', 'g-batch', 4)).toEqual(before);
    await expectError(a.batchCommit(`P${p}:7,P${q}:${N + 1}`), 'invalid_parameter', { param: 'offset' });
    expect(await fetchAll(admin, 'o-batch', 'g-batch', 4)).toEqual(before);
    // a good batch still works afterwards, and a retry of it is idempotent
    expect(kv(await a.batchCommit(`P${p}:7,P${q}:8`)).get('batched')).toBe('2');
    expect(kv(await a.batchCommit(`P${p}:7,P${q}:8`)).get('batched')).toBe('2');
    const after = await fetchAll(admin, 'o-batch', 'g-batch', 4);
    expect(after[p]).toEqual({ offset: 7, committed: true });
    expect(after[q]).toEqual({ offset: 8, committed: true });
  });

  it('fences commits: GEN_MISMATCH, NOT_OWNER, member_not_found', async () => {
    const [a, b] = await pair('o-batch', 'g-fence');
    const p = a.owned[0]!;
    const theirs = b.owned[0]!;
    expect(await a.commit(p, 2)).toBe('OK');
    await expectError(a.commit(p, 3, { generation: a.generation + 1 }), 'GEN_MISMATCH', { current: String(a.generation), requested: String(a.generation + 1) });
    await expectError(a.commit(p, 3, { generation: a.generation - 1 }), 'GEN_MISMATCH', { requested: String(a.generation - 1) });
    await expectError(a.commit(theirs, 3), 'NOT_OWNER', { partition: String(theirs) });
    await expectError(a.commit(p, 3, { member: 'a-00000000-0000-0000-0000-000000000000' }), 'member_not_found');
    await expectError(a.batchCommit(`P${p}:3`, { generation: a.generation + 1 }), 'GEN_MISMATCH');
    const off = await fetchAll(admin, 'o-batch', 'g-fence', 4);
    expect(off[p]).toEqual({ offset: 2, committed: true });
    expect(off[theirs]).toEqual({ offset: 0, committed: false });
    expect(await b.commit(theirs, 1)).toBe('OK');
  });

  it('CONSUME with group= starts at max(requested, committed)', async () => {
    const a = await GroupMember.connect(broker, 'o-basic', 'g-consume', 'c');
    await a.join();
    await a.sync();
    expect(await a.commit(1, 12)).toBe('OK');
    const low = await admin.consume({ topic: 'o-basic', partition: 1, offset: 3, group: 'g-consume', member: a.id, generation: a.generation, batch: 2 });
    expect(low.records.map((r) => r.offset)).toEqual([12, 13]);
    expect(low.records[0]!.value.toString()).toBe('p1-r12');
    const high = await admin.consume({ topic: 'o-basic', partition: 1, offset: 15, group: 'g-consume', batch: 2 });
    expect(high.records.map((r) => r.offset)).toEqual([15, 16]);
    // without a commit for the partition the requested offset is used
    const none = await admin.consume({ topic: 'o-basic', partition: 2, offset: 1, group: 'g-consume', batch: 1 });
    expect(none.records.map((r) => r.offset)).toEqual([1]);
  });

  it('fences a zombie that stopped heartbeating past its session timeout', async () => {
    const z = await GroupMember.connect(broker, 'o-zombie', 'g-zombie', 'zombie');
    const live = await GroupMember.connect(broker, 'o-zombie', 'g-zombie', 'live');
    await z.join({ session_timeout_ms: 1000 });
    await z.sync();
    await live.join();
    await settle(admin, [z, live]);
    const zp = z.owned[0]!;
    expect(await z.commit(zp, 4)).toBe('OK');
    // The zombie goes quiet; the live member keeps heartbeating and takes over once it expires.
    await eventually(
      'the zombie to expire and live to own everything',
      async () => {
        await live.poll(200);
        const s = await groupStatus(admin, 'g-zombie');
        return s.state === 'Stable' && s.members.length === 1 && live.owned.length === 4;
      },
      5000,
      0,
    );
    const s = await groupStatus(admin, 'g-zombie');
    expect(s.history.at(-1)!.reasons).toMatchObject([{ cause: 'expired', member: z.id }]);
    await expectError(z.heartbeat(), 'member_not_found', { member: z.id });
    await expectError(z.commit(zp, 9), 'member_not_found', { member: z.id });
    await expectError(z.batchCommit(`P${zp}:9`), 'member_not_found');
    expect(await fetchOffset(admin, 'o-zombie', 'g-zombie', zp)).toEqual({ offset: 4, committed: true });
    // its rejoin with the old id is refused too: it must join fresh
    await expectError(z.rejoin(), 'member_not_found');
    expect(await live.commit(zp, 6)).toBe('OK');
  });

  it('RESET_OFFSETS on a live group fences the members for the reset partitions until they rejoin at a new generation', async () => {
    const a = await GroupMember.connect(broker, 'o-reset', 'g-reset', 'r');
    await a.join();
    await a.sync();
    const gen = a.generation;
    expect(kv(await a.batchCommit('P0:10,P1:10,P2:10,P3:10')).get('batched')).toBe('4');
    // A dry run answers the offsets and changes nothing.
    const dry = kv(await admin.command('RESET_OFFSETS', { group: 'g-reset', topic: 'o-reset', partition: 1, to: 'offset', offset: 4, dry_run: true }));
    expect([dry.get('offsets'), dry.get('dry_run'), dry.get('reset')]).toEqual(['P1:4', 'true', '0']);
    expect((await fetchAll(admin, 'o-reset', 'g-reset', 4)).map((o) => o.offset)).toEqual([10, 10, 10, 10]);
    expect(kv(await a.heartbeat()).get('generation')).toBe(String(gen));

    const r0 = kv(await admin.command('RESET_OFFSETS', { group: 'g-reset', topic: 'o-reset', partition: 1, to: 'offset', offset: 4 }));
    expect(r0.get('offsets')).toBe('P1:4');
    expect((await fetchAll(admin, 'o-reset', 'g-reset', 4)).map((o) => o.offset)).toEqual([10, 4, 10, 10]);
    // What the member read before the reset cannot overwrite it, not even at its current generation.
    await expectError(a.batchCommit('P1:11'), 'REBALANCE_IN_PROGRESS', { reason: 'offsets_reset' });
    expect((await fetchAll(admin, 'o-reset', 'g-reset', 4)).map((o) => o.offset)).toEqual([10, 4, 10, 10]);
    // It is told to rejoin; its JOIN names the reset partition; after SYNC it commits again, at a new generation.
    await eventually('the member to be told to rejoin', () => a.heartbeat().then(() => false, (e: { code?: string }) => e.code === 'REBALANCE_IN_PROGRESS'));
    const j = await a.rejoin();
    expect(j.get('reset')).toBe('[1]');
    expect(a.generation).toBeGreaterThan(gen);
    expect(await a.sync()).toEqual([0, 1, 2, 3]);
    expect(await fetchOffset(admin, 'o-reset', 'g-reset', 1)).toEqual({ offset: 4, committed: true });
    expect(kv(await a.batchCommit('P1:5')).get('batched')).toBe('1');
    expect((await a.rejoin()).has('reset')).toBe(false);
    await a.sync();
    const s = await groupStatus(admin, 'g-reset');
    expect(s.history.some((h) => h.reasons.some((x) => x.cause === 'offsets_reset'))).toBe(true);
    await a.leave();
    // Empty as soon as the last member is gone (its departure's join window may still be open)
    expect((await groupStatus(admin, 'g-reset')).state).toBe('Empty');

    let r = kv(await admin.command('RESET_OFFSETS', { group: 'g-reset', topic: 'o-reset', to: 'earliest' }));
    expect(r.get('reset')).toBe('4');
    expect((await fetchAll(admin, 'o-reset', 'g-reset', 4)).map((o) => o.offset)).toEqual([0, 0, 0, 0]);
    r = kv(await admin.command('RESET_OFFSETS', { group: 'g-reset', topic: 'o-reset', to: 'latest' }));
    expect(r.get('offsets')).toBe(`P0:${N},P1:${N},P2:${N},P3:${N}`);
    expect((await fetchAll(admin, 'o-reset', 'g-reset', 4)).map((o) => o.offset)).toEqual([N, N, N, N]);
    r = kv(await admin.command('RESET_OFFSETS', { group: 'g-reset', topic: 'o-reset', partition: 2, to: 'offset', offset: 7 }));
    expect(r.get('offsets')).toBe('P2:7');
    expect((await fetchAll(admin, 'o-reset', 'g-reset', 4)).map((o) => o.offset)).toEqual([N, N, 7, N]);
    await expectError(admin.command('RESET_OFFSETS', { group: 'g-reset', topic: 'o-reset', partition: 2, to: 'offset', offset: N + 5 }), 'OFFSET_OUT_OF_RANGE');
    await expectError(admin.command('RESET_OFFSETS', { group: 'g-reset', topic: 'o-reset', to: 'offset' }), 'invalid_parameter', { param: 'offset' });
    await expectError(admin.command('RESET_OFFSETS', { group: 'g-reset', topic: 'o-reset', to: 'yesterday' }), 'invalid_parameter', { param: 'to' });
    expect((await fetchAll(admin, 'o-reset', 'g-reset', 4)).map((o) => o.offset)).toEqual([N, N, 7, N]);

    // timestamp: the first record at or after T
    await sleep(20);
    const t = Date.now();
    await sleep(20);
    for (let i = 0; i < 3; i++) await admin.command('PUBLISH', { topic: 'o-reset', partition: 3, message: `late${i}` });
    r = kv(await admin.command('RESET_OFFSETS', { group: 'g-reset', topic: 'o-reset', partition: 3, to: 'timestamp', timestamp: t }));
    expect(r.get('offsets')).toBe(`P3:${N}`);
    r = kv(await admin.command('RESET_OFFSETS', { group: 'g-reset', topic: 'o-reset', partition: 3, to: 'timestamp', timestamp: 0 }));
    expect(r.get('offsets')).toBe('P3:0');
    expect(await fetchOffset(admin, 'o-reset', 'g-reset', 3)).toEqual({ offset: 0, committed: true });

    // a member joining afterwards commits forward from the reset offsets (a regression below them is refused)
    const b = await GroupMember.connect(broker, 'o-reset', 'g-reset', 'r2');
    await b.join();
    await b.sync();
    await expectError(b.commit(2, 6), 'offset_regression', { current: '7', requested: '6' });
    expect(await b.commit(2, 8)).toBe('OK');
  });

  it('DELETE_GROUP: refused while members exist, then removes the group and its offsets', async () => {
    const a = await GroupMember.connect(broker, 'o-delete', 'g-delete', 'd');
    await a.join();
    await a.sync();
    expect(kv(await a.batchCommit('P0:3,P1:4')).get('batched')).toBe('2');
    await expectError(admin.command('DELETE_GROUP', { group: 'g-delete' }), 'group_not_empty');
    expect(await fetchOffset(admin, 'o-delete', 'g-delete', 0)).toEqual({ offset: 3, committed: true });
    await a.leave();
    expect((await groupStatus(admin, 'g-delete')).state).toBe('Empty');
    expect(kv(await admin.command('DELETE_GROUP', { group: 'g-delete' })).get('deleted')).toBe('true');
    expect(await fetchAll(admin, 'o-delete', 'g-delete', 4)).toEqual(Array(4).fill({ offset: 0, committed: false }));
    await expectError(groupStatus(admin, 'g-delete'), 'group_not_found');
    expect(kv(await admin.command('LIST_GROUPS')).get('groups')!.split(',')).not.toContain('g-delete');
    await expectError(admin.command('DELETE_GROUP', { group: 'g-delete' }), 'group_not_found');
    // a consumer of the deleted group starts where it asks
    const b = await admin.consume({ topic: 'o-delete', partition: 0, offset: 0, group: 'g-delete', batch: 1 });
    expect(b.records[0]!.offset).toBe(0);
    // the name can be used again from scratch
    const again = await GroupMember.connect(broker, 'o-delete', 'g-delete', 'd2');
    await again.join();
    expect(again.generation).toBe(1);
    await again.sync();
    expect(await again.commit(0, 1)).toBe('OK');
  });

  it('reports lag = log end − committed in GROUP_STATUS and tributary_group_lag in /metrics', async () => {
    const a = await GroupMember.connect(broker, 'o-basic', 'g-lag', 'l');
    await a.join();
    await a.sync();
    expect(kv(await a.batchCommit('P0:5,P1:20,P2:0')).get('batched')).toBe('3');
    const s = await groupStatus(admin, 'g-lag');
    const byP = new Map(s.offsets.map((o) => [o.partition, o]));
    expect(byP.get(0)).toMatchObject({ committed: 5, log_end: N, lag: N - 5, owner: a.id });
    expect(byP.get(1)).toMatchObject({ committed: 20, log_end: N, lag: 0 });
    expect(byP.get(2)).toMatchObject({ committed: 0, log_end: N, lag: N });
    expect(byP.get(3)).toMatchObject({ committed: null, lag: null });
    expect(s.total_lag).toBe(N - 5 + N);
    const m = (await broker.health('/metrics')).body;
    expect(m).toMatch(new RegExp(`tributary_group_lag\\{group="g-lag",topic="o-basic",partition="0"\\} ${N - 5}\\b`));
    expect(m).toMatch(/tributary_group_lag\{group="g-lag",topic="o-basic",partition="1"\} 0\b/);
    expect(m).toMatch(new RegExp(`tributary_group_lag\\{group="g-lag",topic="o-basic",partition="2"\\} ${N}\\b`));
    expect(m).not.toMatch(/tributary_group_lag\{group="g-lag",topic="o-basic",partition="3"\}/);
    // lag follows new records
    await admin.command('PUBLISH', { topic: 'o-basic', partition: 1, message: 'more' });
    expect((await groupStatus(admin, 'g-lag')).offsets.find((o) => o.partition === 1)).toMatchObject({ committed: 20, log_end: N + 1, lag: 1 });
    expect((await broker.health('/metrics')).body).toMatch(/tributary_group_lag\{group="g-lag",topic="o-basic",partition="1"\} 1\b/);
  });
});
