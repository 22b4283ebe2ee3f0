/**
 * The consumer-group acceptance test: 12 partitions fed by a producer, 3 consumers in separate processes
 * (test/helpers/consumer-worker.mjs running the compiled SDK). During production one member joins late,
 * one is kill -9ed and one leaves cleanly (SIGTERM → close()).
 *
 * What the contract allows, and what is asserted exactly:
 *  - at least once: every acknowledged record is processed;
 *  - nothing invented: every processed (partition, offset) carries the id produced there;
 *  - per member and partition, offsets only move forward (no member sees a record twice);
 *  - a clean hand-over (rebalance revocation or close()) commits what was processed before the partition
 *    moves, so it never causes a duplicate: the successor starts exactly at the member's final commit;
 *  - the killed member could not commit its last records: for each partition it owned when it died, the
 *    successor starts somewhere in [its last acknowledged commit, its last processed offset + 1], so the
 *    duplicates are exactly the records it processed from there on — and nothing else is a duplicate.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { trackChild } from '../../helpers/process-registry.js';
import type { Batch } from 'tributary-protocol/batch.js';
import { parseLine } from 'tributary-protocol/command.js';
import { BrokerProcess, ROOT } from '../../helpers/launcher.js';
import { sleep } from '../../helpers/util.js';

const TOPIC = 'orders';
const GROUP = 'order-workers';
const PARTITIONS = 12;
const WORKER = path.join(ROOT, 'test', 'helpers', 'consumer-worker.mjs');
const SESSION_MS = 2000;
interface Line {
  type: string;
  at: number;
  [k: string]: unknown;
}
interface Msg {
  worker: string;
  id: string;
  partition: number;
  offset: number;
  at: number;
}
interface Commit {
  worker: string;
  offsets: Array<{ partition: number; offset: number }>;
  at: number;
}

class Worker {
  readonly lines: Line[] = [];
  readonly proc: ChildProcess;
  stderr = '';
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  constructor(
    readonly name: string,
    brokers: string[],
  ) {
    const cfg = {
      name,
      options: {
        brokers,
        groupId: GROUP,
        topic: TOPIC,
        clientId: name,
        autoOffsetReset: 'earliest',
        sessionTimeoutMs: SESSION_MS,
        heartbeatIntervalMs: 300,
        maxWaitMs: 200,
        // Long enough that the killed member has processed records it could not commit.
        autoCommitIntervalMs: 500,
        retry: { initialDelayMs: 10, maxDelayMs: 200 },
      },
    };
    this.proc = trackChild(spawn(process.execPath, [WORKER, JSON.stringify(cfg)], { stdio: ['ignore', 'pipe', 'pipe'] }), 'consumer-worker');
    this.exited = new Promise((resolve) => this.proc.once('exit', (code, signal) => resolve({ code, signal })));
    readline.createInterface({ input: this.proc.stdout! }).on('line', (l) => {
      try {
        this.lines.push(JSON.parse(l) as Line);
      } catch {
        this.lines.push({ type: 'garbled', at: Date.now(), text: l });
      }
    });
    this.proc.stderr!.on('data', (d: Buffer) => {
      this.stderr += d.toString();
    });
  }

  of(type: string): Line[] {
    return this.lines.filter((l) => l.type === type);
  }

  msgs(): Msg[] {
    return this.of('msg').map((l) => ({ worker: this.name, id: l.id as string, partition: l.partition as number, offset: l.offset as number, at: l.at }));
  }

  commits(): Commit[] {
    return this.of('commit').map((l) => ({ worker: this.name, offsets: l.offsets as Commit['offsets'], at: l.at }));
  }

  /** Partitions installed after the last rebalance. */
  owned(): number[] {
    const r = this.of('rebalance').at(-1);
    return r ? (r.owned as number[]) : [];
  }

  async waitFor(type: string, timeoutMs = 15_000): Promise<Line> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const l = this.lines.find((x) => x.type === type);
      if (l) return l;
      if (Date.now() > deadline) throw new Error(`worker ${this.name}: no ${type} line in time; stderr: ${this.stderr}`);
      await sleep(20);
    }
  }

  kill(signal: NodeJS.Signals): void {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill(signal);
  }
}

describe('consumer group across processes', () => {
  let broker: BrokerProcess;
  let admin: Connection;
  const workers: Worker[] = [];
  let producing = false;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '4', '--group-join-window-ms', '20'] });
    admin = await broker.connect();
    await admin.command('CREATE', { topic: TOPIC, partitions: PARTITIONS });
  });

  afterAll(async () => {
    producing = false;
    for (const w of workers) w.kill('SIGKILL');
    await Promise.all(workers.map((w) => w.exited));
    await broker?.dispose();
  });

  async function status(): Promise<{ state: string; generation: number; members: Array<{ member_id: string; client_id: string; assignments: number[] }> }> {
    return admin.json('GROUP_STATUS', { group: GROUP });
  }

  /**
   * Until the group is Stable with exactly these client ids, every partition owned, and each worker has
   * installed what the broker says it owns (its last rebalance line).
   */
  async function stableWith(clientIds: string[], timeoutMs = 15_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const s = await status().catch(() => undefined);
      if (
        s &&
        s.state === 'Stable' &&
        s.members.map((m) => m.client_id).sort().join() === [...clientIds].sort().join() &&
        s.members.flatMap((m) => m.assignments).length === PARTITIONS &&
        s.members.every((m) => {
          const w = workers.find((x) => x.name === m.client_id);
          return w !== undefined && [...w.owned()].sort((x, y) => x - y).join() === [...m.assignments].sort((x, y) => x - y).join();
        })
      ) {
        return;
      }
      if (Date.now() > deadline) throw new Error(`group not stable with ${clientIds}: ${JSON.stringify(s)}`);
      await sleep(50);
    }
  }

  it('late join, kill -9 and clean leave during production: at least once, duplicates only where the contract allows', async () => {
    const t0 = Date.now();
    const brokers = [broker.address];
    const a = new Worker('a', brokers);
    const b = new Worker('b', brokers);
    workers.push(a, b);
    await Promise.all([a.waitFor('ready'), b.waitFor('ready')]);
    await stableWith(['a', 'b']);

    // ---- producer: binary batches of 10 records on a connection of its own, round-robin over partitions
    const producerConn = await broker.connect();
    const produced = new Map<string, { partition: number; offset: number }>();
    producing = true;
    const producerErrors: unknown[] = [];
    let n = 0;
    const producer = (async () => {
      const inflight = new Set<Promise<void>>();
      while (producing) {
        const partition = n % PARTITIONS;
        const ids = Array.from({ length: 10 }, (_, i) => `r${n}-${i}`);
        n++;
        const batch: Batch = {
          topic: TOPIC,
          partition,
          acks: '1',
          idempotent: false,
          firstSequence: 0,
          lastSequence: 0,
          records: ids.map((id) => ({ offset: 0, sequence: 0, producerId: '', key: null, epoch: -1, value: Buffer.from(`${id}|payload`), timestamp: 0, attributes: 0, headers: [] })),
        };
        const p = producerConn.produceBatch(batch).then(
          (ack) => {
            if (ack.count !== 10 || ack.partition !== partition) producerErrors.push(new Error(`bad ack ${JSON.stringify(ack)}`));
            for (const [i, id] of ids.entries()) produced.set(id, { partition: ack.partition, offset: ack.base_offset + i });
          },
          (err: unknown) => {
            producerErrors.push(err);
            producing = false;
          },
        );
        inflight.add(p);
        void p.finally(() => inflight.delete(p));
        if (inflight.size >= 4) await Promise.race(inflight);
        await sleep(8);
      }
      await Promise.all(inflight);
    })();

    // ---- a late joiner
    await sleep(1500);
    const c = new Worker('c', brokers);
    workers.push(c);
    await c.waitFor('ready');
    await stableWith(['a', 'b', 'c']);
    for (const w of [a, b, c]) expect(w.owned().length, `${w.name} owns partitions`).toBeGreaterThan(0);
    await sleep(1200);

    // ---- kill -9 of b while it holds partitions
    const bOwnedAtDeath = b.owned();
    expect(bOwnedAtDeath.length).toBeGreaterThan(0);
    b.kill('SIGKILL');
    const killedAt = Date.now();
    expect((await b.exited).signal).toBe('SIGKILL');
    await stableWith(['a', 'c']); // after b's session expired
    await sleep(1000);

    // ---- a leaves cleanly
    const aOwnedAtLeave = a.owned();
    a.kill('SIGTERM');
    const leftAt = Date.now();
    await a.waitFor('closed');
    expect(await a.exited).toEqual({ code: 0, signal: null });
    expect(a.of('closed')[0]!.state).toBe('closed');
    await stableWith(['c']);
    await sleep(500);

    producing = false;
    await producer;
    await producerConn.close();
    expect(producerErrors).toEqual([]);
    expect(produced.size).toBeGreaterThan(1000);

    // ---- c drains everything, then leaves
    const deadline = Date.now() + 15_000;
    for (;;) {
      const seen = new Set(workers.flatMap((w) => w.msgs().map((m) => m.id)));
      if ([...produced.keys()].every((id) => seen.has(id))) break;
      if (Date.now() > deadline) break; // the assertion below reports what is missing
      await sleep(100);
    }
    await sleep(600); // one more auto-commit interval
    c.kill('SIGTERM');
    await c.waitFor('closed');
    expect(await c.exited).toEqual({ code: 0, signal: null });

    // ================= analysis =================
    const all = [a, b, c].flatMap((w) => w.msgs());
    for (const w of [a, b, c]) {
      expect(w.of('garbled'), `${w.name} printed only JSON`).toEqual([]);
      expect(w.of('crash').filter((l) => l.fatal), `${w.name} fatal crashes`).toEqual([]);
      expect(w.of('error'), `${w.name} errors`).toEqual([]);
    }

    // at least once, nothing invented
    const seenIds = new Set(all.map((m) => m.id));
    const missing = [...produced.keys()].filter((id) => !seenIds.has(id));
    expect(missing.slice(0, 20), `${missing.length} records never processed`).toEqual([]);
    for (const m of all) expect(produced.get(m.id), `record ${m.id}`).toEqual({ partition: m.partition, offset: m.offset });

    // no member processed a record twice: per member and partition, offsets strictly increase
    for (const w of [a, b, c]) {
      const last = new Map<number, number>();
      for (const m of w.msgs()) {
        expect(m.offset, `${w.name} partition ${m.partition}`).toBeGreaterThan(last.get(m.partition) ?? -1);
        last.set(m.partition, m.offset);
      }
    }

    // per member, acknowledged commits never go backwards and never run ahead of what it processed
    for (const w of [a, b, c]) {
      const lastCommit = new Map<number, number>();
      const processedUpTo = new Map<number, number>();
      // lines are printed in order: keep that order (the same millisecond can hold both kinds)
      const ordered = w.lines.filter((l) => l.type === 'msg' || l.type === 'commit');
      for (const l of ordered) {
        if (l.type === 'msg') processedUpTo.set(l.partition as number, (l.offset as number) + 1);
        else {
          for (const o of l.offsets as Commit['offsets']) {
            expect(o.offset, `${w.name} commit regression on ${o.partition}`).toBeGreaterThanOrEqual(lastCommit.get(o.partition) ?? 0);
            expect(o.offset, `${w.name} committed ${o.partition} past what it processed`).toBeLessThanOrEqual(processedUpTo.get(o.partition) ?? 0);
            lastCommit.set(o.partition, o.offset);
          }
        }
      }
    }

    const msgsOf = (w: Worker, p: number) => w.msgs().filter((m) => m.partition === p);
    const lastCommitOf = (w: Worker, p: number, before = Number.POSITIVE_INFINITY) => {
      let v: number | undefined;
      for (const cm of w.commits()) if (cm.at <= before) for (const o of cm.offsets) if (o.partition === p) v = Math.max(v ?? 0, o.offset);
      return v;
    };
    /** The first record of partition p processed by someone other than `w` after `since`. */
    const successorStart = (w: Worker, p: number, since: number) =>
      all
        .filter((m) => m.worker !== w.name && m.partition === p && m.at >= since)
        .sort((x, y) => x.at - y.at || x.offset - y.offset)[0];

    // exactly which records may be duplicates: those b processed at or after the point its successor started
    const allowed = new Set<string>();
    let expectedDuplicates = 0;
    for (const p of bOwnedAtDeath) {
      const bMsgs = msgsOf(b, p);
      if (bMsgs.length === 0) continue;
      const lastProcessed = bMsgs.at(-1)!.offset;
      const succ = successorStart(b, p, killedAt);
      expect(succ, `someone took over partition ${p} from b`).toBeDefined();
      const acked = lastCommitOf(b, p) ?? 0;
      // never redelivers what b's acknowledged commits covered, never skips what b did not commit
      expect(succ!.offset, `successor start on ${p}`).toBeGreaterThanOrEqual(acked);
      expect(succ!.offset, `successor start on ${p}`).toBeLessThanOrEqual(lastProcessed + 1);
      for (let o = succ!.offset; o <= lastProcessed; o++) {
        allowed.add(`${p}:${o}`);
        expectedDuplicates++;
      }
    }

    // a's clean leave: everything it processed was committed by close(), its successors start right there
    for (const p of aOwnedAtLeave) {
      const aMsgs = msgsOf(a, p);
      if (aMsgs.length === 0) continue;
      const lastProcessed = aMsgs.at(-1)!.offset;
      expect(lastCommitOf(a, p), `a's final commit of ${p}`).toBe(lastProcessed + 1);
      const succ = successorStart(a, p, leftAt);
      if (succ) expect(succ.offset, `successor of a on ${p}`).toBe(lastProcessed + 1);
    }

    const counts = new Map<string, Msg[]>();
    for (const m of all) counts.set(`${m.partition}:${m.offset}`, [...(counts.get(`${m.partition}:${m.offset}`) ?? []), m]);
    const duplicates = [...counts.entries()].filter(([, ms]) => ms.length > 1);
    const unexplained = duplicates.filter(([k, ms]) => !allowed.has(k) || ms.length !== 2 || ms.sort((x, y) => x.at - y.at)[0]!.worker !== 'b');
    expect(unexplained.slice(0, 10).map(([k, ms]) => [k, ms.map((m) => m.worker)]), 'duplicates the contract does not allow').toEqual([]);
    expect(duplicates.length).toBe(expectedDuplicates);

    // the broker agrees: every partition committed to its end, nobody left in the group
    const offsets = parseLine(await admin.command('LIST_OFFSETS', { topic: TOPIC })).params.get('offsets')!;
    for (const entry of offsets.split(',')) {
      const m = /^P(\d+):earliest=\d+:latest=(\d+)/.exec(entry)!;
      const fetched = parseLine(await admin.command('FETCH_OFFSET', { topic: TOPIC, group: GROUP, partition: Number(m[1]) })).params;
      expect(Number(fetched.get('offset')), `partition ${m[1]} committed`).toBe(Number(m[2]));
    }
    expect((await status()).members).toEqual([]);
    // eslint-disable-next-line no-console
    console.log(
      `consumer-group: ${produced.size} records, ${all.length} processed, ${duplicates.length} duplicates (all after b's last commit), b owned ${bOwnedAtDeath} at death, ${((Date.now() - t0) / 1000).toFixed(1)} s`,
    );
  });
});
