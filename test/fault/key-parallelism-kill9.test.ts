/**
 * kill -9 of a consumer running run({ eachMessage, concurrency }) (docs/sdk.md, "Concurrency"): a
 * consumer process (test/helpers/consumer-worker.mjs) handles keyed records with 8 handlers per
 * partition sleeping 0-20 ms, is killed with SIGKILL mid-run, and a fresh consumer of the same group
 * finishes. Asserted from the processes' own logs:
 *  - nothing skipped: every record below the committed offset was handled before the kill;
 *  - nothing below the committed offset is redelivered: the fresh consumer starts exactly there;
 *  - the in-flight window: no handler ever started maxBuffered or more records past the first
 *    unhandled one, so what the kill left unfinished lies within one window;
 *  - every record is handled, and each key's records in offset order within each process.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import { parseLine } from 'tributary-protocol/command.js';
import { Producer } from 'tributary-client/producer.js';
import { BrokerProcess, ROOT } from '../helpers/launcher.js';
import { trackChild } from '../helpers/process-registry.js';
import { until } from '../helpers/util.js';

const WORKER = path.join(ROOT, 'test', 'helpers', 'consumer-worker.mjs');
const TOPIC = 'kp9';
const GROUP = 'kp9-workers';
const PARTITIONS = 2;
const RECORDS = 4000;
const KEYS = 50;
const CONCURRENCY = { perPartition: 8, maxBuffered: 32 };

interface Line {
  type: string;
  partition?: number;
  offset?: number;
  key?: string | null;
  [k: string]: unknown;
}

class Worker {
  readonly lines: Line[] = [];
  readonly proc: ChildProcess;
  stderr = '';
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  constructor(name: string, brokers: string[]) {
    const cfg = {
      name,
      randomDelayMs: 20,
      concurrency: CONCURRENCY,
      options: {
        brokers,
        groupId: GROUP,
        topic: TOPIC,
        clientId: name,
        autoOffsetReset: 'earliest',
        sessionTimeoutMs: 2000,
        heartbeatIntervalMs: 300,
        maxWaitMs: 100,
        autoCommitIntervalMs: 100,
        retry: { initialDelayMs: 10, maxDelayMs: 200 },
      },
    };
    this.proc = trackChild(spawn(process.execPath, [WORKER, JSON.stringify(cfg)], { stdio: ['ignore', 'pipe', 'pipe'] }), 'consumer-worker');
    this.exited = new Promise((resolve) => this.proc.once('exit', (code, signal) => resolve({ code, signal })));
    readline.createInterface({ input: this.proc.stdout! }).on('line', (l) => {
      try {
        this.lines.push(JSON.parse(l) as Line);
      } catch {
        this.lines.push({ type: 'garbled', text: l });
      }
    });
    this.proc.stderr!.on('data', (d: Buffer) => {
      this.stderr += d.toString();
    });
  }

  of(type: string, partition?: number): Line[] {
    return this.lines.filter((l) => l.type === type && (partition === undefined || l.partition === partition));
  }

  kill(signal: NodeJS.Signals): void {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill(signal);
  }
}

/** Each key's records, in the order their handlers returned, must be in offset order. */
function keyOrderViolations(done: Line[]): string[] {
  const last = new Map<string, number>();
  const out: string[] = [];
  for (const d of done) {
    const k = `${d.partition}/${d.key}`;
    if ((last.get(k) ?? -1) > d.offset!) out.push(`${k}: ${d.offset} after ${last.get(k)}`);
    last.set(k, d.offset!);
  }
  return out;
}

describe('kill -9 of a consumer with concurrency', () => {
  let broker: BrokerProcess | undefined;
  const workers: Worker[] = [];

  afterEach(async () => {
    for (const w of workers) w.kill('SIGKILL');
    await Promise.all(workers.splice(0).map((w) => w.exited));
    await broker?.dispose();
    broker = undefined;
  });

  it('nothing below the committed offset is skipped or redelivered; what is redelivered lies within the in-flight window', async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '2', '--group-join-window-ms', '20'] });
    const admin = await broker.connect();
    await admin.command('CREATE', { topic: TOPIC, partitions: PARTITIONS });
    const producer = new Producer({ brokers: [broker.address], lingerMs: 2 });
    const metas = await producer.send({ topic: TOPIC, messages: Array.from({ length: RECORDS }, (_, i) => ({ key: `key-${i % KEYS}`, value: `r${i}|x` })) });
    await producer.close();
    const ends = Array.from({ length: PARTITIONS }, (_, p) => metas.filter((m) => m.partition === p).length);
    expect(ends.every((e) => e > 200)).toBe(true);
    const committed = async (): Promise<number[]> => {
      const out: number[] = [];
      for (let p = 0; p < PARTITIONS; p++) {
        const r = parseLine(await admin.command('FETCH_OFFSET', { topic: TOPIC, group: GROUP, partition: p })).params;
        out.push(r.get('committed') === 'true' ? Number(r.get('offset')) : 0);
      }
      return out;
    };

    // the first consumer runs until it has committed a few times, then dies mid-run
    const a = new Worker('a', [broker.address]);
    workers.push(a);
    await until(() => a.of('commit').length >= 3 && a.of('done').length >= 400, 30_000, `worker a handled and committed; stderr: ${a.stderr}`, 20);
    a.kill('SIGKILL');
    expect((await a.exited).signal).toBe('SIGKILL');
    const c = await committed();
    expect(a.of('done').length).toBeLessThan(RECORDS); // killed mid-run

    // a fresh consumer of the group takes over once the dead member's session has expired
    const b = new Worker('b', [broker.address]);
    workers.push(b);
    await until(async () => (await committed()).every((o, p) => o === ends[p]), 60_000, `worker b finished; stderr: ${b.stderr}`, 50);
    b.kill('SIGTERM');
    await b.exited;
    await admin.close();

    const report: string[] = [];
    for (let p = 0; p < PARTITIONS; p++) {
      const aDone = new Set(a.of('done', p).map((l) => l.offset!));
      // nothing skipped: everything below the committed offset was handled before the kill
      const skipped = [];
      for (let o = 0; o < c[p]!; o++) if (!aDone.has(o)) skipped.push(o);
      expect(skipped.slice(0, 5), `p${p}: below committed ${c[p]} but never handled`).toEqual([]);
      // nothing below it redelivered: the fresh consumer starts exactly at the committed offset
      const bStarted = b.of('msg', p).map((l) => l.offset!);
      expect(Math.min(...bStarted), `p${p}`).toBe(c[p]);
      // the in-flight window, from a's log in order: a handler started only within maxBuffered of
      // the first record not handled at that moment
      const done = new Set<number>();
      let first = 0;
      let widest = 0;
      for (const l of a.lines) {
        if (l.partition !== p) continue;
        if (l.type === 'done') {
          done.add(l.offset!);
          while (done.has(first)) first++;
        } else if (l.type === 'msg') {
          widest = Math.max(widest, l.offset! - first + 1);
          expect(l.offset!, `p${p}: started ${l.offset} with ${first} unhandled`).toBeLessThan(first + CONCURRENCY.maxBuffered);
        }
      }
      // what the kill left unfinished, and what b ran again although a had handled it
      const unfinished = a.of('msg', p).filter((l) => !aDone.has(l.offset!)).map((l) => l.offset!);
      const rerun = [...aDone].filter((o) => o >= c[p]!);
      expect(unfinished.every((o) => o >= first && o < first + CONCURRENCY.maxBuffered)).toBe(true);
      expect(c[p]).toBeLessThanOrEqual(first);
      report.push(`p${p}: committed ${c[p]} first-unhandled ${first} unfinished ${unfinished.length} re-run ${rerun.length} widest ${widest}`);
      // every record handled by one or the other
      const all = new Set([...aDone, ...b.of('done', p).map((l) => l.offset!)]);
      expect(all.size, `p${p}`).toBe(ends[p]);
    }
    expect(keyOrderViolations(a.of('done'))).toEqual([]);
    expect(keyOrderViolations(b.of('done'))).toEqual([]);
    // parallel in the killed process too: more than one handler of a partition at once
    expect(a.lines.some((l, i) => l.type === 'msg' && a.lines[i + 1]?.type === 'msg' && a.lines[i + 1]?.partition === l.partition)).toBe(true);
    process.stdout.write(`kill -9 with concurrency: ${report.join('; ')}\n`);
  });
});
