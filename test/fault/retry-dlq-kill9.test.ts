/**
 * Retry and dead-letter topics under kill -9 (docs/sdk.md, "Retry and dead-letter topics"): 300 input
 * messages, examples/retry-dlq-worker.mjs in 3 processes (each a source consumer and two retry
 * consumers; delays 200 ms and 400 ms, 3 attempts), whose handler fails 30% of attempts, decided by a
 * seeded hash of (message, attempt). A random worker is killed with kill -9 and restarted every 1-2.5 s.
 * Afterwards, read_committed:
 * - every message ended in exactly one of the recorded successes or the dead-letter topic;
 * - each retry topic holds exactly the messages whose earlier attempts failed, once each (a park is
 *   never lost nor written twice), and the dead-letter topic those whose 3 attempts failed, with
 *   attempt 3;
 * - the attempt a success was recorded with is its first attempt that does not fail;
 * - no retry was handled before its due time (both times from Date.now() on this machine).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Admin } from 'tributary-client/admin.js';
import { Producer } from 'tributary-client/producer.js';
import { decodeRetryInfo } from 'tributary-client/retry-headers.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { BrokerProcess, ROOT } from '../helpers/launcher.js';
import { trackChild } from '../helpers/process-registry.js';
import { sleep } from '../helpers/util.js';

const N = 300;
const PARTITIONS = 4;
const WORKERS = 3;
const CHAOS_MS = 15_000;
const SEED = 'kill9';
const RATE = 0.3;
const MAX_ATTEMPTS = 3;
const TOPIC = 'rd-in';
const GROUP = 'rd-g';
const RETRY = [`${TOPIC}.${GROUP}.retry.1`, `${TOPIC}.${GROUP}.retry.2`];
const DLQ = `${TOPIC}.${GROUP}.dlq`;

/** The worker's failure decision (examples/retry-dlq-worker.mjs). */
function fails(id: number, attempt: number): boolean {
  return createHash('sha256').update(`${SEED}:${id}:${attempt}`).digest().readUInt32BE(0) / 2 ** 32 < RATE;
}

interface Try {
  id: number;
  attempt: number;
  ok: boolean;
  at: number;
  dueAt: number | null;
}

describe('retry and dead-letter topics with workers killed at random', () => {
  let broker: BrokerProcess;
  let admin: Admin;
  const workers = new Map<number, ChildProcess>();
  const tries: Try[] = [];
  const logs: string[] = [];
  let stopping = false;

  function startWorker(slot: number): void {
    if (stopping) return;
    const child = trackChild(
      spawn(process.execPath, [path.join(ROOT, 'examples', 'retry-dlq-worker.mjs'), TOPIC, GROUP], {
        env: {
          ...process.env,
          TRIBUTARY_BOOTSTRAP: broker.address,
          TRIBUTARY_SESSION_TIMEOUT_MS: '1500',
          TRIBUTARY_FAIL_RATE: String(RATE),
          TRIBUTARY_FAIL_SEED: SEED,
          TRIBUTARY_PARK_TIMEOUT_MS: '2000',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
      'retry-dlq-worker',
    );
    let buf = '';
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      let nl = buf.indexOf('\n');
      while (nl >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.startsWith('{')) tries.push(JSON.parse(line) as Try);
        nl = buf.indexOf('\n');
      }
    });
    child.stderr!.on('data', (d: Buffer) => logs.push(`w${slot}: ${d.toString().trim()}`));
    child.once('exit', (_code, signal) => {
      if (workers.get(slot) === child) {
        workers.delete(slot);
        if (signal !== 'SIGKILL' && signal !== 'SIGTERM') setTimeout(() => !workers.has(slot) && startWorker(slot), 200);
      }
    });
    workers.set(slot, child);
  }

  async function committed(group: string, topic: string, partition: number): Promise<number> {
    for (;;) {
      try {
        return (await admin.fetchOffset(group, topic, partition)).offset;
      } catch (err) {
        // a park transaction of a killed worker holds the partition until it times out
        if (err instanceof TributaryError && err.code === 'UNSTABLE_OFFSET_COMMIT') {
          await sleep(100);
          continue;
        }
        throw err;
      }
    }
  }

  async function readTopic(topic: string): Promise<Array<{ id: number; attempt: number }>> {
    const out: Array<{ id: number; attempt: number }> = [];
    for (let p = 0; p < PARTITIONS; p++) {
      let offset = 0;
      for (;;) {
        const r = await admin.readRecords({ topic, partition: p, offset, maxRecords: 1000 });
        for (const x of r.records) out.push({ id: (JSON.parse(x.value.toString()) as { id: number }).id, attempt: decodeRetryInfo({ ...x, topic, partition: p }).attempt - 1 });
        if (r.records.length === 0 && r.nextOffset <= offset) break;
        offset = r.nextOffset;
      }
    }
    return out;
  }

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--group-join-window-ms', '20', '--offsets-topic-partitions', '4', '--transaction-state-partitions', '4'] });
    admin = new Admin({ brokers: [broker.address] });
    await admin.createTopic({ topic: TOPIC, partitions: PARTITIONS });
  });

  afterAll(async () => {
    stopping = true;
    for (const w of workers.values()) w.kill('SIGKILL');
    workers.clear();
    await admin?.close();
    await broker?.dispose();
  });

  it('every message ends exactly once in the output or the dead-letter topic, parked once per failed attempt, never early', { timeout: 240_000 }, async () => {
    for (let s = 0; s < WORKERS; s++) startWorker(s);
    {
      await using producer = new Producer({ brokers: [broker.address] });
      // fed in slices while the chaos runs, so kills land amid first attempts and retries alike
      void (async () => {
        for (let i = 0; i < N; i += 20) {
          await producer.send({ topic: TOPIC, messages: Array.from({ length: 20 }, (_, j) => ({ key: `k${(i + j) % 37}`, value: JSON.stringify({ id: i + j }) })) });
          await sleep(500);
        }
      })();
      let kills = 0;
      const deadline = Date.now() + CHAOS_MS;
      while (Date.now() < deadline) {
        await sleep(1000 + Math.random() * 1500);
        const slot = Math.floor(Math.random() * WORKERS);
        const victim = workers.get(slot);
        if (!victim) continue;
        workers.delete(slot);
        victim.kill('SIGKILL');
        kills++;
        await sleep(Math.random() * 500);
        startWorker(slot);
      }
      for (let s = 0; s < WORKERS; s++) if (!workers.has(s)) startWorker(s);
      await sleep(0);
      expect(kills).toBeGreaterThanOrEqual(4);

      // Drained: the input and both retry topics are consumed to their ends by their groups.
      const groups: Array<[string, string]> = [[GROUP, TOPIC], [`${GROUP}.retry.1`, RETRY[0]!], [`${GROUP}.retry.2`, RETRY[1]!]];
      const drainBy = Date.now() + 120_000;
      for (;;) {
        let drained = (await admin.listOffsets(TOPIC)).reduce((a, o) => a + o.latest, 0) === N;
        for (const [g, t] of groups) {
          if (!drained) break;
          const ends = (await admin.listOffsets(t)).map((o) => o.latest);
          for (let p = 0; p < ends.length && drained; p++) if ((await committed(g, t, p)) < ends[p]!) drained = false;
        }
        // every open park transaction has ended, so the retry topics can take no more records
        if (drained) for (const t of [...RETRY, DLQ]) if ((await admin.listOffsets(t)).some((o) => o.latest !== o.leo)) drained = false;
        if (drained) break;
        if (Date.now() > drainBy) throw new Error(`not drained\n${logs.slice(-30).join('\n')}`);
        await sleep(300);
      }

      const ok = new Map<number, Set<number>>();
      for (const t of tries) if (t.ok) ok.set(t.id, (ok.get(t.id) ?? new Set()).add(t.attempt));
      const dead = await readTopic(DLQ);
      const retry1 = await readTopic(RETRY[0]!);
      const retry2 = await readTopic(RETRY[1]!);
      const ids = Array.from({ length: N }, (_, i) => i);
      const firstOk = (id: number) => [1, 2, 3].find((a) => !fails(id, a));
      const key = (r: { id: number; attempt: number }) => `${r.id}@${r.attempt}`;
      const sorted = (xs: string[]) => [...xs].sort();

      // each retry topic: exactly the messages whose previous attempt failed, parked once each
      expect(sorted(retry1.map(key))).toEqual(sorted(ids.filter((id) => fails(id, 1)).map((id) => `${id}@1`)));
      expect(sorted(retry2.map(key))).toEqual(sorted(ids.filter((id) => fails(id, 1) && fails(id, 2)).map((id) => `${id}@2`)));
      // the dead-letter topic: exactly those whose 3 attempts failed, once each, with attempt 3
      expect(sorted(dead.map(key))).toEqual(sorted(ids.filter((id) => firstOk(id) === undefined).map((id) => `${id}@${MAX_ATTEMPTS}`)));
      // every message in exactly one of output / dead letters; a success carries its first good attempt
      const deadIds = new Set(dead.map((d) => d.id));
      const misplaced = ids.filter((id) => ok.has(id) === deadIds.has(id));
      expect(misplaced).toEqual([]);
      for (const [id, attempts] of ok) expect([...attempts], `id ${id}`).toEqual([firstOk(id)]);
      // no retry handled before it was due
      const retried = tries.filter((t) => t.attempt > 1);
      expect(retried.every((t) => t.dueAt !== null)).toBe(true);
      const maxEarly = Math.max(0, ...retried.map((t) => t.dueAt! - t.at));
      expect(maxEarly).toBe(0);
      // the kills landed amid work: handlers ran again for successes not yet committed
      const successRuns = tries.filter((t) => t.ok).length;
      console.log(
        `retry-dlq kill -9: ${N} messages, ${kills} kills, ${retry1.length + retry2.length} retries (${retry1.length} on retry.1, ${retry2.length} on retry.2), ` +
          `${dead.length} dead letters, ${ok.size} handled ok (${successRuns - ok.size} handler re-runs after kills), ${retried.length} retry deliveries, max early delivery ${maxEarly} ms`,
      );
    }
  });
});
