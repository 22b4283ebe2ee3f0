import type { Etcd3 } from 'etcd3';
import type { BrokerMetrics } from '../common/metrics.js';
import type { BrokerConfig } from '../common/config.js';
import type { Logger } from '../common/logger.js';
import type { TopicManager } from '../partition/topic-manager.js';
import { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { parseAddress } from 'tributary-protocol/address.js';
import { OFFSETS_TOPIC } from '../coordinator/group-log.js';
import { TXN_STATE_TOPIC } from '../txn/txn-log.js';
import { BrokerRegistry, type BrokerRegistration } from './broker-registry.js';
import { Controller, assignReplicas } from './controller.js';
import { ControllerElection } from './controller-election.js';
import { type PeerTls, etcdCredentials, etcdEndpoints, peerTls } from './cluster-tls.js';
import { systemClock } from '../common/clock.js';
import { DeletedTopicSweeper } from './deleted-topics.js';
import { createEtcdClient } from './etcd-client.js';
import { EtcdMetadataStore } from './etcd-metadata-store.js';
import { PartitionStateStore } from './partition-state.js';
import { ReassignmentStore } from './reassignment.js';
import { type Replica, ReplicaManager } from './replica-manager.js';
import { replicaFrameBytes } from './replica-wire.js';
import type { MemberLeases } from './member-leases.js';

/** Silence (past a request's own wait, with an unanswered ping) after which a peer connection is dropped. */
const PEER_STALL_MS = 3000;
/** What a follower asks a REPLICA_FETCH for (the leader then adds one whole append however large). */
const FETCH_MAX_BYTES = 4 * 1024 * 1024;

/**
 * One broker's membership of a cluster: the etcd client and everything kept there (topic definitions,
 * its registration, the controller election, partition states), the replica manager that turns the
 * states into local roles, and the controller when elected. The broker asks it who leads what.
 */
export class ClusterNode {
  readonly client: Etcd3;
  /** Inter-broker TLS (cluster-tls.ts); undefined when brokers talk plain TCP. */
  readonly tls: PeerTls | undefined;
  readonly store: EtcdMetadataStore;
  readonly registry: BrokerRegistry;
  /** The Kafka listener's `host:port` (docs/kafka.md), registered with this broker; set before start(). */
  kafkaAddress: string | undefined;
  readonly election: ControllerElection;
  readonly states: PartitionStateStore;
  /** Reassignment requests; the controller carries them out (reassignment.ts). */
  readonly reassignments: ReassignmentStore;
  replicas!: ReplicaManager;
  private controller: Controller | undefined;
  /** Removes the tombstones of deleted topics older than --deleted-topic-retention-ms, while controller. */
  private readonly sweeper: DeletedTopicSweeper;
  private closed = false;
  /** The broker is stopping (beginClose): a registration it loses now is not re-registered, nor an error. */
  private closing = false;
  /** Connections to other brokers for coordinator lookups. */
  private readonly peers = new Map<string, Connection>();
  private readonly connecting = new Map<string, Promise<Connection>>();
  /** Per peer, a second connection for pings only (the stall watchdog's probe of `peers`). */
  private readonly peerControl = new Map<string, Connection>();
  private readonly connectingControl = new Map<string, Promise<Connection>>();
  /** Highest coordinator epoch per `__transaction_state` partition seen in markers written here. */
  private readonly txnCoordinatorEpochs = new Map<number, number>();
  /**
   * Standings of group members asked of their coordinators, for fenced reads of partitions led here
   * (member-leases.ts). Set by the broker, which knows each group's `__consumer_offsets` partition.
   */
  memberLeases: MemberLeases | undefined;
  private readonly logger: Logger;

  constructor(
    private readonly config: BrokerConfig,
    /** The broker's logger, without a component: each part gets one key, `cluster.<part>` (see part()). */
    private readonly root: Logger,
    private readonly metrics?: BrokerMetrics,
  ) {
    this.logger = root.child({ component: 'cluster' });
    const endpoints = etcdEndpoints(config);
    if (endpoints.length === 0) throw new Error('invalid config: cluster mode needs --etcd <endpoints>');
    if (config.authentication && (config.interBrokerPrincipal === undefined || config.interBrokerToken === undefined)) {
      throw new Error('invalid config: cluster mode with authentication needs interBrokerPrincipal and interBrokerToken (a user with admin)');
    }
    this.tls = peerTls(config);
    this.client = createEtcdClient({ endpoints, requestTimeoutMs: config.etcdRequestTimeoutMs, credentials: etcdCredentials(config) });
    const prefix = config.etcdPrefix;
    this.store = new EtcdMetadataStore({ etcd: this.client, prefix });
    this.registry = new BrokerRegistry({ etcd: this.client, prefix, leaseTtlSeconds: config.brokerLeaseTtlSeconds });
    this.election = new ControllerElection({ etcd: this.client, prefix, brokerId: config.brokerId, leaseTtlSeconds: config.brokerLeaseTtlSeconds });
    this.states = new PartitionStateStore({ etcd: this.client, prefix });
    this.reassignments = new ReassignmentStore({ etcd: this.client, prefix });
    this.sweeper = new DeletedTopicSweeper({
      client: this.client,
      prefix: this.store.prefix,
      retentionMs: config.deletedTopicRetentionMs,
      clock: systemClock,
      logger: this.part('deleted-topics'),
    });
  }

  /**
   * A child of the root, not of this.logger: pino writes a child's bindings after its parent's, so
   * nesting gave lines with `"component"` twice, which strict JSON readers refuse (docs/operations.md, "Logs").
   */
  private part(name: string): Logger {
    return this.root.child({ component: `cluster.${name}` });
  }

  private get peerAuth(): { principal: string; token: string } | undefined {
    const { interBrokerPrincipal: principal, interBrokerToken: token } = this.config;
    return principal !== undefined && token !== undefined ? { principal, token } : undefined;
  }

  /** Whether this broker is one of the partition's replicas (none before start()). */
  hosts(topic: string, partition: number): boolean {
    const replicas = this.replicas as ReplicaManager | undefined;
    return replicas?.get(topic, partition)?.replicas.includes(this.config.brokerId) === true;
  }

  get brokerId(): number {
    return this.config.brokerId;
  }

  /**
   * Joins: reads the cluster state, registers (waiting out the lease of this id's previous process after a
   * kill -9), applies the partition states to the open topics, then campaigns for controller.
   */
  async start(topics: TopicManager, advertised: { host: string; port: number }, onTick: () => Promise<void>): Promise<void> {
    await this.states.open();
    await this.reassignments.open();
    await this.registry.open();
    this.replicas = new ReplicaManager({
      brokerId: this.config.brokerId,
      topics,
      states: this.states,
      registry: this.registry,
      logger: this.part('replicas'),
      config: {
        replicaLagMaxMs: this.config.replicaLagMaxMs,
        fetchWaitMs: this.config.replicaFetchWaitMs,
        fetchMaxBytes: FETCH_MAX_BYTES,
        minInsyncReplicas: this.config.minInsyncReplicas,
      },
      connect: (host, port, signal, leaderFrameBytes) =>
        Connection.connect({
          host,
          port,
          signal,
          connectTimeoutMs: 2000,
          auth: this.peerAuth,
          tls: this.tls?.client,
          maxFrameBytes: replicaFrameBytes(Math.max(this.config.maxFrameBytes, leaderFrameBytes ?? 0), FETCH_MAX_BYTES),
        }),
      onIsrChange: (topic, kind) => (kind === 'shrink' ? this.metrics?.isrShrinks : this.metrics?.isrExpands)?.inc({ topic }),
    });
    await this.registry.register(this.registration(advertised), { waitMs: this.config.brokerLeaseTtlSeconds * 1000 + 5000 });
    this.registry.events.on('registration-lapsed', () => void this.renewRegistration(advertised));
    this.registry.events.on('registration-lost', (reason: string) => {
      // Stopping: the controller saw this broker's listener close and revoked its lease, as it should.
      if (this.closing) {
        this.logger.info({ reason }, 'broker registration ended while shutting down');
        return;
      }
      // Writes are refused from now on (ReplicaManager checks the lease); rejoin under a new lease.
      this.logger.error({ reason }, 'broker registration lost: no longer leading anything; re-registering');
      void this.reregister(advertised);
    });
    await this.replicas.start();
    this.controller = new Controller({
      election: this.election,
      registry: this.registry,
      states: this.states,
      reassignments: this.reassignments,
      topics: {
        definitionKey: (topic) => this.store.definitionKey(topic),
        cachedId: (topic) => this.store.getTopic(topic)?.topicId,
        readId: async (topic) => (await this.store.readTopic(topic))?.topicId,
        events: this.store.events,
      },
      logger: this.part('controller'),
      uncleanLeaderElection: this.config.uncleanLeaderElection,
      preferredLeader: this.config.autoLeaderRebalance ? { delayMs: this.config.leaderRebalanceDelayMs } : undefined,
      peerTls: this.tls?.client,
      onIsrShrink: (topic) => this.metrics?.isrShrinks.inc({ topic }),
      onTick: () => {
        // Not awaited (it never rejects): a slow etcd must not hold the next failover pass behind a sweep.
        void this.sweeper.pass();
        return onTick();
      },
    });
    await this.election.start();
    this.controller.kick();
  }

  /** etcd was unreachable long enough for the lease to lapse: keep the registration under a new lease. */
  private async renewRegistration(advertised: { host: string; port: number }): Promise<void> {
    if (this.closing) return;
    this.logger.warn('broker lease lapsed (etcd unreachable); taking the registration over when etcd answers');
    for (let attempt = 0; !this.closing; attempt++) {
      try {
        if (await this.registry.renew()) {
          this.logger.info('broker registration kept under a new lease');
          return;
        }
        // The key is gone: etcd expired it and others may have taken over our partitions.
        this.logger.warn('broker registration expired while etcd was unreachable; registering again');
        return void this.reregister(advertised);
      } catch (err) {
        if (attempt % 10 === 0) this.logger.warn({ err }, 'renewing the broker registration failed; retrying');
        await new Promise((r) => setTimeout(r, 250));
      }
    }
  }

  private registration(advertised: { host: string; port: number }): Omit<BrokerRegistration, 'startedAt'> {
    const own = {
      id: this.config.brokerId,
      host: this.config.host,
      port: advertised.port,
      advertisedAddress: `${advertised.host}:${advertised.port}`,
      maxFrameBytes: this.config.maxFrameBytes,
    };
    return this.kafkaAddress === undefined ? own : { ...own, kafkaAddress: this.kafkaAddress };
  }

  private async reregister(advertised: { host: string; port: number }): Promise<void> {
    // Not once the broker stops: a registration made then would outlive the broker's leaving (by its TTL).
    for (let attempt = 0; !this.closing; attempt++) {
      try {
        await this.registry.register(this.registration(advertised), { waitMs: this.config.brokerLeaseTtlSeconds * 1000 + 2000 });
        this.logger.info('broker registered again');
        return;
      } catch (err) {
        if (attempt % 10 === 0) this.logger.warn({ err }, 're-registration failed; retrying');
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  }

  /** The broker began to stop: losing its registration from now on is the end of it, not a fault. */
  beginClose(): void {
    this.closing = true;
  }

  async close(): Promise<void> {
    this.closing = true;
    this.closed = true;
    for (const c of [...this.peers.values(), ...this.peerControl.values()]) await c.close().catch(() => {});
    this.controller?.close();
    this.sweeper.close();
    await this.replicas?.close();
    await this.election.close().catch(() => {});
    await this.registry.close().catch(() => {});
    await this.states.close().catch(() => {});
    await this.reassignments.close().catch(() => {});
    await this.store.close().catch(() => {});
    this.client.close();
  }

  /**
   * Replica assignment and initial states of a topic's partitions, written after its definition. States a
   * deleted topic of the same name left behind (another topic id: their deletion failed or was cut short)
   * are deleted first: the new topic must not inherit their leaders, ISR and epochs.
   */
  async createPartitionStates(topic: string, partitions: number, replicationFactor: number, topicId: string): Promise<void> {
    const foreign = new Set(this.states.list(topic).flatMap((e) => (e.value.topicId !== undefined && e.value.topicId !== topicId ? [e.value.topicId] : [])));
    for (const id of foreign) await this.states.deleteTopic(topic, id);
    const have = this.states.list(topic).length;
    if (have >= partitions) return;
    // Partitions added to a topic get replicas the same way, continuing the spread of leaders.
    const live = this.registry.list().map((b) => b.id);
    await this.states.create(topic, assignReplicas(partitions - have, replicationFactor, live, have).map((s) => ({ ...s, topicId })), have);
  }

  /**
   * createPartitionStates for the topics that need it (fewer states than partitions, or states of another
   * topic id), found in one pass over the states: at startup, calling it for each of 100 topics walked all
   * 10,000 states twice per topic.
   */
  async repairPartitionStates(topics: Array<{ name: string; def: { partitions: number; replicationFactor: number; topicId: string } }>): Promise<void> {
    const seen = new Map<string, { count: number; ids: Set<string | undefined> }>();
    for (const e of this.states.list()) {
      const s = seen.get(e.topic) ?? { count: 0, ids: new Set() };
      s.count++;
      s.ids.add(e.value.topicId);
      seen.set(e.topic, s);
    }
    for (const t of topics) {
      const s = seen.get(t.name);
      const foreign = s !== undefined && [...s.ids].some((id) => id !== undefined && id !== t.def.topicId);
      if (s === undefined || s.count < t.def.partitions || foreign) {
        await this.createPartitionStates(t.name, t.def.partitions, t.def.replicationFactor, t.def.topicId);
      }
    }
  }

  /** Of `partitions` of `topic`, the ones this broker leads and serves now (PARTITIONS_READY). */
  servingNow(topic: string, partitions: number[]): number[] {
    return partitions.filter((p) => this.replicas.isLeader(topic, p));
  }

  /**
   * Resolves once the leader of every partition in `partitions` serves it (CREATE and ADD_PARTITIONS answer
   * only then, docs/protocol.md "Topics and metadata"): leaders are asked with PARTITIONS_READY, again as
   * leadership or the topic's opening moves on, until `timeoutMs`, then a retriable request_timeout.
   */
  async awaitServing(topic: string, partitions: number[], timeoutMs: number): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    let pending = partitions;
    for (;;) {
      const byLeader = new Map<number, number[]>();
      for (const p of pending) {
        const leader = this.states.get(topic, p)?.value.leader ?? -1;
        byLeader.set(leader, [...(byLeader.get(leader) ?? []), p]);
      }
      const ready = new Set<number>();
      await Promise.all(
        [...byLeader].map(async ([leader, parts]) => {
          let served: number[] = [];
          if (leader === this.config.brokerId) served = this.servingNow(topic, parts);
          else if (leader >= 0) {
            const address = this.registry.list().find((b) => b.id === leader)?.advertisedAddress;
            // A peer that cannot say (gone, not started, partitioned) is asked again next round.
            // Connecting can fail too (a TLS and AUTH handshake that outlasts its bound on a loaded peer).
            const reply = address ? await this.peer(address).then((c) => c.command('PARTITIONS_READY', { topic, partitions: parts.join(',') })).catch(() => '') : '';
            served = (parseLine(reply || 'OK').params.get('ready') ?? '').split(',').filter(Boolean).map(Number);
          }
          for (const p of served) ready.add(p);
        }),
      );
      pending = pending.filter((p) => !ready.has(p));
      if (pending.length === 0) return;
      if (performance.now() >= deadline) {
        throw new TributaryError('request_timeout', { topic, reason: `partitions ${pending.join(',')} have no serving leader yet` });
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /**
   * A `topic_not_found` or `partition_not_found` about to be answered: the retriable `topic_loading` when
   * etcd has the topic (with that partition) and only this broker has not opened it yet, as right after a
   * CREATE that did not wait, or while a slow broker catches up with the watch.
   */
  async refineNotFound(err: TributaryError): Promise<TributaryError> {
    const topic = err.fields.topic;
    if (typeof topic !== 'string') return err;
    const def = this.store.getTopic(topic) ?? (await this.store.readTopic(topic).catch(() => undefined));
    if (!def) return err;
    const partition = err.code === 'partition_not_found' ? Number(err.fields.partition) : undefined;
    if (partition !== undefined && !(partition < def.partitions)) return err;
    return new TributaryError('topic_loading', { topic, ...(partition !== undefined ? { partition } : {}) });
  }

  /**
   * A connection to the broker leading a partition when that is another broker (NOT_LEADER while there is
   * none, or while the lead is on its way here).
   */
  leaderPeer(topic: string, partition: number): Promise<Connection> {
    const leader = this.leaderAddress(topic, partition);
    if (!leader) return Promise.reject(new TributaryError('NOT_LEADER', { topic, partition, reason: 'no leader' }));
    if (leader.id === this.config.brokerId) return Promise.reject(new TributaryError('NOT_LEADER', { topic, partition, reason: 'leadership is moving here' }));
    return this.peer(leader.advertisedAddress);
  }

  /**
   * The committed offset of a group's partition, asked of the group's coordinator: the leader of its
   * `__consumer_offsets` partition (`offsetsPartition`).
   */
  async fetchCommitted(group: string, offsetsPartition: number, topic: string, partition: number): Promise<number | undefined> {
    if (!this.leaderAddress(OFFSETS_TOPIC, offsetsPartition)) throw new TributaryError('COORDINATOR_LOADING', { reason: `${OFFSETS_TOPIC}[${offsetsPartition}] has no leader` });
    let reply: string;
    try {
      reply = await (await this.leaderPeer(OFFSETS_TOPIC, offsetsPartition)).command('FETCH_OFFSET', { topic, group, partition });
    } catch (err) {
      // The coordinator's own answers (NOT_COORDINATOR, COORDINATOR_LOADING) pass through; a lost or
      // stalled peer connection is not this client's connection.
      if (err instanceof TributaryError && err.code === 'connection_lost') {
        throw new TributaryError('COORDINATOR_NOT_AVAILABLE', { group, reason: String(err.fields.reason ?? err.message) });
      }
      throw err;
    }
    const params = parseLine(reply).params;
    return params.get('committed') === 'true' ? Number(params.get('offset')) : undefined;
  }

  /**
   * MEMBER_LEASE at the group's coordinator (the leader of `offsetsPartition`), for a fenced read. Fails
   * closed: the coordinator's refusals of the member pass through; anything that leaves the answer
   * unknown (no coordinator, a lost or stalled peer, a coordinator moving) is a retriable
   * COORDINATOR_NOT_AVAILABLE, never a read served on a guess.
   */
  async askMemberLease(group: string, offsetsPartition: number, topic: string, member: string): Promise<string> {
    try {
      if (!this.leaderAddress(OFFSETS_TOPIC, offsetsPartition)) throw new TributaryError('COORDINATOR_LOADING', { reason: `${OFFSETS_TOPIC}[${offsetsPartition}] has no leader` });
      return await (await this.leaderPeer(OFFSETS_TOPIC, offsetsPartition)).command('MEMBER_LEASE', { topic, group, member });
    } catch (err) {
      const e = err instanceof TributaryError ? err : undefined;
      if (e && (e.errorClass === 'fencing' || e.errorClass === 'not_found' || e.errorClass === 'validation')) throw e;
      throw new TributaryError('COORDINATOR_NOT_AVAILABLE', { group, reason: e ? `${e.code}: ${String(e.fields.reason ?? e.message)}` : String(err) });
    }
  }

  /**
   * A connection to another broker, kept per address (requests on it are pipelined in order). A peer that
   * answers nothing past a request's own wait for PEER_STALL_MS, not even a ping on a connection of its
   * own, loses the connection: its requests fail with a retriable connection_lost, so a read or a
   * transaction step that needs a frozen or cut-off broker (the group's old coordinator, say) fails and
   * is retried once leadership has moved, instead of waiting for that broker to come back.
   */
  peer(address: string): Promise<Connection> {
    return this.pooledPeer(this.peers, this.connecting, address, () => this.pingPeer(address));
  }

  /** PROTOCOL_INFO on the peer's control connection: it answers at once when the broker runs. */
  private async pingPeer(address: string): Promise<void> {
    const conn = await this.pooledPeer(this.peerControl, this.connectingControl, address, undefined);
    await conn.request('PROTOCOL_INFO');
  }

  private pooledPeer(
    pool: Map<string, Connection>,
    connecting: Map<string, Promise<Connection>>,
    address: string,
    probe: (() => Promise<void>) | undefined,
  ): Promise<Connection> {
    const open = pool.get(address);
    if (open && !open.closed) return Promise.resolve(open);
    let p = connecting.get(address);
    if (!p) {
      const { host, port } = parseAddress(address);
      p = Connection.connect({ host, port, connectTimeoutMs: 2000, auth: this.peerAuth, tls: this.tls?.client, stallTimeoutMs: PEER_STALL_MS, probe }).then(
        (c) => {
          pool.set(address, c);
          connecting.delete(address);
          if (this.closed) c.close().catch(() => {});
          return c;
        },
        (err: unknown) => {
          connecting.delete(address);
          throw err;
        },
      );
      connecting.set(address, p);
    }
    return p;
  }

  /** This broker's leader epoch of a `__transaction_state` partition: its epoch as coordinator (-1: not leading). */
  coordinatorEpoch(txnPartition: number): number {
    const r = this.replicas.get(TXN_STATE_TOPIC, txnPartition);
    return r?.role === 'leader' ? r.leaderEpoch : -1;
  }

  /** A marker from the coordinator of `txnPartition` at `epoch` was written here. */
  noteTxnCoordinator(txnPartition: number, epoch: number): void {
    if (epoch > (this.txnCoordinatorEpochs.get(txnPartition) ?? -1)) this.txnCoordinatorEpochs.set(txnPartition, epoch);
  }

  /**
   * TXN_APPEND or TXN_MARKER from the coordinator of `txnPartition` at `epoch`: refused (NOT_COORDINATOR)
   * once a newer coordinator is known, from etcd or from a marker it wrote here. Only a replaced
   * coordinator can still send either after its transaction ended (the live one waits for its appends
   * before the markers, and for the markers before the producer may begin again): such an append would
   * join the producer's next transaction, such a marker would end it, making its records visible early.
   */
  checkTxnCoordinator(txnPartition: number, epoch: number): void {
    const known = Math.max(this.states.get(TXN_STATE_TOPIC, txnPartition)?.value.leaderEpoch ?? -1, this.txnCoordinatorEpochs.get(txnPartition) ?? -1);
    if (epoch < known) {
      throw new TributaryError('NOT_COORDINATOR', { reason: 'a newer transaction coordinator has taken over', partition: txnPartition, coordinator_epoch: epoch, current: known });
    }
  }

  liveBrokers(): BrokerRegistration[] {
    return this.registry.list();
  }

  requireLeader(topic: string, partition: number): Replica {
    return this.replicas.requireLeader(topic, partition);
  }

  /** The broker leading a partition of an internal topic (a coordinator), or NOT_COORDINATOR-worthy absence. */
  leaderAddress(topic: string, partition: number): BrokerRegistration | undefined {
    return this.replicas.leaderOf(topic, partition);
  }

  isLeader(topic: string, partition: number): boolean {
    return this.replicas.isLeader(topic, partition);
  }

  /** isLeader of an internal topic's partition, for a coordinator deciding to answer here: as its ownership check, only once settled. */
  coordinatesHere(topic: string, partition: number): boolean {
    return this.replicas.isLeader(topic, partition) && this.registry.settled;
  }

  /** NOT_COORDINATOR naming the coordinator (the leader of the internal partition) when it is known. */
  notCoordinator(topic: string, partition: number): TributaryError {
    const leader = this.leaderAddress(topic, partition);
    if (!leader) return new TributaryError('COORDINATOR_LOADING', { reason: `${topic}[${partition}] has no leader` });
    const { host, port } = parseAddress(leader.advertisedAddress);
    return new TributaryError('NOT_COORDINATOR', { host, port });
  }

  /** Partitions without a live leader, as the controller sees them (0 on other brokers, so a sum counts each once). */
  offlinePartitions(): number {
    if (!this.election.isController) return 0;
    const live = new Set(this.registry.list().map((b) => b.id));
    return this.states.list().filter((e) => e.value.leader < 0 || !live.has(e.value.leader)).length;
  }

  status(): Record<string, unknown> {
    const brokers = this.registry.list().map((b) => ({ id: b.id, address: b.advertisedAddress, started_at: b.startedAt }));
    const live = new Set(brokers.map((b) => b.id));
    const partitions = this.states.list().map((e) => ({
      topic: e.topic,
      partition: e.partition,
      leader: e.value.leader,
      leader_epoch: e.value.leaderEpoch,
      replicas: e.value.replicas,
      isr: e.value.isr,
    }));
    return {
      mode: 'cluster',
      broker_id: this.config.brokerId,
      controller: this.election.controllerId ?? null,
      brokers,
      partitions,
      under_replicated: partitions.filter((p) => p.isr.length < p.replicas.length).length,
      leaderless: partitions.filter((p) => p.leader < 0 || !live.has(p.leader)).length,
    };
  }
}
