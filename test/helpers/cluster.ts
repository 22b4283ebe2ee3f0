/**
 * A real cluster for tests: one etcd and N broker processes on free loopback ports, each with its own data
 * directory, sharing a key prefix of their own. Brokers can be killed, paused and restarted.
 */
import type tls from 'node:tls';
import { afterAll, beforeAll } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { type EtcdServer, type EtcdTlsFiles, startEtcd } from './etcd.js';
import { BrokerProcess } from './launcher.js';
import { withOverrides } from 'tributary-broker/cli/flags.js';
import { eventuallyTolerant } from './util.js';

let clusters = 0;

/** Flags that keep failover fast in tests: 2 s leases, a 2 s replica lag bound, small internal topics. */
export const FAST_CLUSTER_ARGS = [
  '--broker-lease-ttl-seconds',
  '2',
  '--replica-lag-max-ms',
  '2000',
  '--replica-fetch-wait-ms',
  '200',
  '--etcd-request-timeout-ms',
  '2000',
  '--offsets-topic-partitions',
  '4',
  '--transaction-state-partitions',
  '2',
  '--group-join-window-ms',
  '20',
  '--flush',
  'os',
];

export interface ClusterStatus {
  mode: string;
  controller: number | null;
  brokers: Array<{ id: number; address: string }>;
  partitions: Array<{ topic: string; partition: number; leader: number; leader_epoch: number; replicas: number[]; isr: number[] }>;
  under_replicated: number;
  leaderless: number;
}

export interface ClusterTlsOptions {
  /** Start etcd with TLS only and client certificates required. */
  etcd?: EtcdTlsFiles;
  /** More `broker start` flags for broker `id` (its own certificate, say). */
  argsFor?: (id: number) => string[];
  /** TLS options of the helpers' connections to the brokers. */
  clientTls?: tls.ConnectionOptions;
  /** The helpers' connections log in as this user (authentication on, without client certificates). */
  clientAuth?: { principal: string; token: string };
}

export class TestCluster {
  /** `broker start` flags of broker `id` (addBroker starts one more the same way). */
  private argsOf: (id: number) => string[] = () => [];
  private env: Record<string, string> = {};

  private constructor(
    readonly etcd: EtcdServer,
    readonly brokers: BrokerProcess[],
    readonly prefix: string,
  ) {}

  /**
   * etcd, then `n` brokers (ids 0..n-1); resolves once every broker is ready and the internal topics exist.
   * `secure`: etcd with TLS and client certificates, per-broker flags (certificates) and the TLS options
   * the helpers' own connections use.
   */
  static async start(n = 3, extraArgs: string[] = [], env: Record<string, string> = {}, secure: ClusterTlsOptions = {}): Promise<TestCluster> {
    const etcd = await startEtcd({ tls: secure.etcd });
    const prefix = `/tributary-cluster-${process.pid}-${++clusters}/`;
    const brokers: BrokerProcess[] = [];
    const cluster = new TestCluster(etcd, brokers, prefix);
    cluster.env = env;
    cluster.argsOf = (id) =>
      withOverrides(
        [
          ...['--cluster', '--etcd', etcd.endpoints.join(','), '--etcd-prefix', prefix, '--broker-id', String(id), '--internal-replication-factor', String(Math.min(3, n))],
          ...FAST_CLUSTER_ARGS,
        ],
        [...extraArgs, ...(secure.argsFor?.(id) ?? [])],
      );
    try {
      for (let id = 0; id < n; id++) {
        brokers.push(await BrokerProcess.start({ args: cluster.argsOf(id), env, clientTls: secure.clientTls, clientAuth: secure.clientAuth }));
      }
      await cluster.waitFor('every broker ready and the internal topics led', async () => {
        for (const b of brokers) if ((await b.health('/ready').catch(() => ({ status: 0 }))).status !== 200) return false;
        const s = await cluster.status();
        const internal = s.partitions.filter((p) => p.topic === '__consumer_offsets');
        return internal.length > 0 && internal.every((p) => p.leader >= 0) && s.brokers.length === n;
      });
    } catch (err) {
      await cluster.dispose();
      throw err;
    }
    return cluster;
  }

  /** One more broker (the next id), started like the others; resolves once it is ready and registered. */
  async addBroker(): Promise<BrokerProcess> {
    const id = this.brokers.length;
    const b = await BrokerProcess.start({ args: this.argsOf(id), env: this.env });
    this.brokers.push(b);
    await this.waitFor(`broker ${id} ready and registered`, async () => {
      if ((await b.health('/ready').catch(() => ({ status: 0 }))).status !== 200) return false;
      return (await this.status()).brokers.some((x) => x.id === id);
    });
    return b;
  }

  /** A connection to a live broker (the first that answers, or broker `id`). */
  async connect(id?: number): Promise<Connection> {
    const order = id === undefined ? this.brokers.map((_, i) => i) : [id];
    let last: unknown;
    for (const i of order) {
      const b = this.brokers[i]!;
      if (!b.proc || b.proc.exitCode !== null || b.proc.signalCode !== null) continue;
      try {
        return await b.connect();
      } catch (err) {
        last = err;
      }
    }
    throw last ?? new Error('no live broker');
  }

  /** Bootstrap list for SDK clients. */
  get addresses(): string[] {
    return this.brokers.map((b) => b.address);
  }

  async status(via?: number): Promise<ClusterStatus> {
    const c = await this.connect(via);
    try {
      return (await c.json('CLUSTER_STATUS')) as unknown as ClusterStatus;
    } finally {
      await c.close().catch(() => {});
    }
  }

  /** The leader's broker id of a partition per the cluster state (-1 when leaderless). */
  async leaderOf(topic: string, partition: number): Promise<{ id: number; epoch: number; isr: number[] }> {
    const s = await this.status();
    const p = s.partitions.find((x) => x.topic === topic && x.partition === partition);
    return { id: p?.leader ?? -1, epoch: p?.leader_epoch ?? -1, isr: p?.isr ?? [] };
  }

  /** CREATE of a one-partition topic at replication factor 3, then partition 0 once led with a full ISR. */
  async createInSync(topic: string): Promise<{ id: number; epoch: number; isr: number[] }> {
    const admin = await this.connect(0);
    try {
      await admin.command('CREATE', { topic, partitions: 1, replication_factor: 3 });
    } finally {
      await admin.close();
    }
    return this.waitFor(`${topic}[0] led with a full ISR`, async () => {
      const l = await this.leaderOf(topic, 0);
      return l.id >= 0 && l.isr.length === 3 ? l : false;
    });
  }

  /** Broker index by id (ids are 0..n-1). */
  broker(id: number): BrokerProcess {
    return this.brokers[id]!;
  }

  async waitFor<T>(what: string, fn: () => Promise<T | false | undefined>, timeoutMs = 30_000): Promise<T> {
    return eventuallyTolerant(what, fn, {
      timeoutMs,
      stepMs: 100,
      context: () => this.brokers.map((b, i) => `--- broker ${i} stderr ---\n${b.stderr.slice(-3000)}`).join('\n'),
    });
  }


  /** METADATA leaders as host:port per partition. */
  async metadataLeaders(topic: string): Promise<string[]> {
    const c = await this.connect();
    try {
      return parseLine(await c.command('METADATA', { topic })).params.get('leaders')!.split(',');
    } finally {
      await c.close().catch(() => {});
    }
  }

  async dispose(): Promise<void> {
    await Promise.all(this.brokers.map((b) => b.dispose().catch(() => {})));
    await this.etcd.dispose();
  }
}

/**
 * A cluster for the tests of one describe block: started before them, disposed after them, also when one
 * fails. Returns a getter (the cluster exists only once the block's tests run).
 */
export function useCluster(n = 3, extraArgs: string[] = [], env: Record<string, string> = {}): () => TestCluster {
  let cluster: TestCluster | undefined;
  beforeAll(async () => {
    cluster = await TestCluster.start(n, extraArgs, env);
  }, 90_000);
  afterAll(async () => {
    await cluster?.dispose();
  });
  return () => {
    if (!cluster) throw new Error('the cluster is not started yet (use it inside a test)');
    return cluster;
  };
}
