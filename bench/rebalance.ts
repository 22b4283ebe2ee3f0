/**
 * `npm run bench -- rebalance`: how long a clean join or leave takes until every partition is owned
 * again, and the longest pause the partitions that do not move see meanwhile.
 *
 * A broker process, a steady producer (one record per partition every --interval-ms), two long-lived
 * member processes and, per trial, a third member that joins and then leaves. Every member logs when it
 * starts and stops reading a partition and when each record is delivered; times are wall-clock on one
 * host. Per trial it prints:
 *   - settle: from the join (or close) call to the last partition being installed by its new owner;
 *   - moved first record: to the first record delivered from every partition that changed owner;
 *   - unaffected pause: the longest gap between deliveries on partitions that did not move, minus the
 *     longest gap on the same partitions in a quiet window just before (the production rhythm itself).
 */
import { Connection } from 'tributary-protocol/connection.js';
import { BENCH_DIR, fmtFixed, installCleanupHandlers, makeTempDir, median, nowMs, spawnNode, startBroker, table, type Child } from './lib.js';

export const description = 'time for a clean join/leave to settle, and the pause on partitions that do not move';

interface Ev {
  member: string;
  ev: string;
  t: number;
  partitions?: number[];
  p?: number;
  o?: number;
}

interface Member {
  name: string;
  child: Child;
  events: Ev[];
}

const PARTITIONS = 12;

function opt(argv: string[], name: string, fallback: number): number {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? Number(argv[i + 1]) : fallback;
}

function spawnMember(name: string, address: string, events: Ev[]): Member {
  const child = spawnNode(name, `${BENCH_DIR}/group-member.js`, ['--brokers', address, '--group', 'bench', '--topic', 'rb', '--id', name, '--session-ms', '3000', '--log-records'], { stdin: true });
  let buf = '';
  child.proc.stdout!.on('data', (d: Buffer | string) => {
    buf += d.toString();
    let nl = buf.indexOf('\n');
    while (nl >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      nl = buf.indexOf('\n');
      if (line.startsWith('{')) events.push({ member: name, ...(JSON.parse(line) as Omit<Ev, 'member'>) });
    }
  });
  return { name, child, events };
}

function send(m: Member, line: string): void {
  m.child.proc.stdin!.write(`${line}\n`);
}

/** Who reads each partition at time t, from assigned/revoked events. */
function ownersAt(events: Ev[], t: number): Map<number, Set<string>> {
  const owners = new Map<number, Set<string>>();
  for (const e of events) {
    if (e.t > t || !e.partitions) continue;
    for (const p of e.partitions) {
      let s = owners.get(p);
      if (!s) owners.set(p, (s = new Set()));
      if (e.ev === 'assigned') s.add(e.member);
      if (e.ev === 'revoked') s.delete(e.member);
    }
  }
  return owners;
}

async function waitUntil(cond: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

async function groupStable(admin: Connection, minGeneration: number, members: number): Promise<number> {
  for (;;) {
    const reply = await admin.command('GROUP_STATUS', { group: 'bench' }).catch((err: { code?: string }) => {
      if (err.code === 'group_not_found') return '{"state":"Empty","generation":0,"members":[]}';
      throw err;
    });
    const s = JSON.parse(reply) as { state: string; generation: number; members: unknown[] };
    if (s.state === 'Stable' && s.generation >= minGeneration && s.members.length === members) return s.generation;
    await new Promise((r) => setTimeout(r, 10));
  }
}

function maxGap(events: Ev[], partitions: number[], from: number, to: number): number {
  let worst = 0;
  for (const p of partitions) {
    const ts = events.filter((e) => e.ev === 'record' && e.p === p && e.t >= from && e.t <= to).map((e) => e.t);
    for (let i = 1; i < ts.length; i++) worst = Math.max(worst, ts[i]! - ts[i - 1]!);
    if (ts.length > 0) worst = Math.max(worst, ts[0]! - from, to - ts[ts.length - 1]!);
    else worst = Math.max(worst, to - from);
  }
  return worst;
}

interface Trial {
  kind: 'join' | 'leave';
  settleMs: number;
  movedFirstRecordMs: number;
  unaffectedGapMs: number;
  baselineGapMs: number;
  moved: number;
}

function measure(kind: 'join' | 'leave', events: Ev[], t0: number, quietFrom: number): Trial {
  const before = ownersAt(events, t0);
  const after = ownersAt(events, Number.POSITIVE_INFINITY);
  const moved: number[] = [];
  const unaffected: number[] = [];
  for (let p = 0; p < PARTITIONS; p++) {
    const a = [...(before.get(p) ?? [])].join();
    const b = [...(after.get(p) ?? [])].join();
    (a === b ? unaffected : moved).push(p);
  }
  const assignedAfter = events.filter((e) => e.ev === 'assigned' && e.t >= t0 && e.partitions?.some((p) => moved.includes(p)));
  const settle = Math.max(...assignedAfter.map((e) => e.t)) - t0;
  let firstRecord = 0;
  for (const p of moved) {
    const owner = [...(after.get(p) ?? [])][0];
    const first = events.find((e) => e.ev === 'record' && e.p === p && e.member === owner && e.t >= t0);
    firstRecord = Math.max(firstRecord, first ? first.t - t0 : Number.NaN);
  }
  const end = t0 + Math.max(settle, firstRecord) + 200;
  return {
    kind,
    settleMs: settle,
    movedFirstRecordMs: firstRecord,
    unaffectedGapMs: maxGap(events, unaffected, t0, end),
    baselineGapMs: maxGap(events, unaffected, quietFrom, t0),
    moved: moved.length,
  };
}

export async function run(argv: string[]): Promise<number> {
  if (argv.includes('--help')) {
    process.stdout.write('npm run bench -- rebalance [--trials 5] [--interval-ms 10]\n');
    return 0;
  }
  installCleanupHandlers();
  const trials = opt(argv, 'trials', 5);
  const intervalMs = opt(argv, 'interval-ms', 10);
  const dir = makeTempDir('tributary-bench-rebalance-');
  const broker = await startBroker(dir);
  const address = `${broker.host}:${broker.port}`;
  const producer = await Connection.connect({ host: broker.host, port: broker.port });
  const admin = await Connection.connect({ host: broker.host, port: broker.port });
  await admin.command('CREATE', { topic: 'rb', partitions: PARTITIONS });

  let producing = true;
  const production = (async () => {
    let seq = 0;
    while (producing) {
      const started = Date.now();
      await Promise.all(
        Array.from({ length: PARTITIONS }, (_, p) =>
          producer.produceBatch({
            topic: 'rb',
            partition: p,
            acks: '1',
            idempotent: false,
            firstSequence: 0,
            lastSequence: 0,
            records: [{ offset: 0, sequence: 0, producerId: '', key: null, epoch: -1, value: Buffer.from(String(seq++)), timestamp: 0, attributes: 0, headers: [] }],
          }),
        ),
      );
      await new Promise((r) => setTimeout(r, Math.max(0, intervalMs - (Date.now() - started))));
    }
  })();

  const events: Ev[] = [];
  const a = spawnMember('a', address, events);
  const b = spawnMember('b', address, events);
  for (const m of [a, b]) await m.child.waitJson((o) => o.ev === 'ready', 10_000);
  send(a, 'start');
  send(b, 'start');
  process.stderr.write('members a and b started\n');
  let generation = await groupStable(admin, 1, 2);
  process.stderr.write(`group stable at generation ${generation}\n`);
  await new Promise((r) => setTimeout(r, 1000));

  const results: Trial[] = [];
  for (let i = 0; i < trials; i++) {
    const c = spawnMember(`c${i}`, address, events);
    await c.child.waitJson((o) => o.ev === 'ready', 10_000);
    await new Promise((r) => setTimeout(r, 1500));
    let t0 = nowMs();
    send(c, 'start');
    generation = await groupStable(admin, generation + 1, 3);
    await waitUntil(() => events.some((e) => e.member === c.name && e.ev === 'record'), 10_000, 'the joining member to consume');
    await new Promise((r) => setTimeout(r, 500));
    results.push(measure('join', events, t0, t0 - 1500));
    process.stderr.write(`trial ${i + 1}: join measured\n`);

    await new Promise((r) => setTimeout(r, 1000));
    t0 = nowMs();
    send(c, 'close');
    await c.child.exited;
    generation = await groupStable(admin, generation + 1, 2);
    await new Promise((r) => setTimeout(r, 700));
    results.push(measure('leave', events, t0, t0 - 1000));
  }

  producing = false;
  await production;
  for (const m of [a, b]) {
    send(m, 'close');
    await m.child.exited;
  }
  await producer.close();
  await admin.close();
  await broker.child.stop();

  const rows = results.map((r, i) => [
    `${Math.floor(i / 2) + 1} ${r.kind}`,
    String(r.moved),
    fmtFixed(r.settleMs, 1),
    fmtFixed(r.movedFirstRecordMs, 1),
    fmtFixed(r.unaffectedGapMs, 1),
    fmtFixed(r.baselineGapMs, 1),
    fmtFixed(Math.max(0, r.unaffectedGapMs - r.baselineGapMs), 1),
  ]);
  process.stdout.write(
    `\nrebalance: 12 partitions, 2 members + 1 joining/leaving, one record per partition every ${intervalMs} ms\n\n${table(
      ['trial', 'moved', 'settle ms', 'moved 1st rec ms', 'unaffected max gap ms', 'baseline gap ms', 'unaffected pause ms'],
      rows,
    )}\n\n`,
  );
  for (const kind of ['join', 'leave'] as const) {
    const rs = results.filter((r) => r.kind === kind);
    const pause = rs.map((r) => Math.max(0, r.unaffectedGapMs - r.baselineGapMs));
    process.stdout.write(
      `${kind.padEnd(5)}  settle median ${fmtFixed(median(rs.map((r) => r.settleMs)), 1)} ms, max ${fmtFixed(Math.max(...rs.map((r) => r.settleMs)), 1)} ms; ` +
        `first record on moved partitions median ${fmtFixed(median(rs.map((r) => r.movedFirstRecordMs)), 1)} ms; ` +
        `unaffected pause max ${fmtFixed(Math.max(...pause), 1)} ms\n`,
    );
  }
  process.stdout.write(`final generation ${generation}\n`);
  return 0;
}
