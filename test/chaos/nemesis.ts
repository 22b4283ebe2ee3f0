/**
 * The nemesis: a fault schedule drawn from the seed, then run one fault at a time. The schedule (kinds,
 * order, durations, quiet gaps, target choices) depends on the seed alone, so CHAOS_SEED=<n> replays it;
 * which broker is "the leader of partition 3" or "the controller" is resolved when the fault starts.
 *
 * Faults come in rounds that hold every kind once, in a seeded order, so even a short run sees most kinds.
 */
import type { ChaosCluster, ClusterStatus } from './cluster.js';
import type { FaultKind, History, NemesisOp } from './history.js';
import { Rng } from './prng.js';
import type { ConsumerGroup } from './workload.js';

export const FAULT_KINDS: readonly FaultKind[] = [
  'kill-broker',
  'pause-leader',
  'pause-controller',
  'pause-coordinator',
  'pause-etcd-short',
  'pause-etcd-long',
  'kill-consumer',
  'partition-broker',
  'stale-leader',
  'etcd-and-follower',
  'reassign',
  'reassign-cancel',
];

/** [min, max] duration per kind, ms. The broker lease is 2 s (FAST_CLUSTER_ARGS). */
const DURATIONS: Record<FaultKind, [number, number]> = {
  'kill-broker': [1000, 5000], // down time before the restart
  'pause-leader': [3000, 6000], // past the lease
  'pause-controller': [1000, 5000], // either side of the lease
  'pause-coordinator': [3000, 6000],
  'pause-etcd-short': [400, 1500], // shorter than the lease
  'pause-etcd-long': [3000, 6000], // longer than the lease
  'kill-consumer': [500, 3000], // down time before the restart
  'partition-broker': [3000, 8000],
  'stale-leader': [3000, 6000], // the leader's pause, past the lease
  'etcd-and-follower': [3000, 6000], // etcd's pause
  reassign: [2000, 6000], // time at two replicas before the third is added back
  'reassign-cancel': [1000, 4000], // time at two replicas before the throttled way back
};

/** A second duration for the composite faults (0 for the others). */
const EXTRA: Partial<Record<FaultKind, [number, number]>> = {
  'reassign-cancel': [500, 2000], // the throttled way back runs this long before the cancel
  'stale-leader': [300, 800], // followers frozen alone first: the leader's tail stays unreplicated
  'etcd-and-follower': [500, 3000], // the follower stays frozen this long after etcd is back
};

export interface PlannedFault {
  id: number;
  kind: FaultKind;
  /** Quiet time before the fault. */
  gapMs: number;
  durationMs: number;
  /** The composite faults' second duration (see EXTRA). */
  extraMs: number;
  /** Target choice: a broker id, consumer slot or partition, by kind. */
  broker: number;
  partition: number;
  consumer: number;
  /** kill-broker / partition-broker: broker `broker`, the leader of `partition`, or the coordinator of
   * transactional id `chaos-tx<consumer % 2>` (a cut-off coordinator still holds requests in flight). */
  role: 'broker' | 'leader' | 'txn-coordinator';
}

export function planSchedule(seed: number, totalMs: number, shape: { brokers: number; partitions: number; consumers: number }): PlannedFault[] {
  const rng = Rng.derive(seed, 'nemesis');
  const out: PlannedFault[] = [];
  // planned time: actual faults take longer (restarts, waits for a healthy cluster), the run stops at its deadline
  let t = 0;
  while (t < totalMs) {
    for (const kind of rng.shuffle(FAULT_KINDS)) {
      const [lo, hi] = DURATIONS[kind];
      const [elo, ehi] = EXTRA[kind] ?? [0, 0];
      const f: PlannedFault = {
        id: out.length + 1,
        kind,
        gapMs: rng.int(2000, 4000),
        durationMs: rng.int(lo, hi),
        extraMs: rng.int(elo, ehi),
        broker: rng.int(0, shape.brokers - 1),
        partition: rng.int(0, shape.partitions - 1),
        consumer: rng.int(0, shape.consumers - 1),
        role: rng.pick(['broker', 'leader', 'txn-coordinator'] as const),
      };
      out.push(f);
      t += f.gapMs + f.durationMs;
    }
  }
  return out;
}

export function describePlan(f: PlannedFault): string {
  const target = (() => {
    switch (f.kind) {
      case 'kill-broker':
      case 'partition-broker':
        return f.role === 'leader'
          ? `leader of p${f.partition}`
          : f.role === 'txn-coordinator'
            ? `coordinator of chaos-tx${f.consumer % 2}`
            : `broker ${f.broker}`;
      case 'pause-leader':
        return `leader of p${f.partition}`;
      case 'pause-controller':
        return 'controller';
      case 'pause-coordinator':
        return 'group coordinator';
      case 'kill-consumer':
        return `c${f.consumer}`;
      case 'stale-leader':
        return `followers of p${f.partition} for ${f.extraMs} ms, then its leader`;
      case 'etcd-and-follower':
        return `etcd and a follower of p${f.partition} (the follower ${f.extraMs} ms longer)`;
      case 'reassign':
        return `p${f.partition}: ${f.role === 'leader' ? 'its leader' : `its replica #${f.broker}`} removed, then added back`;
      case 'reassign-cancel':
        return `p${f.partition}: ${f.role === 'leader' ? 'its leader' : `its replica #${f.broker}`} removed, added back throttled, cancelled, added back`;
      default:
        return 'etcd';
    }
  })();
  return `#${f.id} ${f.kind} ${target} for ${f.durationMs} ms after ${f.gapMs} ms`;
}

export interface NemesisDeps {
  cluster: ChaosCluster;
  consumers: ConsumerGroup;
  history: History;
  topic: string;
  partitions: number;
  groupId: string;
  log: (line: string) => void;
  /** The last status the sampler saw (used when the cluster cannot be asked at fault time). */
  lastStatus: () => ClusterStatus | undefined;
}

const sleepUntil = (deadline: number, ms: number) => new Promise<void>((r) => setTimeout(r, Math.max(0, Math.min(ms, deadline - Date.now()))));

export class Nemesis {
  readonly executed: Array<{ plan: PlannedFault; start: NemesisOp; end?: NemesisOp }> = [];
  errors: string[] = [];

  constructor(
    private readonly d: NemesisDeps,
    private readonly plan: PlannedFault[],
  ) {}

  private ledBy(s: ClusterStatus | undefined, broker: number): number[] {
    return (s?.partitions ?? []).filter((p) => p.topic === this.d.topic && p.leader === broker).map((p) => p.partition);
  }

  private replicasOf(s: ClusterStatus | undefined, partition: number): number[] {
    return s?.partitions.find((p) => p.topic === this.d.topic && p.partition === partition)?.replicas ?? this.d.cluster.ids;
  }

  private leaderOf(s: ClusterStatus | undefined, partition: number): number | undefined {
    const l = s?.partitions.find((p) => p.topic === this.d.topic && p.partition === partition)?.leader;
    return l !== undefined && l >= 0 ? l : undefined;
  }

  private async coordinator(key: { group: string } | { transactional_id: string }): Promise<number | undefined> {
    const id = this.d.cluster.ids.find((i) => this.d.cluster.state[i] === 'up');
    if (id === undefined) return undefined;
    try {
      return await this.d.cluster.ask(id, async (c) => {
        const m = /coordinator_id=(\d+)/.exec(await c.command('FIND_COORDINATOR', key));
        return m ? Number(m[1]) : undefined;
      });
    } catch {
      return undefined;
    }
  }

  /** Runs the schedule until `deadline`; a fault in progress at the deadline is ended early. */
  async run(deadline: number): Promise<void> {
    for (const f of this.plan) {
      if (Date.now() + f.gapMs >= deadline) break;
      await sleepUntil(deadline, f.gapMs);
      // a bounded wait for recovery from the previous fault, so faults do not pile up
      const healthyBy = Math.min(deadline, Date.now() + 8000);
      while (Date.now() < healthyBy && !(await this.d.cluster.healthy(this.d.topic).catch(() => false))) await sleepUntil(healthyBy, 250);
      if (Date.now() >= deadline) break;
      try {
        await this.runOne(f, deadline);
      } catch (err) {
        this.errors.push(`${describePlan(f)}: ${String(err)}`);
        this.d.log(`nemesis error: ${describePlan(f)}: ${String(err)}`);
        await this.d.cluster.healAll().catch(() => {});
        const e = this.executed.find((x) => x.plan.id === f.id);
        if (e && !e.end) this.mark(f, e.start.targets, e.start.brokers, e.start.partitions, 'end', `healed after an error: ${String(err).slice(0, 200)}`);
      }
    }
  }

  private async runOne(f: PlannedFault, deadline: number): Promise<void> {
    const c = this.d.cluster;
    const s = (await c.status()) ?? this.d.lastStatus();
    const all = [...Array(this.d.partitions).keys()];
    let targets: string[] = [];
    let brokers: number[] = [];
    let partitions: number[] = [];
    let detail: string | undefined;
    let heal: () => Promise<void>;

    const brokerTarget = async (): Promise<number> => {
      if (f.role === 'leader') return this.leaderOf(s, f.partition) ?? f.broker;
      if (f.role === 'txn-coordinator') return (await this.coordinator({ transactional_id: `chaos-tx${f.consumer % 2}` })) ?? f.broker;
      return f.broker;
    };
    switch (f.kind) {
      case 'kill-broker': {
        const b = await brokerTarget();
        targets = [`broker ${b}`];
        brokers = [b];
        partitions = this.ledBy(s, b);
        this.mark(f, targets, brokers, partitions, 'start', 'kill -9');
        await c.kill(b);
        heal = () => c.restart(b);
        break;
      }
      case 'pause-leader':
      case 'pause-controller':
      case 'pause-coordinator': {
        let b: number | undefined;
        if (f.kind === 'pause-leader') b = this.leaderOf(s, f.partition);
        else if (f.kind === 'pause-controller') b = s?.controller ?? undefined;
        else b = await this.coordinator({ group: this.d.groupId });
        if (b === undefined || b < 0) {
          detail = 'target unknown: paused broker';
          b = f.broker;
        }
        targets = [`broker ${b}`];
        brokers = [b];
        partitions = this.ledBy(s, b);
        this.mark(f, targets, brokers, partitions, 'start', `SIGSTOP${detail ? ` (${detail})` : ''}`);
        await c.pause(b);
        const paused = b;
        heal = () => c.resume(paused);
        break;
      }
      case 'pause-etcd-short':
      case 'pause-etcd-long': {
        targets = ['etcd'];
        partitions = all;
        this.mark(f, targets, brokers, partitions, 'start', 'SIGSTOP');
        await c.pauseEtcd();
        heal = () => c.resumeEtcd();
        break;
      }
      case 'kill-consumer': {
        const slot = this.d.consumers.slots[f.consumer]!;
        targets = [slot.process];
        partitions = [...slot.owned];
        this.mark(f, targets, brokers, partitions, 'start', 'kill -9');
        slot.held = true;
        await slot.kill();
        heal = async () => {
          slot.held = false;
          if (!slot.alive) slot.spawn();
        };
        break;
      }
      case 'partition-broker': {
        const b = await brokerTarget();
        targets = [`broker ${b}`];
        brokers = [b];
        partitions = this.ledBy(s, b);
        this.mark(f, targets, brokers, partitions, 'start', 'black-holed from etcd, clients and the other brokers');
        c.cutOff(b);
        heal = async () => c.reconnect(b);
        break;
      }
      case 'stale-leader': {
        // the leader appends what its frozen followers cannot fetch, is frozen itself, and a follower takes over
        const leader = this.leaderOf(s, f.partition) ?? f.broker;
        const followers = this.replicasOf(s, f.partition).filter((r) => r !== leader);
        targets = [`broker ${leader}`, ...followers.map((b) => `broker ${b}`)];
        brokers = [leader, ...followers];
        partitions = all;
        this.mark(
          f,
          targets,
          brokers,
          partitions,
          'start',
          `SIGSTOP followers ${followers.join(',')}, ${f.extraMs} ms later leader ${leader}, then SIGCONT the followers`,
        );
        for (const b of followers) await c.pause(b);
        await sleepUntil(deadline, f.extraMs);
        await c.pause(leader);
        for (const b of followers) await c.resume(b);
        heal = () => c.resume(leader);
        break;
      }
      case 'etcd-and-follower': {
        // the leader cannot shrink its ISR while etcd is away
        const leader = this.leaderOf(s, f.partition);
        const followers = this.replicasOf(s, f.partition).filter((r) => r !== leader);
        const b = followers[f.broker % followers.length] ?? f.broker;
        targets = ['etcd', `broker ${b}`];
        brokers = [b];
        partitions = all;
        this.mark(
          f,
          targets,
          brokers,
          partitions,
          'start',
          `SIGSTOP etcd and follower ${b} of p${f.partition}; etcd resumes first, the follower ${f.extraMs} ms later`,
        );
        await c.pauseEtcd();
        await c.pause(b);
        heal = async () => {
          await c.resumeEtcd();
          await sleepUntil(deadline, f.extraMs);
          await c.resume(b);
        };
        break;
      }
      case 'reassign':
      case 'reassign-cancel': {
        // Replicas moved while everything runs: down to two (the removed one may be the leader, which
        // then moves), and back to three, the returning replica catching up from an empty log. The
        // cancel variant cancels the way back while it is throttled, then adds it again.
        const leader = this.leaderOf(s, f.partition);
        const replicas = this.replicasOf(s, f.partition);
        const removed = f.role === 'leader' && leader !== undefined ? leader : (replicas[f.broker % replicas.length] ?? f.broker);
        const two = replicas.filter((r) => r !== removed);
        targets = [`p${f.partition}`];
        partitions = f.role === 'leader' || removed === leader ? [f.partition] : [];
        this.mark(f, targets, brokers, partitions, 'start', `replicas ${replicas.join(',')} -> ${two.join(',')} (leader ${leader ?? '?'})`);
        await this.reassign(f.partition, two, 0);
        await this.settled(f.partition, two, deadline);
        heal = async () => {
          if (f.kind === 'reassign-cancel') {
            await this.reassign(f.partition, replicas, 2000);
            await sleepUntil(deadline, f.extraMs);
            const cancelled = await this.adminCommand('REASSIGN_CANCEL', { topic: this.d.topic, partition: f.partition }).catch((err: unknown) => String(err));
            this.d.log(`nemesis #${f.id}: cancelled the way back to ${replicas.join(',')}: ${cancelled}`);
            await this.settled(f.partition, two, deadline);
          }
          await this.reassign(f.partition, replicas, 0);
          await this.settled(f.partition, replicas, deadline);
        };
        break;
      }
    }
    await sleepUntil(deadline, f.durationMs);
    await heal();
    this.mark(f, targets, brokers, partitions, 'end');
  }

  /** An admin command on the first broker that answers it. */
  private async adminCommand(name: string, params: Record<string, string | number>): Promise<string> {
    let last: unknown;
    for (const id of this.d.cluster.ids.filter((i) => this.d.cluster.state[i] === 'up')) {
      try {
        return await this.d.cluster.ask(id, (c) => c.command(name, params), 5000);
      } catch (err) {
        last = err;
      }
    }
    throw last ?? new Error('no broker up');
  }

  private async reassign(partition: number, target: number[], throttle: number): Promise<void> {
    await this.adminCommand('REASSIGN', { topic: this.d.topic, assignments: `${partition}:${target.join(',')}`, throttle });
  }

  /** Until the partition has exactly `replicas`, all in sync, with no reassignment left (bounded by `deadline` + 30 s). */
  private async settled(partition: number, replicas: number[], deadline: number): Promise<void> {
    const until = Math.max(deadline, Date.now()) + 30_000;
    while (Date.now() < until) {
      const s = await this.d.cluster.status();
      const p = s?.partitions.find((x) => x.topic === this.d.topic && x.partition === partition);
      if (p && p.replicas.join() === replicas.join() && p.isr.length === replicas.length && p.leader >= 0) {
        const left = await this.adminCommand('REASSIGNMENTS', { topic: this.d.topic }).catch(() => '');
        if (left.includes('"count":0')) return;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new Error(`p${partition} did not settle on replicas ${replicas.join(',')}`);
  }

  private mark(f: PlannedFault, targets: string[], brokers: number[], partitions: number[], phase: 'start' | 'end', detail?: string): void {
    const op: NemesisOp = { f: 'nemesis', id: f.id, kind: f.kind, phase, time: Date.now(), targets, brokers, partitions, ...(detail ? { detail } : {}) };
    this.d.history.add(op);
    if (phase === 'start') this.executed.push({ plan: f, start: op });
    else {
      const e = this.executed.find((x) => x.plan.id === f.id);
      if (e) e.end = op;
    }
    this.d.log(
      `nemesis ${phase} #${f.id} ${f.kind} ${targets.join(', ')}${partitions.length ? ` (partitions ${partitions.join(',')})` : ''}${detail ? `: ${detail}` : ''}`,
    );
  }
}
