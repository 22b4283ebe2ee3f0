/**
 * Group state and commits across kill -9: every acknowledged commit survives, members, generation and
 * assignments are restored, members resume with their ids, members that do not come back expire one
 * session timeout after the restart (not before), a membership change whose join window was still open
 * at the crash still happens, a torn tail of `__consumer_offsets` is cut, and a record that does not parse
 * keeps the broker unready.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { decodeRecords, encodeRecords } from 'tributary-broker/storage/record-codec.js';
import type { BrokerProcess } from '../helpers/launcher.js';
import {
  GroupMember,
  type GroupStatus,
  expectExclusiveOwnership,
  fetchOffset,
  groupStatus,
  kv,
  settle,
  stableStatus,
  startBroker,
} from '../integration/groups/helpers.js';
import { batchRec, eventually, expectError, sleep } from '../helpers/util.js';

const TOPIC = 'dur';
const GROUP = 'g-dur';
const PER_PARTITION = 1000;
const C_SESSION_MS = 2500;

async function fillFast(c: Connection, partitions: number, n: number): Promise<void> {
  for (let p = 0; p < partitions; p++) {
    await c.produceBatch({ topic: TOPIC, partition: p, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records: Array.from({ length: n }, (_, i) => batchRec(`r${i}`)) });
  }
}

/** The newest segment file of the `__consumer_offsets` partition holding `group`. */
async function offsetsSegment(dataDir: string, partition: number): Promise<string> {
  const logs = path.join(dataDir, 'logs');
  const dir = (await fs.readdir(logs)).find((d) => d.startsWith('__consumer_offsets~'));
  expect(dir).toBeDefined();
  const pdir = path.join(logs, dir!, String(partition));
  const segs = (await fs.readdir(pdir)).filter((f) => f.endsWith('.log')).sort();
  expect(segs.length).toBeGreaterThan(0);
  return path.join(pdir, segs.at(-1)!);
}

async function waitReady(broker: BrokerProcess, timeoutMs = 10_000): Promise<void> {
  await eventually('the broker to be ready', async () => (await broker.health('/ready')).status === 200, timeoutMs, 50);
}

describe('group durability across kill -9', () => {
  let broker: BrokerProcess;
  let admin: Connection;
  let a: GroupMember;
  let b: GroupMember;
  let c: GroupMember;
  let coordPartition: number;
  /** The highest acknowledged commit per partition (what must survive). */
  const acked = new Map<number, number>();

  beforeAll(async () => {
    broker = await startBroker();
    admin = await broker.connect();
    await admin.command('CREATE', { topic: TOPIC, partitions: 4 });
    await fillFast(admin, 4, PER_PARTITION);
    coordPartition = Number(kv(await admin.command('FIND_COORDINATOR', { group: GROUP })).get('partition'));
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('keeps every acknowledged commit, the members, generation and assignments; members resume; absent ones expire one session after the restart', async () => {
    a = await GroupMember.connect(broker, TOPIC, GROUP, 'a');
    b = await GroupMember.connect(broker, TOPIC, GROUP, 'b');
    c = await GroupMember.connect(broker, TOPIC, GROUP, 'c');
    await Promise.all([a.join({ session_timeout_ms: 15_000 }), b.join({ session_timeout_ms: 15_000 }), c.join({ session_timeout_ms: C_SESSION_MS })]);
    for (const m of [a, b, c]) await m.sync();
    await settle(admin, [a, b, c]);
    expect(a.owned.length + b.owned.length + c.owned.length).toBe(4);

    // Phase 1: every member pipelines commits and waits for all acknowledgements.
    await Promise.all(
      [a, b, c].map(async (m) => {
        const sends: Promise<string>[] = [];
        for (let i = 1; i <= 150; i++) for (const p of m.owned) sends.push(m.commit(p, i));
        for (const r of await Promise.all(sends)) expect(r).toBe('OK');
        for (const p of m.owned) acked.set(p, 150);
      }),
    );
    // A batch that is acknowledged moves all of its entries.
    expect(kv(await b.batchCommit(b.owned.map((p) => `P${p}:200`).join(','))).get('batched')).toBe(String(b.owned.length));
    for (const p of b.owned) acked.set(p, 200);

    // C's last sign of life before the crash; the state every member must find again.
    await c.heartbeat();
    const before = (await stableStatus(admin, GROUP)) as GroupStatus;
    expect(before.state).toBe('Stable');

    // Phase 2: A pipelines a few hundred more and the broker dies while they are in flight.
    const sent = new Map<number, number>();
    let acks = 0;
    const inflight: Promise<void>[] = [];
    let killed: Promise<void> | undefined;
    const errs: string[] = [];
    for (let i = 151; i <= 500; i++) {
      for (const p of a.owned) {
        sent.set(p, i);
        inflight.push(
          a.commit(p, i).then(
            () => {
              acked.set(p, Math.max(acked.get(p)!, i));
              if (++acks === 200) killed = broker.kill('SIGKILL');
            },
            (e) => { errs.push(String(e)); },
          ),
        );
      }
    }
    await Promise.all(inflight);
    expect(killed).toBeDefined();
    await killed;
    // everything not acknowledged failed with the connection
    for (const e of errs) expect(e).toMatch(/connection closed|ECONNRESET|connection error/);
    expect(acks).toBeGreaterThanOrEqual(200);

    const killedAt = Date.now(); // the old process is gone: the new one loads the group after this
    await broker.relaunch();
    await waitReady(broker);
    admin = await broker.connect();

    // Offsets: exactly the acknowledged value where nothing was in flight; for A's partitions at least the
    // highest acknowledged and at most the highest sent.
    for (let p = 0; p < 4; p++) {
      const got = await fetchOffset(admin, TOPIC, GROUP, p);
      expect(got.committed).toBe(true);
      if (a.owned.includes(p)) {
        expect(got.offset, `partition ${p}`).toBeGreaterThanOrEqual(acked.get(p)!);
        expect(got.offset, `partition ${p}`).toBeLessThanOrEqual(sent.get(p)!);
        acked.set(p, got.offset);
      } else {
        expect(got.offset, `partition ${p}`).toBe(acked.get(p));
      }
    }

    // Group: same generation, members and assignments.
    const after = await groupStatus(admin, GROUP);
    expect(after.generation).toBe(before.generation);
    expect(after.leader).toBe(before.leader);
    const shape = (s: GroupStatus) => s.members.map((m) => ({ id: m.member_id, gen: m.generation, owned: m.assignments, target: m.target, session: m.session_timeout_ms })).sort((x, y) => x.id.localeCompare(y.id));
    expect(shape(after)).toEqual(shape(before));
    expectExclusiveOwnership(after);

    // A and B come back on new connections with their ids; C stays away.
    a = new GroupMember(await broker.connect(), TOPIC, GROUP, 'a');
    Object.assign(a, { id: before.members.find((m) => m.client_id === 'a')!.member_id, generation: before.generation });
    b = new GroupMember(await broker.connect(), TOPIC, GROUP, 'b');
    Object.assign(b, { id: before.members.find((m) => m.client_id === 'b')!.member_id, generation: before.generation });
    expect(kv(await b.heartbeat()).get('generation')).toBe(String(before.generation));
    const rj = await a.rejoin();
    expect(rj.get('member')).toBe(a.id);
    expect(Number(rj.get('generation'))).toBe(before.generation);
    const aOwned = await a.sync();
    expect(aOwned).toEqual(before.members.find((m) => m.member_id === a.id)!.assignments);
    b.owned = before.members.find((m) => m.member_id === b.id)!.assignments;

    // Commits continue from the restored offsets; a regression below them is refused.
    const pa = aOwned[0]!;
    await expectError(a.commit(pa, acked.get(pa)! - 1), 'offset_regression');
    expect(await a.commit(pa, acked.get(pa)! + 1)).toBe('OK');
    acked.set(pa, acked.get(pa)! + 1);

    // C expires one session timeout after the restart, not before: the restarted broker gave it a fresh
    // heartbeat when it loaded the group (not its pre-crash one, which would expire it at once), and
    // removes it only once a session from that heartbeat has passed (missedByMs, the broker's own account).
    // The exact deadline is driven by a fake clock in group-coordinator.test.ts.
    const cId = before.members.find((m) => m.client_id === 'c')!.member_id;
    const cRestored = after.members.find((m) => m.member_id === cId)!;
    expect(Date.parse(cRestored.last_heartbeat)).toBeGreaterThanOrEqual(killedAt);
    await eventually(
      'C to expire',
      async () => {
        const st = await groupStatus(admin, GROUP);
        const present = st.members.some((m) => m.member_id === cId);
        // A and B stay alive meanwhile (plain heartbeats: a rebalance is handled after C's expiry)
        for (const m of [a, b]) await m.heartbeat().catch((e: { code: string }) => expect(e.code).toBe('REBALANCE_IN_PROGRESS'));
        // Its removal enters the history with the generation it makes, once that generation's join window
        // closes: a moment after C left the member list (longer on a loaded machine).
        return !present && st.history.some((h) => h.reasons.some((r) => r.member === cId && (r.cause === 'expired' || r.cause === 'rebalance_timeout')));
      },
      30_000,
      100,
    );
    const s = await groupStatus(admin, GROUP);
    // The generation C's expiry made (on a loaded machine a survivor may rejoin after it: look it up).
    // C is removed by a deadline of the broker's own: its session (`expired`), or, when a survivor's
    // rejoin opened a generation first, the rebalance timeout it then missed (`rebalance_timeout`).
    const change = s.history.find((h) => h.reasons.some((r) => r.member === cId && (r.cause === 'expired' || r.cause === 'rebalance_timeout')));
    const why = change?.reasons.find((r) => r.member === cId);
    expect(why, JSON.stringify(s.history)).toBeDefined();
    if (why!.cause === 'expired') expect(why!.missedByMs).toBeGreaterThanOrEqual(0);

    // The survivors take over C's partitions.
    const settled = await settle(admin, [a, b]);
    expect(settled.members.flatMap((m) => m.assignments).sort()).toEqual([0, 1, 2, 3]);
    expect(settled.generation).toBe(before.generation + 1);
  });

  it('cuts a torn tail of __consumer_offsets and keeps every acknowledged commit', async () => {
    const pb = b.owned[0]!;
    expect(await b.commit(pb, 700)).toBe('OK');
    acked.set(pb, 700);
    const status = await stableStatus(admin, GROUP);
    await broker.kill('SIGKILL');

    const seg = await offsetsSegment(broker.dataDir, coordPartition);
    const size = (await fs.stat(seg)).size;
    // a half-written record: a plausible length header, then garbage
    const torn = Buffer.alloc(61, 0xab);
    torn.writeUInt32BE(500, 0);
    await fs.appendFile(seg, torn);
    expect((await fs.stat(seg)).size).toBe(size + 61);

    await broker.relaunch();
    await waitReady(broker);
    expect((await fs.stat(seg)).size).toBe(size);
    admin = await broker.connect();
    for (const [p, o] of acked) expect(await fetchOffset(admin, TOPIC, GROUP, p), `partition ${p}`).toEqual({ offset: o, committed: true });
    expect(await stableStatus(admin, GROUP)).toEqual(status);
    // and the log accepts new commits after the cut
    b = Object.assign(new GroupMember(await broker.connect(), TOPIC, GROUP, 'b'), { id: b.id, generation: b.generation, owned: b.owned });
    expect(await b.commit(pb, 701)).toBe('OK');
    acked.set(pb, 701);
  });

  it('stays unready on a __consumer_offsets record that passes its CRC but does not parse', async () => {
    await broker.kill('SIGKILL');
    const seg = await offsetsSegment(broker.dataDir, coordPartition);
    const original = await fs.readFile(seg);
    const { records, failure } = decodeRecords(original);
    expect(failure).toBeNull();
    const next = records.at(-1)!.offset + 1;
    // A whole, CRC-valid append (0x80: the storage's end-of-append attribute) whose value is not JSON.
    const bad = encodeRecords([{ offset: next, timestamp: Date.now(), key: Buffer.from(JSON.stringify(['o', GROUP, TOPIC, 0])), value: Buffer.from('{not json'), attributes: 0x80 }]);
    await fs.appendFile(seg, bad);

    await broker.relaunch();
    expect((await broker.health('/ready')).status).toBe(503);
    expect((await broker.health('/live')).status).toBe(200);
    const c1 = await broker.connect({ features: [] });
    await expectError(c1.command('FETCH_OFFSET', { topic: TOPIC, group: GROUP, partition: 0 }), 'not_ready');
    await expectError(c1.command('GROUP_STATUS', { group: GROUP }), 'not_ready');
    await sleep(300);
    expect((await broker.health('/ready')).status).toBe(503);

    // Removing the bad record brings everything back.
    await broker.kill('SIGKILL');
    await fs.truncate(seg, original.length);
    await broker.relaunch();
    await waitReady(broker);
    admin = await broker.connect();
    for (const [p, o] of acked) expect(await fetchOffset(admin, TOPIC, GROUP, p), `partition ${p}`).toEqual({ offset: o, committed: true });
  });

  it('keeps DELETE_GROUP and RESET_OFFSETS across kill -9', async () => {
    const d = await GroupMember.connect(broker, TOPIC, 'g-deleted', 'd');
    const r = await GroupMember.connect(broker, TOPIC, 'g-reset', 'r');
    for (const m of [d, r]) {
      await m.join();
      await m.sync();
      expect(kv(await m.batchCommit('P0:40,P1:41,P2:42,P3:43')).get('batched')).toBe('4');
      await m.leave();
    }
    expect(kv(await admin.command('DELETE_GROUP', { group: 'g-deleted' })).get('deleted')).toBe('true');
    expect(kv(await admin.command('RESET_OFFSETS', { group: 'g-reset', topic: TOPIC, partition: 1, to: 'offset', offset: 7 })).get('offsets')).toBe('P1:7');
    await broker.kill('SIGKILL');
    await broker.relaunch();
    await waitReady(broker);
    admin = await broker.connect();
    await expectError(groupStatus(admin, 'g-deleted'), 'group_not_found');
    for (let p = 0; p < 4; p++) expect(await fetchOffset(admin, TOPIC, 'g-deleted', p)).toEqual({ offset: 0, committed: false });
    expect(await Promise.all([0, 1, 2, 3].map((p) => fetchOffset(admin, TOPIC, 'g-reset', p)))).toEqual([40, 7, 42, 43].map((offset) => ({ offset, committed: true })));
    const groups = kv(await admin.command('LIST_GROUPS')).get('groups')!.split(',');
    expect(groups).toContain('g-reset');
    expect(groups).not.toContain('g-deleted');
  });
});

describe('a membership change whose join window is open at the crash', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    // A long join window makes "crash between the LEAVE reply and the new generation" deterministic.
    broker = await startBroker(['--group-join-window-ms', '1000']);
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('still rebalances after the restart: the leaver’s partitions are not orphaned', async () => {
    const admin = await broker.connect();
    await admin.command('CREATE', { topic: TOPIC, partitions: 4 });
    const a = await GroupMember.connect(broker, TOPIC, 'g-window', 'a');
    const b = await GroupMember.connect(broker, TOPIC, 'g-window', 'b');
    await Promise.all([a.join(), b.join()]);
    await a.sync();
    await b.sync();
    expect(a.owned.length + b.owned.length).toBe(4);
    const gen = a.generation;
    await b.leave();
    await broker.kill('SIGKILL');

    await broker.relaunch();
    await waitReady(broker);
    const c = await broker.connect();
    const s0 = await groupStatus(c, 'g-window');
    expect(s0.members.map((m) => m.member_id)).toEqual([a.id]);
    const a2 = Object.assign(new GroupMember(await broker.connect(), TOPIC, 'g-window', 'a'), { id: a.id, generation: a.generation, owned: a.owned });
    // A is told to rejoin once the (restored) window closes and then owns everything.
    const s = await eventually(
      'the group to settle with a2 owning everything',
      async () => {
        await a2.poll(500);
        const st = await groupStatus(c, 'g-window');
        return st.state === 'Stable' && a2.owned.length === 4 && st;
      },
      6000,
      0,
    );
    expect(s.generation).toBe(gen + 1);
    expect(s.history.at(-1)!.reasons).toMatchObject([{ cause: 'leave', member: b.id }]);
  });
});
