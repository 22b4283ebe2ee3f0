/**
 * The chaos cluster: one etcd and N brokers (test/helpers' launchers), each broker behind two proxies of
 * its own: clients and other brokers reach it through `inbound[i]` (it advertises that port), and it
 * reaches etcd through `etcdProxies[i]`. Cutting broker i off is then: black-hole its inbound proxy,
 * its etcd proxy, and the connections it opened into the other brokers' proxies.
 *
 * The harness itself talks to brokers on their real ports (status, final reads), so it sees past the
 * partitions it makes. Every operation here is bounded in time.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { RecordAttr } from 'tributary-protocol/record.js';
import { FAST_CLUSTER_ARGS } from '../helpers/cluster.js';
import { type EtcdServer, startEtcd } from '../helpers/etcd.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { eventuallyTolerant, sleep } from '../helpers/util.js';
import type { FinalPartition, FinalRecord } from './history.js';
import { socketOwner, TcpProxy } from './proxy.js';

export type BrokerState = 'up' | 'killed' | 'paused' | 'partitioned';

export interface ClusterStatus {
  controller: number | null;
  brokers: Array<{ id: number; address: string }>;
  partitions: Array<{ topic: string; partition: number; leader: number; leader_epoch: number; replicas: number[]; isr: number[] }>;
}

export interface PartitionDescription {
  id: number;
  leader_id: number;
  isr: number[];
  hwm: number;
  lso: number;
  leo: number;
}

/** Rejects after `ms` (the promise itself keeps running; callers close what it holds). */
export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
    }),
  ]);
}

/** The fast test settings without `--flush os`: durability is chosen by the run. */
export function brokerSettings(flush: 'always' | 'os'): string[] {
  const out: string[] = [];
  for (let i = 0; i < FAST_CLUSTER_ARGS.length; i += 2) {
    if (FAST_CLUSTER_ARGS[i] === '--flush') continue;
    out.push(FAST_CLUSTER_ARGS[i]!, FAST_CLUSTER_ARGS[i + 1]!);
  }
  return [...out, '--flush', flush, '--min-insync-replicas', '2', '--default-replication-factor', '3'];
}

export class ChaosCluster {
  readonly state: BrokerState[];

  private constructor(
    readonly etcd: EtcdServer,
    readonly brokers: BrokerProcess[],
    readonly inbound: TcpProxy[],
    /** In front of each broker's Kafka port (advertised with --kafka-advertised-port), faulted with `inbound`. */
    readonly kafkaInbound: TcpProxy[],
    readonly etcdProxies: TcpProxy[],
    readonly prefix: string,
    readonly dataRoot: string,
  ) {
    this.state = brokers.map(() => 'up');
  }

  /**
   * `logLevel`: the brokers' log level (warn by default); each broker's whole log goes to `broker-<id>.log` in
   * `dataRoot`. `env`: the brokers' extra environment (failpoints); `args`: extra broker flags.
   */
  static async start(opts: {
    brokers: number;
    flush: 'always' | 'os';
    /** The ids of the brokers that run `--journal true`. */
    journaled?: number[];
    dataRoot: string;
    logLevel?: string;
    env?: Record<string, string>;
    args?: string[];
  }): Promise<ChaosCluster> {
    const etcd = await startEtcd();
    const brokers: BrokerProcess[] = [];
    const inbound: TcpProxy[] = [];
    const kafkaInbound: TcpProxy[] = [];
    const etcdProxies: TcpProxy[] = [];
    const prefix = `/tributary-chaos-${process.pid}-${Date.now()}/`;
    const cluster = new ChaosCluster(etcd, brokers, inbound, kafkaInbound, etcdProxies, prefix, opts.dataRoot);
    try {
      for (let id = 0; id < opts.brokers; id++) {
        inbound.push(await TcpProxy.start({ name: `broker-${id}`, classify: (remote, local) => socketOwner(remote, local, cluster.brokerPids()) }));
        kafkaInbound.push(await TcpProxy.start({ name: `kafka-${id}` }));
        const ep = await TcpProxy.start({ name: `etcd-for-${id}` });
        ep.setUpstream(etcd.clientPort);
        etcdProxies.push(ep);
      }
      for (let id = 0; id < opts.brokers; id++) {
        const dataDir = path.join(opts.dataRoot, `broker-${id}`);
        await fs.mkdir(dataDir, { recursive: true });
        const args = [
          ...['--cluster', '--etcd', `http://127.0.0.1:${etcdProxies[id]!.port}`, '--etcd-prefix', prefix, '--broker-id', String(id)],
          ...['--internal-replication-factor', String(Math.min(3, opts.brokers)), '--advertised-port', String(inbound[id]!.port)],
          ...['--kafka-port', '0', '--kafka-advertised-port', String(kafkaInbound[id]!.port)],
          ...brokerSettings(opts.flush),
          ...(opts.journaled?.includes(id) ? ['--journal', 'true'] : []),
          ...(opts.logLevel ? ['--log-level', opts.logLevel] : []),
          ...(opts.args ?? []),
        ];
        const b = await BrokerProcess.start({ dataDir, args, env: opts.env, stderrFile: path.join(opts.dataRoot, `broker-${id}.log`) });
        brokers.push(b);
        cluster.state[id] = 'up';
        inbound[id]!.setUpstream(b.port);
        kafkaInbound[id]!.setUpstream(b.kafkaPort);
      }
      await cluster.waitFor('every broker ready and the internal topics led', 60_000, async () => {
        for (const b of brokers) if ((await b.health('/ready').catch(() => ({ status: 0 }))).status !== 200) return false;
        const s = await cluster.status();
        const internal = s?.partitions.filter((p) => p.topic === '__consumer_offsets') ?? [];
        return s !== undefined && internal.length > 0 && internal.every((p) => p.leader >= 0) && s.brokers.length === brokers.length;
      });
    } catch (err) {
      await cluster.dispose();
      throw err;
    }
    return cluster;
  }

  /** What SDK clients bootstrap from: the inbound proxies. */
  get bootstrap(): string[] {
    return this.inbound.map((p) => `127.0.0.1:${p.port}`);
  }

  /** What Kafka clients bootstrap from: the Kafka ports' proxies. */
  get kafkaBootstrap(): string[] {
    return this.kafkaInbound.map((p) => `127.0.0.1:${p.port}`);
  }

  get ids(): number[] {
    return this.brokers.map((_, i) => i);
  }

  brokerPids(): Map<number, string> {
    const m = new Map<number, string>();
    this.brokers.forEach((b, i) => {
      if (b.proc?.pid !== undefined && b.proc.exitCode === null && b.proc.signalCode === null) m.set(b.proc.pid, `broker ${i}`);
    });
    return m;
  }

  /** A broker the harness can ask right now (running, not frozen), preferring ones not cut off. */
  private reachable(): number[] {
    const up = this.ids.filter((i) => this.state[i] === 'up');
    return [...up, ...this.ids.filter((i) => this.state[i] === 'partitioned')];
  }

  private async connect(id: number): Promise<Connection> {
    return Connection.connect({ host: '127.0.0.1', port: this.brokers[id]!.port, connectTimeoutMs: 1000 });
  }

  /** One request on a fresh connection to broker `id`, bounded. */
  async ask<T>(id: number, fn: (c: Connection) => Promise<T>, timeoutMs = 2000): Promise<T> {
    let conn: Connection | undefined;
    try {
      return await withTimeout(
        (async () => {
          conn = await this.connect(id);
          return fn(conn);
        })(),
        timeoutMs,
        `broker ${id}`,
      );
    } finally {
      void conn?.close().catch(() => {});
    }
  }

  async status(): Promise<ClusterStatus | undefined> {
    for (const id of this.reachable()) {
      try {
        return await this.ask(id, async (c) => JSON.parse(await c.command('CLUSTER_STATUS')) as ClusterStatus, 1500);
      } catch {
        // next broker
      }
    }
    return undefined;
  }

  async waitFor<T>(what: string, timeoutMs: number, fn: () => Promise<T | false | undefined>): Promise<T> {
    return eventuallyTolerant(what, fn, { timeoutMs, stepMs: 200, context: () => this.stderrTails(2000) });
  }

  stderrTails(bytes: number): string {
    return this.brokers.map((b, i) => `--- broker ${i} stderr ---\n${b.stderr.slice(-bytes)}`).join('\n');
  }

  async createTopic(topic: string, partitions: number): Promise<void> {
    await this.waitFor(`topic ${topic} created`, 30_000, async () => {
      const id = this.reachable()[0]!;
      await this.ask(id, (c) => c.command('CREATE', { topic, partitions, replication_factor: 3 }), 5000);
      return true;
    });
  }

  /** Every broker ready, every partition of `topic` led with a full ISR. */
  async healthy(topic: string): Promise<boolean> {
    for (const b of this.brokers) if ((await withTimeout(b.health('/ready'), 1000, 'ready').catch(() => ({ status: 0 }))).status !== 200) return false;
    const s = await this.status();
    if (!s || s.brokers.length !== this.brokers.length) return false;
    const ps = s.partitions.filter((p) => p.topic === topic || p.topic.startsWith('__'));
    return ps.length > 0 && ps.every((p) => p.leader >= 0 && p.isr.length === p.replicas.length);
  }

  // ---- faults ----

  async kill(id: number): Promise<void> {
    await this.brokers[id]!.kill('SIGKILL');
    this.state[id] = 'killed';
    await this.inbound[id]!.down();
    await this.kafkaInbound[id]!.down();
  }

  async restart(id: number): Promise<void> {
    if (this.state[id] !== 'killed') return;
    await this.inbound[id]!.up();
    await this.kafkaInbound[id]!.up();
    await this.brokers[id]!.relaunch();
    this.inbound[id]!.setUpstream(this.brokers[id]!.port);
    this.kafkaInbound[id]!.setUpstream(this.brokers[id]!.kafkaPort);
    this.state[id] = 'up';
  }

  async pause(id: number): Promise<void> {
    await this.brokers[id]!.kill('SIGSTOP');
    this.state[id] = 'paused';
  }

  async resume(id: number): Promise<void> {
    if (this.state[id] !== 'paused') return;
    await this.brokers[id]!.kill('SIGCONT');
    this.state[id] = 'up';
  }

  /** Cuts broker `id` off from etcd, clients and the other brokers (both directions). */
  cutOff(id: number): void {
    const label = `broker ${id}`;
    this.etcdProxies[id]!.blackhole();
    for (const j of this.ids) this.inbound[j]!.blackhole(j === id ? () => true : (origin) => origin === label);
    // Brokers never dial Kafka ports: only clients reach them, and the cut-off broker's are cut.
    this.kafkaInbound[id]!.blackhole();
    this.state[id] = 'partitioned';
  }

  reconnect(id: number): void {
    for (const p of [...this.inbound, ...this.kafkaInbound, ...this.etcdProxies]) p.heal();
    if (this.state[id] === 'partitioned') this.state[id] = 'up';
  }

  async pauseEtcd(): Promise<void> {
    await this.etcd.kill('SIGSTOP');
  }

  async resumeEtcd(): Promise<void> {
    await this.etcd.kill('SIGCONT');
  }

  /** Ends every fault: resumes etcd and brokers, heals the proxies, restarts killed brokers. */
  async healAll(): Promise<void> {
    await this.resumeEtcd().catch(() => {});
    for (const id of this.ids) {
      if (this.state[id] === 'paused') await this.resume(id).catch(() => {});
    }
    for (const p of [...this.inbound, ...this.kafkaInbound, ...this.etcdProxies]) p.heal();
    for (const id of this.ids) {
      if (this.state[id] === 'partitioned') this.state[id] = 'up';
      if (this.state[id] === 'killed') await this.restart(id);
    }
  }

  // ---- ground truth ----

  async describe(topic: string, leader: number): Promise<PartitionDescription[]> {
    return this.ask(leader, async (c) => (JSON.parse(await c.command('DESCRIBE', { topic })) as { partitions: PartitionDescription[] }).partitions, 3000);
  }

  /** Every partition's leader reports LSO = HWM (no transaction left open). */
  async stable(topic: string): Promise<boolean> {
    const s = await this.status();
    if (!s) return false;
    for (const p of s.partitions.filter((x) => x.topic === topic)) {
      if (p.leader < 0) return false;
      const d = (await this.describe(topic, p.leader)).find((x) => x.id === p.partition);
      if (!d || d.lso !== d.hwm) return false;
    }
    return true;
  }

  /** Reads a partition from offset 0 on its leader, read_uncommitted and read_committed, and the group's offset. */
  async finalRead(topic: string, partitions: number, groupId: string): Promise<{ final: FinalPartition[]; errors: string[] }> {
    const final: FinalPartition[] = [];
    const errors: string[] = [];
    const s = await this.status();
    const findCoordinator = () =>
      this.ask(this.reachable()[0]!, async (c) => Number(parseLine(await c.command('FIND_COORDINATOR', { group: groupId })).params.get('coordinator_id')));
    let coordinator = await findCoordinator().catch((err) => {
      errors.push(`FIND_COORDINATOR: ${String(err)}`);
      return undefined;
    });
    for (let p = 0; p < partitions; p++) {
      // leadership may still move after the cluster looked settled: ask again (bounded)
      let last: unknown;
      for (let attempt = 0; attempt < 20; attempt++) {
        if (attempt > 0) {
          await sleep(500);
          coordinator = (await findCoordinator().catch(() => undefined)) ?? coordinator;
        }
        const st = attempt === 0 ? s : await this.status();
        const leader = st?.partitions.find((x) => x.topic === topic && x.partition === p)?.leader ?? -1;
        if (leader < 0) {
          last = 'no leader';
          continue;
        }
        try {
          const d = (await this.describe(topic, leader)).find((x) => x.id === p);
          const records = await this.readAll(leader, topic, p, 'read_uncommitted');
          const visible = (await this.readAll(leader, topic, p, 'read_committed')).map((r) => r.offset);
          let groupCommitted: number | undefined;
          if (coordinator !== undefined) {
            const reply = parseLine(await this.ask(coordinator, (c) => c.command('FETCH_OFFSET', { topic, group: groupId, partition: p }), 5000)).params;
            if (reply.get('committed') === 'true') groupCommitted = Number(reply.get('offset'));
          }
          final.push({ partition: p, records, visible, hwm: d?.hwm ?? -1, lso: d?.lso ?? -1, groupCommitted });
          if (attempt > 0) errors.push(`partition ${p}: read on attempt ${attempt + 1} (leadership moved after the cluster settled)`);
          last = undefined;
          break;
        } catch (err) {
          last = err;
        }
      }
      if (last !== undefined) errors.push(`partition ${p}: ${String(last)}`);
    }
    return { final, errors };
  }

  async readAll(leader: number, topic: string, partition: number, isolation: string): Promise<FinalRecord[]> {
    const out: FinalRecord[] = [];
    const conn = await this.connect(leader);
    try {
      let offset = 0;
      for (let round = 0; round < 10_000; round++) {
        const batch = await withTimeout(
          conn.consume({ topic, partition, offset, isolation, batch: 10_000, max_bytes: 8 * 1024 * 1024, wait_ms: 0 }),
          10_000,
          'CONSUME',
        );
        for (const r of batch.records) {
          out.push({
            offset: r.offset,
            value: r.value.toString(),
            control: (r.attributes & RecordAttr.CONTROL) !== 0,
            transactional: (r.attributes & RecordAttr.TRANSACTIONAL) !== 0,
          });
        }
        const last = batch.records[batch.records.length - 1];
        const next = batch.trailer?.nextOffset ?? (last ? last.offset + 1 : offset);
        if (next <= offset) return out;
        offset = next;
      }
      throw new Error('read did not reach the end');
    } finally {
      await conn.close().catch(() => {});
    }
  }

  async dispose(): Promise<void> {
    for (const p of [...this.inbound, ...this.kafkaInbound, ...this.etcdProxies]) await p.close().catch(() => {});
    // SIGKILL ends stopped processes too
    await Promise.all(this.brokers.map((b) => b.dispose().catch(() => {})));
    await this.etcd.dispose().catch(() => {});
  }
}
