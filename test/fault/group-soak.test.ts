import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { BrokerProcess, ROOT } from '../helpers/launcher.js';
import { trackChild } from '../helpers/process-registry.js';
import { sleep, until } from '../helpers/util.js';

/**
 * Issue acceptance: 3 members and 12 partitions; members join, leave and are killed at random for a
 * minute (TRIBUTARY_SOAK_MS overrides). Every member process logs when it starts and stops reading a
 * partition; at no instant may two members read one partition, and every partition ends up owned.
 */
const SOAK_MS = Number(process.env.TRIBUTARY_SOAK_MS ?? 60_000);
const PARTITIONS = 12;
const SESSION_MS = 1500;
const MEMBER = path.join(ROOT, 'dist', 'bench', 'group-member.js');

interface Ev {
  member: string;
  ev: string;
  t: number;
  partitions?: number[];
  p?: number;
}

interface Member {
  name: string;
  proc: ChildProcess;
  /** Wall-clock time of a kill -9, which ends every interval the member had open. */
  killedAt?: number;
  /** Told to close: it leaves the group (a rebalance) and exits. */
  closing?: boolean;
  exited: Promise<void>;
}

const now = () => performance.timeOrigin + performance.now();

function spawnMember(name: string, address: string, events: Ev[]): Member {
  const proc = trackChild(
    spawn(process.execPath, [MEMBER, '--brokers', address, '--group', 'soak', '--topic', 'soak', '--id', name, '--session-ms', String(SESSION_MS), '--log-records'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    }),
    'group-member',
  );
  let buf = '';
  proc.stdout!.on('data', (d: Buffer) => {
    buf += d.toString();
    let nl = buf.indexOf('\n');
    while (nl >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      nl = buf.indexOf('\n');
      if (line.startsWith('{')) events.push({ member: name, ...(JSON.parse(line) as Omit<Ev, 'member'>) });
    }
  });
  proc.stderr!.resume();
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  return { name, proc, exited };
}

/** Ownership intervals per partition from assigned/revoked events, closed by kills or the end. */
function intervals(events: Ev[], members: Map<string, Member>, end: number): Map<number, Array<{ member: string; from: number; to: number }>> {
  const open = new Map<string, number>();
  const out = new Map<number, Array<{ member: string; from: number; to: number }>>();
  const close = (member: string, p: number, to: number) => {
    const k = `${member}/${p}`;
    const from = open.get(k);
    if (from === undefined) return;
    open.delete(k);
    const list = out.get(p) ?? [];
    list.push({ member, from, to });
    out.set(p, list);
  };
  for (const e of [...events].sort((a, b) => a.t - b.t)) {
    for (const p of e.partitions ?? []) {
      if (e.ev === 'assigned') open.set(`${e.member}/${p}`, e.t);
      if (e.ev === 'revoked') close(e.member, p, e.t);
    }
  }
  // A killed member stops at its last word: SIGKILL lands a moment after the test decided on it.
  const lastSeen = new Map<string, number>();
  for (const e of events) lastSeen.set(e.member, Math.max(lastSeen.get(e.member) ?? 0, e.t));
  for (const k of [...open.keys()]) {
    const [member, p] = k.split('/') as [string, string];
    const killedAt = members.get(member)?.killedAt;
    close(member, Number(p), killedAt === undefined ? end : Math.max(killedAt, lastSeen.get(member) ?? 0));
  }
  return out;
}

describe('group soak: random joins, leaves and kills', () => {
  let broker: BrokerProcess;
  const members = new Map<string, Member>();

  afterAll(async () => {
    for (const m of members.values()) if (m.proc.exitCode === null && m.proc.signalCode === null) m.proc.kill('SIGKILL');
    await broker?.dispose();
  });

  it(
    'never lets two members own one partition and ends with every partition owned',
    async () => {
      broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '4', '--group-min-session-timeout-ms', '100'] });
      const admin: Connection = await broker.connect();
      const producer: Connection = await broker.connect();
      await admin.command('CREATE', { topic: 'soak', partitions: PARTITIONS });
      const events: Ev[] = [];
      let producing = true;
      const production = (async () => {
        let i = 0;
        while (producing) {
          await producer.command('PUBLISH', { topic: 'soak', partition: i % PARTITIONS, message: `r${i}` });
          i++;
          if (i % PARTITIONS === 0) await sleep(20);
        }
      })();

      let seq = 0;
      const live = () => [...members.values()].filter((m) => m.proc.exitCode === null && m.proc.signalCode === null && m.killedAt === undefined && !m.closing);
      const join = () => {
        const m = spawnMember(`m${seq++}`, broker.address, events);
        members.set(m.name, m);
        m.proc.stdin!.write('start\n');
      };
      for (let i = 0; i < 3; i++) join();

      const actions = { join: 0, leave: 0, kill: 0 };
      const stopAt = Date.now() + SOAK_MS;
      while (Date.now() < stopAt) {
        await sleep(500 + Math.random() * 1500);
        const alive = live();
        const r = Math.random();
        if (alive.length < 2 || (r < 0.4 && alive.length < 4)) {
          join();
          actions.join++;
        } else if (r < 0.7) {
          const m = alive[Math.floor(Math.random() * alive.length)]!;
          m.closing = true;
          m.proc.stdin!.write('close\n');
          actions.leave++;
        } else {
          const m = alive[Math.floor(Math.random() * alive.length)]!;
          m.killedAt = now();
          m.proc.kill('SIGKILL');
          actions.kill++;
        }
      }
      if (live().length === 0) join();
      // A member told to close leaves the group and so starts one more rebalance: let every one of them
      // be gone before judging whether the group settled.
      await Promise.all([...members.values()].filter((m) => m.closing).map((m) => m.exited));

      // Settle: every partition owned by a live member, the group stable.
      const deadline = Date.now() + 30_000;
      let status: { state: string; members: Array<{ member_id: string; client_id: string; assignments: number[] }> } | undefined;
      for (;;) {
        status = JSON.parse(await admin.command('GROUP_STATUS', { group: 'soak' }));
        const owned = status!.members.flatMap((m) => m.assignments);
        // Killed members stay listed until their session expires: wait for a group of live members only.
        const allLive = status!.members.every((m) => live().some((l) => l.name === m.client_id));
        if (status!.state === 'Stable' && allLive && owned.length === PARTITIONS && new Set(owned).size === PARTITIONS) break;
        if (Date.now() > deadline) throw new Error(`group did not settle: ${JSON.stringify(status)}`);
        await sleep(100);
      }
      // The coordinator's view is settled; each member reports its partitions once it has synced and
      // fetched their offsets (a heartbeat interval later at most, longer on a loaded machine): wait
      // for every partition to be reported by exactly one live member, bounded.
      const reportedOnce = () => {
        const t = now();
        const byPartition = intervals(events, members, t);
        return Array.from({ length: PARTITIONS }, (_, p) => p).every(
          (p) => (byPartition.get(p) ?? []).filter((iv) => iv.to === t && members.get(iv.member)?.killedAt === undefined).length === 1,
        );
      };
      await until(reportedOnce, 15_000, 'every partition reported by one live member', 20).catch((err) => {
        throw new Error(`${(err as Error).message}; group status ${JSON.stringify(status)}`);
      });
      const end = now();
      producing = false;
      await production;

      // Every partition is being read by exactly one live member at the end.
      const byPartition = intervals(events, members, end);
      for (let p = 0; p < PARTITIONS; p++) {
        const openAtEnd = (byPartition.get(p) ?? []).filter((iv) => iv.to === end && members.get(iv.member)?.killedAt === undefined);
        expect(openAtEnd, `partition ${p} owners at the end`).toHaveLength(1);
      }
      // At no instant two owners: intervals of one partition never overlap.
      let checked = 0;
      for (const [p, list] of byPartition) {
        const sorted = [...list].sort((a, b) => a.from - b.from);
        for (let i = 1; i < sorted.length; i++) {
          expect(sorted[i]!.from, `partition ${p}: ${sorted[i - 1]!.member} until ${sorted[i - 1]!.to}, ${sorted[i]!.member} from ${sorted[i]!.from}`).toBeGreaterThanOrEqual(sorted[i - 1]!.to);
          checked++;
        }
      }
      // Every delivered record falls inside an interval its member held for that partition.
      for (const e of events) {
        // Members keep reading after `end`; those deliveries are past the intervals' horizon.
        if (e.ev !== 'record' || e.t > end) continue;
        const held = (byPartition.get(e.p!) ?? []).some((iv) => iv.member === e.member && e.t >= iv.from && e.t <= iv.to);
        expect(held, `record of partition ${e.p} delivered to ${e.member} outside its ownership`).toBe(true);
      }
      expect(checked).toBeGreaterThan(PARTITIONS);
      expect(actions.join + actions.leave + actions.kill).toBeGreaterThan(SOAK_MS / 3000);
      for (const m of live()) m.proc.stdin!.write('close\n');
      await Promise.all(live().map((m) => m.exited));
    },
    SOAK_MS + 120_000,
  );
});
