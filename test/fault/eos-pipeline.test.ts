/**
 * Exactly once under crashes: input topic → examples/exactly-once.mjs (3 worker processes, one stable
 * transactional id each) → output topic, while records keep arriving and a random worker is killed with
 * kill -9 and restarted every 1-3 s for 30 s. Afterwards every input record appears exactly once in the
 * read_committed output, and the group's committed offsets reached the end of the input.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { BrokerProcess, ROOT } from '../helpers/launcher.js';
import { trackChild } from '../helpers/process-registry.js';
import { readAll } from '../integration/transactions/helpers.js';
import { sleep } from '../helpers/util.js';

const CHAOS_MS = 30_000;
const PARTITIONS = 4;
const WORKERS = 3;
describe('exactly-once pipeline with workers killed at random', () => {
  let broker: BrokerProcess;
  let admin: Connection;
  const workers = new Map<number, ChildProcess>();
  const logs: string[] = [];
  let stopping = false;

  function startWorker(slot: number): void {
    if (stopping) return; // a restart scheduled before afterAll must not start a worker nobody kills
    const child = trackChild(
      spawn(process.execPath, [path.join(ROOT, 'examples', 'exactly-once.mjs'), 'eos-in', 'eos-out', 'eos-g', `eos-w${slot}`], {
        env: { ...process.env, TRIBUTARY_BOOTSTRAP: broker.address, TRIBUTARY_SESSION_TIMEOUT_MS: '1500' },
        stdio: ['ignore', 'ignore', 'pipe'],
      }),
      'eos-worker',
    );
    child.stderr!.on('data', (d: Buffer) => logs.push(`w${slot}: ${d.toString().trim()}`));
    // A worker that exits by itself (fenced) is restarted too, as a supervisor would.
    child.once('exit', (_code, signal) => {
      if (workers.get(slot) === child) {
        workers.delete(slot);
        if (signal !== 'SIGKILL' && signal !== 'SIGTERM') setTimeout(() => !workers.has(slot) && startWorker(slot), 200);
      }
    });
    workers.set(slot, child);
  }

  async function committedOffset(partition: number): Promise<number> {
    for (;;) {
      try {
        const r = await admin.command('FETCH_OFFSET', { topic: 'eos-in', group: 'eos-g', partition });
        return Number(/offset=(\d+)/.exec(r)![1]);
      } catch (err) {
        // A transaction holding offsets of the partition has not ended yet.
        if (err instanceof TributaryError && err.code === 'UNSTABLE_OFFSET_COMMIT') {
          await sleep(100);
          continue;
        }
        throw err;
      }
    }
  }

  beforeAll(async () => {
    broker = await BrokerProcess.start({
      args: ['--group-join-window-ms', '20', '--offsets-topic-partitions', '4', '--transaction-state-partitions', '4'],
    });
    admin = await broker.connect();
    await admin.command('CREATE', { topic: 'eos-in', partitions: PARTITIONS });
    await admin.command('CREATE', { topic: 'eos-out', partitions: PARTITIONS });
  });

  afterAll(async () => {
    stopping = true;
    for (const w of workers.values()) w.kill('SIGKILL');
    workers.clear();
    await broker?.dispose();
  });

  it('every input record appears exactly once in the read_committed output', { timeout: 150_000 }, async () => {
    for (let s = 0; s < WORKERS; s++) startWorker(s);
    let produced = 0;
    let chaos = true;
    const producing = (async () => {
      while (chaos) {
        const acks = [];
        for (let i = 0; i < 20; i++) acks.push(admin.command('PUBLISH', { topic: 'eos-in', key: `k${produced}`, message: JSON.stringify({ id: produced++ }) }));
        await Promise.all(acks);
        await sleep(25);
      }
    })();
    let kills = 0;
    const deadline = Date.now() + CHAOS_MS;
    while (Date.now() < deadline) {
      await sleep(1000 + Math.random() * 2000);
      const slot = Math.floor(Math.random() * WORKERS);
      const victim = workers.get(slot);
      if (!victim) continue;
      workers.delete(slot);
      victim.kill('SIGKILL');
      kills++;
      await sleep(Math.random() * 800);
      startWorker(slot);
    }
    chaos = false;
    await producing;
    for (let s = 0; s < WORKERS; s++) if (!workers.has(s)) startWorker(s);

    // Drain: the group's committed offsets reach the end of every input partition.
    const ends: number[] = [];
    for (let p = 0; p < PARTITIONS; p++) ends.push(Number(new RegExp(`P${p}:[^,]*leo=(\\d+)`).exec(await admin.command('LIST_OFFSETS', { topic: 'eos-in' }))![1]));
    expect(ends.reduce((a, b) => a + b, 0)).toBe(produced);
    const drainBy = Date.now() + 60_000;
    for (;;) {
      const committed = await Promise.all(ends.map((_, p) => committedOffset(p)));
      if (committed.every((c, p) => c === ends[p])) break;
      if (Date.now() > drainBy) throw new Error(`not drained: committed ${committed} of ${ends}\n${logs.slice(-20).join('\n')}`);
      await sleep(250);
    }

    // Transactions of killed workers that never began again end by their timeout: wait for every output
    // partition to be stable (last stable offset at the log end).
    for (;;) {
      const csv = await admin.command('LIST_OFFSETS', { topic: 'eos-out' });
      if ([...csv.matchAll(/latest=(\d+):leo=(\d+)/g)].every((m) => m[1] === m[2])) break;
      if (Date.now() > drainBy) throw new Error(`output not stable: ${csv}`);
      await sleep(250);
    }

    const seen = new Map<number, number>();
    const sources = new Set<string>();
    const where = new Map<number, string[]>();
    for (let p = 0; p < PARTITIONS; p++) {
      for (const r of await readAll(admin, 'eos-out', p, 'read_committed')) {
        const v = JSON.parse(r.value) as { id: number; source: string };
        seen.set(v.id, (seen.get(v.id) ?? 0) + 1);
        sources.add(v.source);
        where.set(v.id, [...(where.get(v.id) ?? []), `${v.source}->${p}@${r.offset}`]);
      }
    }
    const missing = [];
    const duplicated = [];
    for (let id = 0; id < produced; id++) {
      const n = seen.get(id) ?? 0;
      if (n === 0) missing.push(id);
      if (n > 1) duplicated.push(id);
    }
    if (missing.length + duplicated.length > 0) {
      console.log(JSON.stringify({ missing: missing.length, duplicated: duplicated.length, dups: duplicated.slice(0, 5).map((id) => where.get(id)), logs: logs.slice(-30) }, null, 1));
    }
    expect({ missing: missing.slice(0, 20), duplicated: duplicated.slice(0, 20) }).toEqual({ missing: [], duplicated: [] });
    expect(seen.size).toBe(produced);
    expect(sources.size).toBe(produced);
    expect(kills).toBeGreaterThanOrEqual(8);
    // Aborted work really happened (so the check above is not vacuous): the raw output holds more data
    // records than the committed view, or every kill landed between transactions.
    let raw = 0;
    for (let p = 0; p < PARTITIONS; p++) raw += (await readAll(admin, 'eos-out', p, 'read_uncommitted')).filter((r) => !r.control).length;
    expect(raw).toBeGreaterThanOrEqual(produced);
    console.log(`eos pipeline: ${produced} records, ${kills} kills, ${raw - produced} aborted output records filtered`);
  });
});
