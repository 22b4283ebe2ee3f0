/**
 * A member process frozen with SIGSTOP past its session timeout (a GC pause, a stopped VM) while another
 * member takes over its partitions: once resumed, its heartbeats, commits and rejoin are fenced with
 * member_not_found and its commits never land. The member is a real child process
 * (group-zombie-member.mjs) that reports every request as a JSON line on stdout.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import type { BrokerProcess } from '../helpers/launcher.js';
import { trackChild } from '../helpers/process-registry.js';
import { GroupMember, fetchOffset, fill, groupStatus, startBroker } from '../integration/groups/helpers.js';
import { eventually, sleep } from '../helpers/util.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const TOPIC = 'zt';
const GROUP = 'g-zombie';
const RECORDS = 100;

interface Line {
  ev: string;
  ok: boolean;
  code?: string;
  sentAt: number;
  at: number;
  member?: string;
  generation?: number;
  owned?: number[];
  partition?: number;
  offset?: number;
}

describe('SIGSTOP zombie member', () => {
  let broker: BrokerProcess;
  let admin: Connection;
  let child: ChildProcess | undefined;
  const lines: Line[] = [];
  let stderr = '';
  let exited: Promise<number | null>;

  beforeAll(async () => {
    broker = await startBroker();
    admin = await broker.connect();
    await admin.command('CREATE', { topic: TOPIC, partitions: 4 });
    await fill(admin, TOPIC, 4, RECORDS);
  });

  afterAll(async () => {
    if (child && child.exitCode === null && child.signalCode === null) {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
      await exited;
    }
    await broker?.dispose();
  });

  it('fences the resumed member’s heartbeat, commits and rejoin', async () => {
    child = trackChild(spawn(process.execPath, [path.join(HERE, 'group-zombie-member.mjs'), String(broker.port), TOPIC, GROUP, String(RECORDS)], { stdio: ['ignore', 'pipe', 'pipe'] }), 'group-member');
    exited = new Promise((resolve) => child!.once('exit', (code) => resolve(code)));
    let buf = '';
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n')) {
        lines.push(JSON.parse(buf.slice(0, i)) as Line);
        buf = buf.slice(i + 1);
      }
    });
    child.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    const synced = () => lines.filter((l) => l.ev === 'synced');

    // The child joins alone and owns everything.
    await eventually('the child to sync', async () => synced().length >= 1, 10_000);
    const zombieId = synced()[0]!.member!;
    expect(synced()[0]!.owned).toEqual([0, 1, 2, 3]);

    // B joins; the child gives half away on its own (heartbeat → rejoin → sync) and B takes it.
    const b = await GroupMember.connect(broker, TOPIC, GROUP, 'b');
    await b.join();
    await b.sync();
    await eventually(
      'the group to settle with b owning half',
      async () => {
        await b.poll(100);
        const s = await groupStatus(admin, GROUP);
        return s.state === 'Stable' && b.owned.length === 2 && s;
      },
      8000,
      0,
    );
    const zOwned = synced().at(-1)!.owned!;
    expect(zOwned).toHaveLength(2);
    expect([...zOwned, ...b.owned].sort()).toEqual([0, 1, 2, 3]);
    // the child commits its partitions while alive
    const syncedAt = synced().at(-1)!.at;
    await eventually('the child to commit its partitions', async () => zOwned.every((p) => lines.some((l) => l.ev === 'commit' && l.ok && l.partition === p && l.sentAt >= syncedAt)), 3000);
    expect(stderr).toBe('');

    // Freeze it well past its 1 s session.
    child.kill('SIGSTOP');
    const s = await eventually(
      'b to own everything once the frozen child expired',
      async () => {
        await b.poll(200);
        const st = await groupStatus(admin, GROUP);
        return st.state === 'Stable' && st.members.length === 1 && b.owned.length === 4 && st;
      },
      30_000,
      0,
    );
    const takenAt = Date.now();
    // Taken over because its session expired (not, say, because it left): the frozen child said nothing.
    expect(s.members[0]!.member_id).toBe(b.id);
    expect(s.history.at(-1)!.reasons).toMatchObject([{ cause: 'expired', member: zombieId }]);
    // the new owner commits the taken-over partitions
    const lastZombieAck = new Map<number, number>();
    for (const l of lines) if (l.ev === 'commit' && l.ok) lastZombieAck.set(l.partition!, l.offset!);
    // (a commit the child sent just before the freeze may have landed without the child reading its reply)
    const bCommitted = new Map<number, number>();
    for (const p of zOwned) {
      const cur = (await fetchOffset(admin, TOPIC, GROUP, p)).offset;
      expect(cur).toBeGreaterThanOrEqual(lastZombieAck.get(p)!);
      expect(await b.commit(p, cur + 1)).toBe('OK');
      bCommitted.set(p, cur + 1);
    }

    // Resume it: everything it does from now on is fenced.
    const contAt = Date.now();
    const before = lines.length;
    child.kill('SIGCONT');
    const code = await Promise.race([exited, sleep(8000).then(() => 'timeout' as const)]);
    expect(code, stderr).toBe(0);
    const after = lines.slice(before).filter((l) => l.sentAt >= contAt && l.ev !== 'exit');
    expect(after.length).toBeGreaterThan(0);
    // its first request after waking (a heartbeat, or a commit if it was frozen mid-loop) is fenced
    expect(['heartbeat', 'commit']).toContain(after[0]!.ev);
    expect(after[0]).toMatchObject({ ok: false, code: 'member_not_found' });
    const kinds = new Set(after.map((l) => l.ev));
    expect(kinds).toEqual(new Set(['heartbeat', 'commit', 'batch', 'rejoin']));
    for (const l of after) expect(l, JSON.stringify(l)).toMatchObject({ ok: false, code: 'member_not_found' });
    expect(new Set(after.filter((l) => l.ev === 'commit').map((l) => l.partition))).toEqual(new Set(zOwned));
    // nothing sent before the freeze and answered after it succeeded past the takeover either
    for (const l of lines) if (l.ok && l.ev === 'commit') expect(l.sentAt).toBeLessThan(takenAt);

    // The broker's state is what B made it.
    for (const p of zOwned) expect(await fetchOffset(admin, TOPIC, GROUP, p)).toEqual({ offset: bCommitted.get(p), committed: true });
    const final = await groupStatus(admin, GROUP);
    expect(final.members.map((m) => m.member_id)).toEqual([b.id]);
    expect(final.generation).toBe(s.generation);
  });
});
