/**
 * A Jepsen-style history of SDK Producer sends (test/fault/producer-history*.test.ts): callers send
 * bursts of concurrent send()s, each logged with invoke and complete times and outcome, and a checker
 * compares the history with the partitions' logs read back afterwards (docs/sdk.md, "Producer").
 */
import type { Connection } from 'tributary-protocol/connection.js';
import type { Producer, RecordMetadata } from 'tributary-client/producer.js';
import { partitionForKey } from 'tributary-protocol/partitioner.js';
import type { Rng } from '../chaos/prng.js';

export interface Op {
  producer: string;
  /** Call order of send() on its producer. */
  call: number;
  values: string[];
  /** Per message: its explicit partition, or for a keyed one the key's (partitionForKey); -1 for a keyless one. */
  partitions: number[];
  keys: Array<string | undefined>;
  invokedAt: number;
  completedAt?: number;
  outcome?: 'ok' | 'fail';
  meta?: RecordMetadata[];
  error?: string;
  aborted: boolean;
  /** Holds a record larger than the broker's --max-record-bytes. */
  oversized: boolean;
  /** Sent to a topic that does not exist. */
  missing: boolean;
}

export interface CallerSpec {
  producer: Producer;
  /** Exactly once and in call order is checked for it (`idempotent: true`). */
  idempotent: boolean;
  callers: number;
  /** Bytes of padding added to each value, chosen in [min, max]. */
  pad?: [number, number];
  /** Share of sends with a record of `maxRecord` + 100 bytes, and of sends to a missing topic. */
  oversized?: number;
  missing?: number;
  /** The pause between a caller's bursts, chosen in [min, max] ms (default [0, 5]). */
  pauseMs?: [number, number];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class SendHistory {
  readonly ops: Op[] = [];
  private readonly settled: Promise<unknown>[] = [];
  private readonly workers: Promise<void>[] = [];
  private readonly idempotent = new Set<string>();
  private stopped = false;
  private readonly t0 = performance.now();

  constructor(
    private readonly topic: string,
    private readonly partitions: number,
    private readonly rng: Rng,
    private readonly maxRecord = 0,
  ) {}

  /** Starts `spec.callers` callers on the producer named `name`. */
  start(name: string, spec: CallerSpec): void {
    if (spec.idempotent) this.idempotent.add(name);
    const calls = { n: 0 };
    for (let id = 0; id < spec.callers; id++) this.workers.push(this.caller(name, id, spec, calls));
  }

  private async caller(name: string, id: number, spec: CallerSpec, calls: { n: number }): Promise<void> {
    const work = this.rng;
    let n = 0;
    while (!this.stopped) {
      const burst: Promise<unknown>[] = [];
      for (let k = work.int(1, 4); k > 0; k--) {
        const count = work.int(1, 3);
        // Mostly explicit partitions; some keyed, some keyless (sticky by default).
        const kinds = Array.from({ length: count }, () => work.pick(['explicit', 'explicit', 'explicit', 'keyed', 'keyless'] as const));
        const keys = kinds.map((k) => (k === 'keyed' ? `key-${work.int(0, 9)}` : undefined));
        const partitions = kinds.map((k, i) => (k === 'explicit' ? work.int(0, this.partitions - 1) : k === 'keyed' ? partitionForKey(Buffer.from(keys[i]!), this.partitions) : -1));
        const values = partitions.map(() => `${name}|${id}|${n++}|`);
        const oversized = work.next() < (spec.oversized ?? 0);
        if (oversized) values[0] += 'x'.repeat(this.maxRecord + 100);
        if (spec.pad) for (let i = 0; i < values.length; i++) values[i] += 'y'.repeat(work.int(spec.pad[0], spec.pad[1]));
        const missing = !oversized && work.next() < (spec.missing ?? 0);
        const abort = work.next() < 0.05 ? new AbortController() : undefined;
        const op: Op = { producer: name, call: calls.n++, values, partitions, keys, invokedAt: performance.now() - this.t0, aborted: abort !== undefined, oversized, missing };
        this.ops.push(op);
        const messages = values.map((value, i) => (kinds[i] === 'explicit' ? { value, partition: partitions[i]! } : keys[i] !== undefined ? { value, key: keys[i] } : { value }));
        const p = spec.producer.send({ topic: missing ? `${this.topic}-missing` : this.topic, messages }, abort ? { signal: abort.signal } : {}).then(
          (meta) => {
            op.outcome = 'ok';
            op.meta = meta;
          },
          (err: Error) => {
            op.outcome = 'fail';
            const code = (err as Error & { code?: unknown }).code;
            op.error = `${typeof code === 'string' ? code : err.name}: ${err.message}`;
          },
        );
        void p.finally(() => {
          op.completedAt = performance.now() - this.t0;
        });
        if (abort) setTimeout(() => abort.abort(), work.int(0, 20));
        burst.push(p);
        this.settled.push(p);
      }
      await Promise.all(burst);
      await sleep(work.int(...(spec.pauseMs ?? [0, 5])));
    }
  }

  /** Stops the callers and waits (at most `ms`) for every send to settle: a hang fails with the unsettled ones. */
  async stop(ms: number, seedMsg: string): Promise<void> {
    this.stopped = true;
    await bounded('the sends', Promise.all([...this.workers, ...this.settled]), ms, seedMsg).catch((err: Error) => {
      const open = this.ops.filter((o) => o.outcome === undefined);
      throw new Error(`${err.message}: ${open.length} unsettled, e.g. ${JSON.stringify(open.slice(0, 3))}`);
    });
  }

  /**
   * The anomalies of the history against `logs` (per partition, the value at each offset): an acknowledged
   * record not at its offset; an oversized or missing-topic send acknowledged; for idempotent producers a
   * record twice, or a partition's records out of call order.
   */
  check(logs: string[][]): string[] {
    const anomalies: string[] = [];
    const where = new Map<string, Array<[number, number]>>();
    logs.forEach((values, p) => {
      values.forEach((v, off) => {
        where.set(v, [...(where.get(v) ?? []), [p, off]]);
      });
    });
    const short = (v: string) => v.slice(0, 24);
    for (const op of this.ops) {
      op.values.forEach((v, i) => {
        const found = where.get(v) ?? [];
        if (op.outcome === 'ok') {
          const m = op.meta![i]!;
          if ((op.partitions[i]! >= 0 && m.partition !== op.partitions[i]) || logs[m.partition]?.[m.offset] !== v) anomalies.push(`acked ${short(v)} at ${m.partition}/${m.offset}, log has ${short(logs[m.partition]?.[m.offset] ?? '')} (found at ${JSON.stringify(found)})`);
        }
        if (op.missing && op.outcome === 'ok') anomalies.push(`acked a send to a missing topic: ${short(v)}`);
        if (op.oversized && op.outcome === 'ok') anomalies.push(`acked a send with an oversized record: ${short(v)}`);
        if (this.idempotent.has(op.producer) && found.length > 1) anomalies.push(`duplicate ${short(v)} (${op.outcome}) at ${JSON.stringify(found)}`);
      });
    }
    // Idempotent: per partition, every record of the producer in the log (acknowledged, failed or aborted) in call order.
    const order = new Map<string, number>();
    for (const op of this.ops) {
      if (!this.idempotent.has(op.producer)) continue;
      op.values.forEach((v, i) => {
        order.set(v, op.call * 10 + i);
      });
    }
    logs.forEach((values, p) => {
      const last = new Map<string, { o: number; v: string }>();
      for (const v of values) {
        const o = order.get(v);
        if (o === undefined) continue;
        const name = v.slice(0, v.indexOf('|'));
        const prev = last.get(name);
        if (prev && o < prev.o) anomalies.push(`partition ${p}: ${short(v)} (call ${Math.floor(o / 10)}) after ${short(prev.v)} (call ${Math.floor(prev.o / 10)})`);
        else last.set(name, { o, v });
      }
    });
    return anomalies;
  }

  /** Per producer: sends acknowledged and failed; the failures' codes; sends failed with record_too_large though they held no oversized record. */
  summary(): Record<string, unknown> {
    const names = [...new Set(this.ops.map((o) => o.producer))];
    return {
      ...Object.fromEntries(
        names.map((name) => {
          const mine = this.ops.filter((o) => o.producer === name);
          return [name, { ok: mine.filter((o) => o.outcome === 'ok').length, fail: mine.filter((o) => o.outcome === 'fail').length }];
        }),
      ),
      errors: [...new Set(this.ops.filter((o) => o.outcome === 'fail').map((o) => o.error!.split(':')[0]))],
      collateral: this.collateral(),
    };
  }

  /** Sends without an oversized record that failed with record_too_large: they shared a batch with one. */
  collateral(): number {
    return this.ops.filter((o) => !o.oversized && o.error?.startsWith('record_too_large')).length;
  }

  acked(name: string): number {
    return this.ops.filter((o) => o.producer === name && o.outcome === 'ok').length;
  }

  failed(name: string): number {
    return this.ops.filter((o) => o.producer === name && o.outcome === 'fail').length;
  }
}

/** `p`, or a rejection naming `what` once `ms` passed without it settling. */
export async function bounded<T>(what: string, p: Promise<T>, ms: number, seedMsg: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle in ${ms} ms (${seedMsg})`)), ms);
  });
  try {
    return await Promise.race([p, hung]);
  } finally {
    clearTimeout(timer);
  }
}

/** The values of one partition by offset, read from offset 0 (on its leader). */
export async function readLog(conn: Connection, topic: string, partition: number): Promise<string[]> {
  const values: string[] = [];
  for (;;) {
    const recs = (await conn.consume({ topic, partition, offset: values.length, batch: 5000, isolation: 'read_uncommitted' })).records;
    if (recs.length === 0) return values;
    for (const r of recs) values[Number(r.offset)] = r.value.toString();
  }
}

/** The values of each partition of `topic` by offset (a standalone broker). */
export async function readLogs(conn: Connection, topic: string, partitions: number): Promise<string[][]> {
  const logs: string[][] = [];
  for (let p = 0; p < partitions; p++) logs.push(await readLog(conn, topic, p));
  return logs;
}
