/**
 * The administrative operations of a cluster under faults (cluster-admin-ops.test.ts): partition
 * reassignment, its cancel and throttle, draining a broker, changing a topic's replication factor, adding
 * partitions and deleting a topic while its replicas move, each run while a broker it involves, the
 * controller or etcd is killed. Every admin operation is logged with its invoke and complete times; the
 * checks after each step are on the cluster's own answers (CLUSTER_STATUS, REASSIGNMENTS), bounded in time.
 */
import { parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { ChaosCluster, ClusterStatus } from '../chaos/cluster.js';
import type { Rng } from '../chaos/prng.js';

export interface AdminOp {
  step: string;
  op: string;
  params: Record<string, string | number>;
  start: number;
  end: number;
  outcome: 'ok' | 'fail';
  reply: string;
}

interface ReassignmentsReply {
  count: number;
  reassignments: Array<{ topic: string; partition: number; phase: string; target: number[]; replicas: number[] }>;
}

type Part = ClusterStatus['partitions'][number];

const sameSet = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((x) => b.includes(x));

/** Drives admin operations and faults against a ChaosCluster; records every admin operation. */
export class AdminDriver {
  readonly ops: AdminOp[] = [];
  step = '';

  constructor(
    readonly c: ChaosCluster,
    readonly rng: Rng,
    readonly log: (line: string) => void,
  ) {}

  /** An admin command on the first running broker that answers (a refusal is an answer: recorded, thrown). */
  async admin(op: string, params: Record<string, string | number> = {}): Promise<string> {
    const rec: AdminOp = { step: this.step, op, params, start: Date.now(), end: 0, outcome: 'fail', reply: '' };
    this.ops.push(rec);
    let last: unknown;
    for (const id of this.c.ids.filter((i) => this.c.state[i] === 'up')) {
      try {
        rec.reply = await this.c.ask(id, (conn) => conn.command(op, params), 8000);
        rec.outcome = 'ok';
        rec.end = Date.now();
        this.log(`${this.step}: ${op} ${JSON.stringify(params)} -> ${rec.reply.slice(0, 160)}`);
        return rec.reply;
      } catch (err) {
        last = err;
        // a refusal from the broker is final; a connection failure tries the next broker
        if (err instanceof TributaryError && !['connection_lost', 'metadata_unavailable', 'not_controller'].includes(err.code)) break;
      }
    }
    rec.end = Date.now();
    rec.reply = String(last);
    this.log(`${this.step}: ${op} ${JSON.stringify(params)} -> FAILED ${rec.reply.slice(0, 200)}`);
    throw last ?? new Error('no broker up');
  }

  async status(): Promise<ClusterStatus> {
    const s = await this.c.status();
    if (!s) throw new Error('no broker answered CLUSTER_STATUS');
    return s;
  }

  async part(topic: string, partition: number): Promise<Part> {
    const p = (await this.status()).partitions.find((x) => x.topic === topic && x.partition === partition);
    if (!p) throw new Error(`${topic}[${partition}] not in CLUSTER_STATUS`);
    return p;
  }

  async reassignments(topic?: string): Promise<ReassignmentsReply> {
    const text = await this.c.ask(this.c.ids.find((i) => this.c.state[i] === 'up')!, (conn) => conn.command('REASSIGNMENTS', topic ? { topic } : {}), 5000);
    return JSON.parse(text) as ReassignmentsReply;
  }

  /** Until a reassignment of topic[partition] is catching up (the target replicas joined `replicas`). */
  async untilCatchingUp(topic: string, partition: number, ms = 15_000): Promise<void> {
    await this.c.waitFor(`${topic}[${partition}] catching up`, ms, async () => {
      const r = (await this.reassignments(topic)).reassignments.find((x) => x.partition === partition);
      return r?.phase === 'catching_up';
    });
  }

  /**
   * Until the reassignment of topic[partition] has ended: no request left, replicas `want` (or one of
   * `wants`), every replica in sync, a live leader among them. Resolves the replicas it ended with.
   */
  async untilSettled(topic: string, partition: number, wants: number[][], ms = 30_000): Promise<number[]> {
    let seen = '';
    try {
      return await this.c.waitFor(`${topic}[${partition}] settled on ${wants.map((w) => w.join(',')).join(' or ')}`, ms, async () => {
        const s = await this.status();
        const p = s.partitions.find((x) => x.topic === topic && x.partition === partition);
        const left = (await this.reassignments(topic)).reassignments.filter((x) => x.partition === partition);
        seen = `replicas ${p?.replicas.join(',')} isr ${p?.isr.join(',')} leader ${p?.leader} requests ${JSON.stringify(left)}`;
        if (!p || left.length > 0 || p.leader < 0 || !p.replicas.includes(p.leader) || !sameSet(p.isr, p.replicas)) return false;
        if (!s.brokers.some((b) => b.id === p.leader)) return false;
        return wants.some((w) => w.join() === p.replicas.join()) ? p.replicas : false;
      });
    } catch (err) {
      throw new Error(
        `${topic}[${partition}] never settled on ${wants.map((w) => w.join(',')).join(' or ')}; last seen: ${seen}\n${String(err).slice(0, 400)}`,
      );
    }
  }

  /** Until no reassignment is left anywhere and every partition of the topics given has a full ISR and a live leader. */
  async untilAllSettled(topics: string[], ms = 40_000, extra?: (p: Part) => boolean): Promise<void> {
    let seen = '';
    try {
      await this.c.waitFor(`every reassignment ended (${topics.join(',')})`, ms, async () => {
        const r = await this.reassignments();
        const s = await this.status();
        const bad = s.partitions.filter(
          (p) =>
            topics.includes(p.topic) &&
            (p.leader < 0 || !s.brokers.some((b) => b.id === p.leader) || !sameSet(p.isr, p.replicas) || (extra !== undefined && !extra(p))),
        );
        seen = `requests ${JSON.stringify(r.reassignments.map((x) => `${x.topic}[${x.partition}] ${x.phase} ${x.replicas.join(',')}->${x.target.join(',')}`))}; unsettled ${JSON.stringify(bad)}`;
        return r.count === 0 && bad.length === 0;
      });
    } catch (err) {
      throw new Error(`reassignments never all ended; last seen: ${seen}\n${String(err).slice(0, 400)}`);
    }
  }

  /** kill -9 of a broker, then until the others see it gone (its lease revoked or expired). */
  async kill(id: number): Promise<void> {
    this.log(`${this.step}: kill -9 broker ${id}`);
    await this.c.kill(id);
    await this.c.waitFor(`broker ${id} deregistered`, 20_000, async () => !(await this.status()).brokers.some((b) => b.id === id));
  }

  async restart(id: number): Promise<void> {
    this.log(`${this.step}: restart broker ${id}`);
    await this.c.restart(id);
    await this.c.waitFor(`broker ${id} registered again`, 30_000, async () => (await this.status()).brokers.some((b) => b.id === id));
  }

  async controller(): Promise<number> {
    return this.c.waitFor('a controller', 20_000, async () => {
      const s = await this.status();
      return s.controller !== null && this.c.state[s.controller] === 'up' ? s.controller : false;
    });
  }

  pick<T>(xs: readonly T[]): T {
    return xs[this.rng.int(0, xs.length - 1)]!;
  }

  /** A target for `p`: one replica (the leader when `leader`) replaced by a broker outside the replicas. */
  moveOne(p: Part, opts: { leader?: boolean; avoid?: number[] } = {}): { target: number[]; out: number; into: number } {
    const outside = this.c.ids.filter((id) => !p.replicas.includes(id) && !(opts.avoid ?? []).includes(id));
    const into = this.pick(outside);
    const candidates = opts.leader ? [p.leader] : p.replicas.filter((id) => id !== p.leader);
    const out = this.pick(candidates);
    return { target: p.replicas.map((id) => (id === out ? into : id)), out, into };
  }

  ok(reply: string): Map<string, string> {
    return parseLine(reply).params;
  }
}
