/**
 * The chaos workload, all through the SDK: acks=all producers (plain, idempotent, transactional) in this
 * process, and a consumer group of worker processes. Every operation goes to the history with its
 * invoke and complete times. Values are unique per run, so the checker can tell every record apart.
 *
 * The plain and idempotent producers run one lane per partition (a stall on one partition never holds
 * back writes to the others), each lane sending bursts of 1-3 concurrent send() calls, so batches are
 * pipelined. The transactional producers write 1-4 records to random partitions per transaction and
 * commit three in four (abort the rest).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Producer } from 'tributary-client/producer.js';
import { ProducerFencedError, type Transaction } from 'tributary-client/transaction.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { trackChild } from '../helpers/process-registry.js';
import type { History, Outcome, ProducerKind, ReaderOp, SendOp, TxnOp } from './history.js';
import { Rng } from './prng.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function errCode(err: unknown): string {
  if (err instanceof TributaryError) return err.code;
  return err instanceof Error ? err.message.slice(0, 120) : String(err);
}

/** Resolves with `p`'s outcome or undefined after `ms`. */
export async function within<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

export interface WorkloadOptions {
  history: History;
  bootstrap: string[];
  topic: string;
  partitions: number;
  seed: number;
  /** Pause of a lane between bursts. */
  laneDelayMs?: number;
  transactionalProducers?: number;
}

/** Sends in flight, so a stop can record them as unknown. */
/**
 * Stops a workload's producer loops: waits for them (bounded by `waitMs`), records what is still in flight
 * as unknown, then closes every producer (bounded).
 */
export async function stopLoops(loops: Promise<void>[], pending: Pending, close: () => Promise<unknown>[], waitMs: number): Promise<{ abandoned: number }> {
  await within(Promise.all(loops), waitMs);
  const abandoned = pending.abandon();
  await within(Promise.all(close()), 5000);
  return { abandoned };
}

export class Pending {
  private readonly ops = new Set<{ op: SendOp | TxnOp; done: boolean }>();

  track(op: SendOp | TxnOp): { finish: (outcome: Outcome, extra?: { offset?: number; partition?: number; error?: string }) => void } {
    const entry = { op, done: false };
    this.ops.add(entry);
    return {
      finish: (outcome, extra = {}) => {
        if (entry.done) return;
        entry.done = true;
        this.ops.delete(entry);
        Object.assign(op, extra, { outcome, end: Date.now() });
        this.onDone(op);
      },
    };
  }

  constructor(private readonly onDone: (op: SendOp | TxnOp) => void) {}

  /** Everything still in flight becomes `info` (it may or may not have happened). */
  abandon(): number {
    const n = this.ops.size;
    for (const e of [...this.ops]) {
      e.done = true;
      Object.assign(e.op, { outcome: 'info', end: Date.now(), error: 'still in flight when the run stopped' });
      this.onDone(e.op);
    }
    this.ops.clear();
    return n;
  }
}

export class Producers {
  private stopping = false;
  private readonly loops: Promise<void>[] = [];
  private readonly producers = new Set<Producer>();
  private readonly pending: Pending;
  private seq = 0;
  sent = 0;

  constructor(private readonly o: WorkloadOptions) {
    this.pending = new Pending((op) => o.history.add(op));
  }

  start(): void {
    for (const kind of ['plain', 'idempotent'] as const) {
      const name = kind === 'plain' ? 'plain' : 'idem';
      const producer = new Producer({ brokers: this.o.bootstrap, clientId: `chaos-${name}`, acks: 'all', idempotent: kind === 'idempotent' });
      this.producers.add(producer);
      for (let p = 0; p < this.o.partitions; p++) this.loops.push(this.lane(producer, kind, name, p));
    }
    for (let i = 0; i < (this.o.transactionalProducers ?? 2); i++) this.loops.push(this.txnLoop(`tx${i}`));
  }

  private async lane(producer: Producer, kind: ProducerKind, process: string, partition: number): Promise<void> {
    const rng = Rng.derive(this.o.seed, `${process}-${partition}`);
    let n = 0;
    while (!this.stopping) {
      const burst = rng.int(1, 3);
      const sends: Promise<void>[] = [];
      for (let k = 0; k < burst; k++) {
        const value = `${process}${partition}-${n++}`;
        const op: SendOp = { f: 'send', process, producer: kind, seq: this.seq++, partition, value, start: Date.now(), end: 0, outcome: 'info' };
        const t = this.pending.track(op);
        this.sent++;
        sends.push(
          producer.send({ topic: this.o.topic, messages: [{ value, partition }] }).then(
            ([meta]) => t.finish('ok', { offset: meta!.offset, partition: meta!.partition }),
            (err) => t.finish('info', { error: errCode(err) }),
          ),
        );
      }
      await Promise.all(sends);
      await sleep(this.o.laneDelayMs ?? 40);
    }
  }

  private async txnLoop(name: string): Promise<void> {
    const rng = Rng.derive(this.o.seed, name);
    let incarnation = 0;
    let txnNo = 0;
    let producer: Producer | undefined;
    while (!this.stopping) {
      if (!producer) {
        incarnation++;
        producer = new Producer({ brokers: this.o.bootstrap, clientId: `chaos-${name}`, transactionalId: `chaos-${name}`, transactionTimeoutMs: 10_000 });
        this.producers.add(producer);
      }
      const process = `${name}.${incarnation}`;
      const begin = Date.now();
      let txn: Transaction;
      try {
        txn = await producer.transaction();
      } catch (err) {
        if (err instanceof ProducerFencedError || (err instanceof TributaryError && err.code === 'client_closed')) {
          await this.retire(producer);
          producer = undefined;
        }
        await sleep(200);
        continue;
      }
      const id = `${name}-${txnNo++}`;
      const values: string[] = [];
      const sends: Promise<boolean>[] = [];
      const count = rng.int(1, 4);
      for (let k = 0; k < count; k++) {
        const partition = rng.int(0, this.o.partitions - 1);
        const value = `${id}-${k}`;
        values.push(value);
        const op: SendOp = {
          f: 'send',
          process,
          producer: 'transactional',
          seq: this.seq++,
          partition,
          value,
          start: Date.now(),
          end: 0,
          outcome: 'info',
          txn: id,
        };
        const t = this.pending.track(op);
        this.sent++;
        sends.push(
          txn.send({ topic: this.o.topic, messages: [{ value, partition }] }).then(
            ([meta]) => {
              t.finish('ok', { offset: meta!.offset, partition: meta!.partition });
              return true;
            },
            (err) => {
              t.finish('info', { error: errCode(err) });
              return false;
            },
          ),
        );
      }
      const allSent = (await Promise.all(sends)).every(Boolean);
      const commit = allSent && rng.chance(0.75) && !this.stopping;
      let fenced = false;
      const end = async (action: 'commit' | 'abort'): Promise<boolean> => {
        const op: TxnOp = { f: 'txn', process, txn: id, action, begin, start: Date.now(), end: 0, outcome: 'info', values };
        const t = this.pending.track(op);
        try {
          await (action === 'commit' ? txn.commit() : txn.abort());
          t.finish('ok');
          return true;
        } catch (err) {
          if (err instanceof ProducerFencedError) fenced = true;
          t.finish('info', { error: errCode(err) });
          return false;
        }
      };
      if (!(commit && (await end('commit')))) {
        if (!fenced && txn.state === 'open') await end('abort');
      }
      if (fenced || txn.state === 'open') {
        // a transaction we could not end, or a fenced producer: a new producer fences and aborts it
        await this.retire(producer);
        producer = undefined;
      }
      await sleep(rng.int(10, 80));
    }
    if (producer) await this.retire(producer);
  }

  private async retire(p: Producer): Promise<void> {
    await within(
      p.close().catch(() => {}),
      5000,
    );
    this.producers.delete(p);
  }

  /** Stops the loops (bounded), records what is still in flight as unknown, closes the producers. */
  stop(waitMs: number): Promise<{ abandoned: number }> {
    this.stopping = true;
    return stopLoops(this.loops, this.pending, () => [...this.producers].map((p) => p.close().catch(() => {})), waitMs);
  }
}

// ---- the consumer group ----

interface WorkerLine {
  t: string;
  [k: string]: unknown;
}

/** One consumer slot (c0, c1, ...): a worker process, restarted with a new incarnation after a kill. */
export class ConsumerSlot {
  incarnation = 0;
  child: ChildProcess | undefined;
  owned: number[] = [];
  member = '';
  ready = false;
  stderr = '';
  /** Set while the nemesis keeps it down or the run stops it: no automatic restart. */
  held = false;
  restarts = 0;
  private readonly commits = new Map<number, { member: string; generation: number; offsets: Array<{ partition: number; offset: number }>; start: number }>();
  private readonly fetches = new Map<number, { partition: number; start: number }>();
  private exited: Promise<void> = Promise.resolve();

  constructor(
    readonly name: string,
    private readonly history: History,
    private readonly options: Record<string, unknown>,
    private readonly onUnexpectedExit: (slot: ConsumerSlot) => void,
  ) {}

  get process(): string {
    return `${this.name}.${this.incarnation}`;
  }

  get alive(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  spawn(): void {
    this.incarnation++;
    this.ready = false;
    this.owned = [];
    const proc = this.process;
    const child = trackChild(
      spawn(process.execPath, [path.join(here, 'consumer-worker.mjs'), JSON.stringify({ options: this.options })], { stdio: ['ignore', 'pipe', 'pipe'] }),
      'chaos consumer',
    );
    this.child = child;
    this.history.add({ f: 'process', process: proc, event: 'spawn', time: Date.now(), detail: `pid ${child.pid}` });
    let buf = '';
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      let i = buf.indexOf('\n');
      while (i >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line.trim()) this.onLine(proc, line);
        i = buf.indexOf('\n');
      }
    });
    child.stderr!.on('data', (d: Buffer) => {
      this.stderr += d.toString();
      if (this.stderr.length > 200_000) this.stderr = this.stderr.slice(-100_000);
    });
    this.exited = new Promise((resolve) =>
      child.once('exit', (code, signal) => {
        if (buf.trim()) this.onLine(proc, buf);
        buf = '';
        this.closeOpen(proc);
        this.history.add({ f: 'process', process: proc, event: 'exit', time: Date.now(), detail: `code ${code} signal ${signal}` });
        resolve();
        if (!this.held) this.onUnexpectedExit(this);
      }),
    );
  }

  private onLine(proc: string, line: string): void {
    let m: WorkerLine;
    try {
      m = JSON.parse(line) as WorkerLine;
    } catch {
      this.stderr += `unparsed stdout: ${line}\n`;
      return;
    }
    const n = (k: string) => m[k] as number;
    switch (m.t) {
      case 'msg':
        this.history.add({
          f: 'poll',
          process: proc,
          member: String(m.member),
          partition: n('partition'),
          offset: n('offset'),
          value: String(m.value),
          ag: n('ag'),
          time: n('time'),
        });
        break;
      case 'commit-start':
        this.commits.set(n('id'), {
          member: String(m.member),
          generation: n('generation'),
          offsets: m.offsets as Array<{ partition: number; offset: number }>,
          start: n('time'),
        });
        break;
      case 'commit-end': {
        const c = this.commits.get(n('id'));
        if (!c) break;
        this.commits.delete(n('id'));
        this.history.add({ f: 'commit', process: proc, ...c, end: n('time'), outcome: m.outcome as Outcome, ...(m.error ? { error: String(m.error) } : {}) });
        break;
      }
      case 'fetch-start':
        this.fetches.set(n('id'), { partition: n('partition'), start: n('time') });
        break;
      case 'fetch-end': {
        const f = this.fetches.get(n('id'));
        if (!f) break;
        this.fetches.delete(n('id'));
        this.history.add({
          f: 'fetch-offset',
          process: proc,
          ...f,
          end: n('time'),
          outcome: m.outcome as Outcome,
          ...(m.offset !== undefined ? { offset: n('offset') } : {}),
          ...(m.committed !== undefined ? { committed: Boolean(m.committed) } : {}),
          ...(m.error ? { error: String(m.error) } : {}),
        });
        break;
      }
      case 'reader':
        this.history.add({
          f: 'reader',
          process: proc,
          partition: n('partition'),
          step: m.step as ReaderOp['step'],
          detail: String(m.detail),
          ...(m.ms !== undefined ? { ms: n('ms') } : {}),
          time: n('time'),
        });
        break;
      case 'assign':
        this.owned = m.owned as number[];
        this.member = String(m.member);
        this.history.add({
          f: 'assign',
          process: proc,
          member: String(m.member),
          generation: n('generation'),
          ag: n('ag'),
          assigned: m.assigned as number[],
          revoked: m.revoked as number[],
          kept: m.kept as number[],
          owned: m.owned as number[],
          time: n('time'),
        });
        break;
      case 'ready':
        this.ready = true;
        this.member = String(m.member);
        this.owned = m.owned as number[];
        break;
      case 'crash':
      case 'error':
        this.history.add({
          f: 'process',
          process: proc,
          event: 'crash',
          time: n('time'),
          detail: `${m.code ?? ''} ${m.message ?? ''} fatal=${m.fatal ?? ''}`.trim(),
        });
        break;
      default:
        break;
    }
  }

  /** Commits and fetches a dead process never saw answered: unknown. */
  private closeOpen(proc: string): void {
    const now = Date.now();
    for (const c of this.commits.values()) this.history.add({ f: 'commit', process: proc, ...c, end: now, outcome: 'info', error: 'process exited' });
    for (const f of this.fetches.values()) this.history.add({ f: 'fetch-offset', process: proc, ...f, end: now, outcome: 'info', error: 'process exited' });
    this.commits.clear();
    this.fetches.clear();
  }

  async kill(): Promise<void> {
    if (!this.alive) return;
    this.history.add({ f: 'process', process: this.process, event: 'kill', time: Date.now(), detail: 'SIGKILL' });
    this.child!.kill('SIGKILL');
    await this.exited;
  }

  /** SIGTERM (the consumer commits and leaves), then SIGKILL after `ms`. */
  async stop(ms: number): Promise<void> {
    this.held = true;
    if (!this.alive) return;
    this.child!.kill('SIGTERM');
    if (
      (await within(
        this.exited.then(() => true),
        ms,
      )) === undefined
    )
      await this.kill();
  }
}

export class ConsumerGroup {
  readonly slots: ConsumerSlot[] = [];
  private stopping = false;

  constructor(
    history: History,
    bootstrap: string[],
    topic: string,
    readonly groupId: string,
    members: number,
  ) {
    for (let i = 0; i < members; i++) {
      const options = {
        brokers: bootstrap,
        groupId,
        topic,
        clientId: `chaos-c${i}`,
        sessionTimeoutMs: 3000,
        heartbeatIntervalMs: 1000,
        rebalanceTimeoutMs: 10_000,
        autoOffsetReset: 'earliest',
        isolation: 'read_committed',
        maxWaitMs: 500,
        autoCommitIntervalMs: 500,
        // one member pushes (STREAM), the others poll (CONSUME)
        mode: i === members - 1 ? 'stream' : 'poll',
      };
      this.slots.push(new ConsumerSlot(`c${i}`, history, options, (s) => this.restartLater(s)));
    }
  }

  start(): void {
    for (const s of this.slots) s.spawn();
  }

  private restartLater(s: ConsumerSlot): void {
    if (this.stopping || s.restarts >= 50) return;
    s.restarts++;
    setTimeout(() => {
      if (!this.stopping && !s.held && !s.alive) s.spawn();
    }, 1000).unref();
  }

  async waitReady(ms: number): Promise<boolean> {
    const deadline = Date.now() + ms;
    while (Date.now() < deadline) {
      if (this.slots.every((s) => s.ready)) return true;
      await sleep(100);
    }
    return false;
  }

  async stop(ms: number): Promise<void> {
    this.stopping = true;
    await Promise.all(this.slots.map((s) => s.stop(ms)));
  }

  async killAll(): Promise<void> {
    this.stopping = true;
    for (const s of this.slots) s.held = true;
    await Promise.all(this.slots.map((s) => s.kill()));
  }

  stderrTails(bytes: number): string {
    return this.slots.map((s) => `--- ${s.name} stderr ---\n${s.stderr.slice(-bytes)}`).join('\n');
  }
}
