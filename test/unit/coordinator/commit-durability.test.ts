/**
 * Committed offsets never acknowledged without being durable, and never set back (docs/architecture.md,
 * "Group coordinator"): a repeat of a commit still being written waits for that write, a committed
 * transaction's offsets do not count on a plain commit still being written, and of two reloads of one
 * `__consumer_offsets` partition only the last applies what it read.
 */
import { afterEach, expect, it } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type GroupLog, LogOffsetStore, type ReplayResult } from 'tributary-broker/coordinator/group-log.js';
import type { OffsetEntry, OffsetStore } from 'tributary-broker/coordinator/offset-store.js';
import { MemoryOffsetStore } from 'tributary-broker/coordinator/memory-offset-store.js';
import { type Coordinators, GROUP_CONFIG, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { rec, removeDir, tempDir, until } from '../../helpers/util.js';

let dir: string;
let c: Coordinators | undefined;
afterEach(async () => {
  await c?.close();
  c = undefined;
  await removeDir(dir);
});

/** An offset store whose first write waits for `release(ok)` and fails unless ok. */
class HeldStore extends LogOffsetStore {
  release: ((ok: boolean) => void) | undefined;
  writes: OffsetEntry[][] = [];
  constructor(log: GroupLog) {
    super(log);
  }
  override async commit(group: string, topic: string, entries: OffsetEntry[], opts?: { force?: boolean }): Promise<void> {
    this.writes.push(entries);
    if (this.writes.length === 1) {
      const ok = await new Promise<boolean>((r) => {
        this.release = r;
      });
      if (!ok) throw new TributaryError('storage_error', { reason: 'injected' });
    }
    return super.commit(group, topic, entries, opts);
  }
}

async function member(cs: Coordinators, clock: FakeClock, group: string, id: string) {
  const gc = cs.groups;
  const j = gc.join({ topic: 't', group, member: id, host: 'h' });
  await until(() => gc.scheduler.has(`window:${group}`), 5000, 'join window');
  await clock.advance(GROUP_CONFIG.joinWindowMs);
  const v = await j;
  await gc.sync({ topic: 't', group, member: v.memberId, generation: v.generation });
  return v;
}

async function open(offsetStore?: (log: GroupLog) => OffsetStore) {
  dir = await tempDir('trib-commit-durability-');
  const clock = new FakeClock();
  const cs = await openCoordinators(dir, clock, { topics: { t: 1 }, ...(offsetStore ? { offsetStore } : {}) });
  c = cs;
  await cs.topics.get('t').partitions[0]!.append(Array.from({ length: 10 }, (_, i) => rec(`r${i}`)));
  return { cs, clock };
}

const outcome = (p: Promise<unknown>) =>
  p.then(
    () => 'ok',
    (e: Error) => `failed: ${e.message}`,
  );

it('a repeat of a commit still being written is answered only once an offset is durable, by its own write if that one failed', async () => {
  let store!: HeldStore;
  const { cs, clock } = await open((log) => (store = new HeldStore(log)));
  const gc = cs.groups;
  const v = await member(cs, clock, 'g', 'a');
  const req = { topic: 't', group: 'g', member: v.memberId, generation: v.generation, entries: [{ partition: 0, offset: 7 }] };
  const first = outcome(gc.commit(req));
  await until(() => store.release !== undefined, 5000, 'first write in flight');
  let repeatDone = false;
  const repeat = outcome(gc.commit(req)).finally(() => {
    repeatDone = true;
  });
  // Not answered while the write it repeats is in flight.
  await new Promise((r) => setImmediate(r));
  expect(repeatDone).toBe(false);
  store.release!(false);
  expect(await first).toMatch(/failed/);
  expect(await repeat).toBe('ok');
  expect(gc.fetchOffset('g', 't', 0)).toEqual({ offset: 7, committed: true });
  const replay = await cs.groupLog.replay(gc.partitionFor('g'));
  expect([...replay.offsets.values()].map((o) => o.offset)).toEqual([7]);
});

it("a committed transaction's offsets are written though a plain commit of a higher offset was in flight, if that one fails", async () => {
  let store!: HeldStore;
  const { cs, clock } = await open((log) => (store = new HeldStore(log)));
  const gc = cs.groups;
  const v = await member(cs, clock, 'g', 'a');
  const plain = outcome(gc.commit({ topic: 't', group: 'g', member: v.memberId, generation: v.generation, entries: [{ partition: 0, offset: 8 }] }));
  await until(() => store.release !== undefined, 5000, 'plain commit in flight');
  const applied = gc.applyTxnOffsets('txn-1', 'g', 't', [{ partition: 0, offset: 7 }]);
  store.release!(false);
  expect(await plain).toMatch(/failed/);
  await applied;
  expect(gc.fetchOffset('g', 't', 0)).toEqual({ offset: 7, committed: true });
  const replay = await cs.groupLog.replay(gc.partitionFor('g'));
  expect([...replay.offsets.values()].map((o) => o.offset)).toEqual([7]);
});

it('of two reloads of one coordinator partition only the last applies, and its groups wait for it', async () => {
  const { cs, clock } = await open();
  const gc = cs.groups;
  let g2 = 'g2';
  for (let i = 3; gc.partitionFor(g2) !== gc.partitionFor('g1'); i++) g2 = `g${i}`;
  const a = await member(cs, clock, 'g1', 'a');
  const b = await member(cs, clock, g2, 'b');
  const commit = (offset: number) => gc.commit({ topic: 't', group: 'g1', member: a.memberId, generation: a.generation, entries: [{ partition: 0, offset }] });
  await commit(5);

  // The next two group writes are refused together (an fsync error): two reloads. The first one's offset
  // read is slow: it finishes after the second reload, having read the log before anything newer.
  const log = cs.groupLog;
  const realWrite = log.writeGroup.bind(log);
  let refuse = 2;
  log.writeGroup = (s) => (refuse-- > 0 ? Promise.reject(new TributaryError('storage_error', { reason: 'injected' })) : realWrite(s));
  const realReplay = log.replay.bind(log);
  let replays = 0;
  let firstRead = false;
  let releaseFirst!: () => void;
  const gate = new Promise<void>((r) => {
    releaseFirst = r;
  });
  log.replay = async (p: number): Promise<ReplayResult> => {
    const n = ++replays;
    const out = await realReplay(p);
    if (n === 3) {
      await gate; // 1, 2: the reloads' group reads; 3: the first one's offset read (LogOffsetStore)
      firstRead = true;
    }
    return out;
  };
  const r1 = outcome(gc.join({ topic: 't', group: 'g1', member: a.memberId, generation: a.generation, host: 'h' }));
  const r2 = outcome(gc.join({ topic: 't', group: g2, member: b.memberId, generation: b.generation, host: 'h' }));
  expect(await r1).toMatch(/failed/);
  expect(await r2).toMatch(/failed/);
  // The second reload is done: the partition is served again, with the offset it read.
  await until(
    () => {
      try {
        return gc.fetchOffset('g1', 't', 0).offset === 5;
      } catch {
        return false;
      }
    },
    5000,
    'served after the last reload',
  );
  await commit(8);
  expect(replays).toBe(4);
  releaseFirst();
  await until(() => firstRead, 5000, 'the overtaken reload read');
  // What is left of it runs in promise continuations, before the next turn of the event loop.
  await new Promise((r) => setImmediate(r));
  // The overtaken reload applied nothing: offset 8 stays, and 6 is behind it.
  expect(gc.fetchOffset('g1', 't', 0)).toEqual({ offset: 8, committed: true });
  expect(await outcome(commit(6))).toMatch(/offset_regression|regression/);
});

it("a commit to an offset store outside the log (PostgreSQL) is refused while etcd has not confirmed the broker's lease", async () => {
  const { cs, clock } = await open(() => new MemoryOffsetStore());
  const gc = cs.groups;
  let confirmed = true;
  gc.enableOwnership(
    (p) => new TributaryError('NOT_COORDINATOR', { partition: p }),
    () => true,
    () => true,
    () => true,
    () => confirmed,
  );
  for (let p = 0; p < 2; p++) await gc.loadPartition(p);
  const v = await member(cs, clock, 'g', 'a');
  const commit = (offset: number) => gc.commit({ topic: 't', group: 'g', member: v.memberId, generation: v.generation, entries: [{ partition: 0, offset }] });
  await commit(3);
  // Cut off from etcd (not paused): its lease may expire and the group move, and no leader fences the write.
  confirmed = false;
  expect(await outcome(commit(5))).toMatch(/COORDINATOR_NOT_AVAILABLE/);
  expect(gc.fetchOffset('g', 't', 0)).toEqual({ offset: 3, committed: true });
  confirmed = true;
  expect(await outcome(commit(5))).toBe('ok');
});

it('DELETE_GROUP waits for a commit of the group still being written, so its offset does not come back (in memory or after a restart)', async () => {
  let store!: HeldStore;
  const { cs, clock } = await open((log) => (store = new HeldStore(log)));
  const gc = cs.groups;
  const v = await member(cs, clock, 'g', 'a');
  const commit = outcome(gc.commit({ topic: 't', group: 'g', member: v.memberId, generation: v.generation, entries: [{ partition: 0, offset: 7 }] }));
  await until(() => store.release !== undefined, 5000, 'commit in flight');
  await gc.leave({ topic: 't', group: 'g', member: v.memberId });
  let deleted = false;
  const deletion = outcome(gc.deleteGroup('g')).finally(() => {
    deleted = true;
  });
  // The group has no member, but a write of its offsets is in flight: the deletion waits for it.
  await new Promise((r) => setImmediate(r));
  expect(deleted).toBe(false);
  store.release!(true);
  expect(await commit).toBe('ok');
  expect(await deletion).toBe('ok');
  expect(gc.fetchOffset('g', 't', 0).committed).toBe(false);
  expect(gc.listGroups()).not.toContain('g');
  // What a restart loads: the offset written before the deletion is tombstoned after it.
  const replay = await cs.groupLog.replay(gc.partitionFor('g'));
  expect([...replay.offsets.values()].filter((o) => o.group === 'g')).toEqual([]);
});
