import client from 'prom-client';
import type http from 'node:http';
import net from 'node:net';
import tls from 'node:tls';
import { LocalMetadataStore, type MetadataStore, type TopicDefinition } from '../partition/metadata-store.js';
import { encodeFrame } from 'tributary-protocol/frame.js';
import { formatError } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { ClientConnection } from './client-connection.js';
import { type DirectReads, adoptDirectReads, brokerFrameReader } from './direct-reads.js';
import type { BrokerContext } from './command-context.js';
import type { BrokerConfig } from '../common/config.js';
import { type DataDirLock, lockDataDir } from './data-dir-lock.js';
import { allowedHostNames, createHealthServer, limitConnections } from './http-server.js';
import { AdminApi } from '../http/admin-api.js';
import { ApiClients, selfConnection } from '../http/api-clients.js';
import type { Logger } from '../common/logger.js';
import { BrokerMetrics } from '../common/metrics.js';
import { TopicManager } from '../partition/topic-manager.js';
import { ProducerIdAllocator } from '../partition/producer-ids.js';
import { AddressLimiter } from './limits.js';
import { standInKeyFromFile, standInKeyFromStore } from './scram-stand-in.js';
import { Security } from './security.js';
import { GroupCoordinator } from '../coordinator/group-coordinator.js';
import { type StoreWait, waitForStore } from '../common/wait-for-store.js';
import { GroupLog, LogOffsetStore, OFFSETS_TOPIC } from '../coordinator/group-log.js';
import { type InternalAppend, replicatedAppend } from '../partition/internal-log.js';
import type { OffsetStore } from '../coordinator/offset-store.js';
import { MemoryOffsetStore } from '../coordinator/memory-offset-store.js';
import { PgOffsetStore } from '../coordinator/pg-offset-store.js';
import { TransactionCoordinator } from '../txn/txn-coordinator.js';
import { ClusterNode } from '../cluster/cluster-node.js';
import { peerTls } from '../cluster/cluster-tls.js';
import { type ListenerTlsFiles, listenerTlsFiles, listenerTlsOptions } from './listener-tls.js';
import { KafkaListener } from '../kafka/listener.js';
import { registerClusterMetrics } from '../cluster/cluster-metrics.js';
import type { Replica } from '../cluster/replica-manager.js';
import { leaderGate, replicated } from './produce-commands.js';
import { TXN_STATE_TOPIC, TxnLog } from '../txn/txn-log.js';
import { LocalTxnTargets } from '../txn/txn-targets.js';
import { ClusterTxnTargets } from '../cluster/cluster-txn-targets.js';
import { MemberLeases } from '../cluster/member-leases.js';
import { TurnWrites } from './turn-writes.js';
import { ReplyBuffers, registerFramePoolMetrics, registerReplyBufferMetrics } from './reply-buffers.js';
import { FramePool } from '../storage/frame-pool.js';
import { partitionOffsets } from './partition-offsets.js';

type State = 'new' | 'recovering' | 'ready' | 'failed' | 'stopping' | 'stopped';

/**
 * The Kafka listener: TLS, authentication (SASL) and authorization as on the main port (docs/kafka.md,
 * "Authentication"), through the same Security (this.security, its KafkaBrokerContext.security).
 */
function kafkaListener(b: Broker, c: BrokerConfig, port: number, perAddress: AddressLimiter, mainConnections: () => number, files: ListenerTlsFiles | undefined): KafkaListener {
  // TLS as on the main port: the same certificate, CA and client-certificate rule.
  const tlsOptions = files === undefined ? undefined : listenerTlsOptions(files, c);
  return new KafkaListener(b, { host: c.kafkaHost ?? c.host, port, advertisedHost: c.kafkaAdvertisedHost ?? c.advertisedHost, advertisedPort: c.kafkaAdvertisedPort, perAddress, otherConnections: mainConnections, tls: tlsOptions });
}

function listen(server: net.Server | http.Server, port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve((server.address() as net.AddressInfo).port);
    });
  });
}

export class Broker implements BrokerContext {
  readonly metrics = new BrokerMetrics();
  readonly replyBuffers = new ReplyBuffers();
  readonly framePool = new FramePool();
  readonly turnWrites: TurnWrites;
  readonly store: MetadataStore;
  /** Cluster mode only: etcd membership, partition roles, replication. */
  readonly cluster: ClusterNode | undefined;
  readonly topics: TopicManager;
  readonly coordinator: GroupCoordinator;
  readonly transactions: TransactionCoordinator;
  readonly producerIds: ProducerIdAllocator;
  private readonly groupLog: GroupLog;
  /** Why recovery failed; the broker then stays up but unready, never serving partial state. */
  recoveryError: Error | undefined;
  /** While not ready: what it is doing or waiting for (/ready's body, not_ready's reason). */
  private notReadyReason = 'starting';
  /** Aborts the recovery's waits (an unreachable offset store) at stop() or the startup timeout. */
  private readonly startAbort = new AbortController();
  /** abortStart() was called: a recovery it ends was stopped, not failed. */
  private stopRequested = false;
  private readonly server: net.Server;
  /** The Kafka-protocol listener (--kafka-port), started once the broker is ready. */
  kafka: KafkaListener | undefined;
  /** Why there is no Kafka listener though `--kafka-port-if-free` asked for one (its port was taken). */
  kafkaSkipped: string | undefined;
  readonly security: Security;
  private readonly perAddress: AddressLimiter;
  private readonly health: http.Server;
  /** Accepts the HTTP port's connections for `health`, at most httpMaxConnections at once. */
  private readonly healthListener: net.Server;
  /** The SDK clients the admin API acts through (src/http/api-clients.ts). */
  private readonly apiClients: ApiClients;
  private readonly connections = new Set<ClientConnection>();
  private state: State = 'new';
  private boundPort = 0;
  private boundHealthPort = 0;
  private dataDirLock: DataDirLock | undefined;

  constructor(
    readonly config: BrokerConfig,
    readonly logger: Logger,
  ) {
    this.turnWrites = new TurnWrites((err) => logger.error({ err }, 'uncorking a reply socket failed'));
    this.cluster = config.cluster ? new ClusterNode(config, logger, this.metrics) : undefined;
    if (this.cluster) registerClusterMetrics(this.metrics, this.cluster);
    registerReplyBufferMetrics(this.metrics.registry, this.replyBuffers);
    registerFramePoolMetrics(this.metrics.registry, this.framePool);
    const topics = () => this.topics;
    new client.Gauge({
      name: 'tributary_failed_logs',
      help: 'Partition logs refusing appends after a failed fsync or write-back, until the broker restarts (docs/operations.md, "A full disk")',
      registers: [this.metrics.registry],
      collect() {
        let n = 0;
        for (const t of topics().list()) for (const p of t.partitions) if (p.log.failed) n++;
        this.set(n);
      },
    });
    this.store = this.cluster ? this.cluster.store : new LocalMetadataStore(config.dataDir);
    this.topics = new TopicManager(this.store, config, logger, this.metrics, this.framePool);
    // Cluster mode: coordinators append only as the partition's leader and answer once it is replicated.
    const internalAppend: InternalAppend | undefined = this.cluster
      ? replicatedAppend(
          (part) => leaderGate(this, part),
          (part, lastOffset, epoch) => replicated(this, part, lastOffset, epoch),
        )
      : undefined;
    this.groupLog = new GroupLog(() => this.topics.get(OFFSETS_TOPIC).partitions, internalAppend);
    if (config.offsetStore === 'postgres' && !config.offsetStorePostgresUrl) {
      throw new Error('invalid config: offsetStorePostgresUrl is required when offsetStore is postgres');
    }
    // Group coordinators move between brokers in a cluster: offsets kept in one broker's memory would not.
    if (config.offsetStore === 'memory' && config.cluster) {
      throw new Error('invalid config: offsetStore memory is for a standalone broker; a cluster needs log or postgres');
    }
    const offsetStore: OffsetStore =
      config.offsetStore === 'postgres'
        ? new PgOffsetStore({ connectionString: config.offsetStorePostgresUrl, partitionOf: (group) => this.groupLog.partitionFor(group) })
        : config.offsetStore === 'memory'
          ? new MemoryOffsetStore()
          : new LogOffsetStore(this.groupLog);
    this.coordinator = new GroupCoordinator({
      topics: this.topics,
      groupLog: this.groupLog,
      offsetStore,
      logger: logger.child({ component: 'group-coordinator' }),
      registry: this.metrics.registry,
      config: {
        joinWindowMs: config.groupJoinWindowMs,
        defaultSessionTimeoutMs: config.groupSessionTimeoutMs,
        minSessionTimeoutMs: config.groupMinSessionTimeoutMs,
        maxSessionTimeoutMs: config.groupMaxSessionTimeoutMs,
        defaultRebalanceTimeoutMs: config.groupRebalanceTimeoutMs,
        defaultAssignor: config.groupAssignor,
        offsetsRetentionMs: config.offsetsRetentionMs,
      },
      topicExists: (name) => this.store.getTopic(name) !== undefined,
      logOffsets: (topic, partition, timestamp) => partitionOffsets(this, topic, partition, timestamp),
    });
    this.producerIds = new ProducerIdAllocator(this.store);
    this.transactions = new TransactionCoordinator({
      topics: this.topics,
      producerIds: this.producerIds,
      log: new TxnLog(() => this.topics.get(TXN_STATE_TOPIC).partitions, internalAppend),
      targets: this.cluster
        ? new ClusterTxnTargets(this.cluster, this.topics, this.coordinator, (topic, partition, last, epoch) => replicated(this, this.topics.get(topic).partition(partition), last, epoch))
        : new LocalTxnTargets(this.topics, this.coordinator),
      logger: logger.child({ component: 'txn-coordinator' }),
      registry: this.metrics.registry,
      config: { defaultTimeoutMs: config.transactionTimeoutMs, maxTimeoutMs: config.maxTransactionTimeoutMs, idExpirationMs: config.transactionalIdExpirationMs },
    });
    this.security = new Security(config, logger.child({ component: 'security' }), this.cluster?.tls);
    this.security.onPasswordCheck = (ok) => this.metrics.passwordChecks.inc({ result: ok ? 'ok' : 'failed' });
    this.perAddress = new AddressLimiter(config.maxConnectionsPerAddress);
    const tlsFiles = listenerTlsFiles(config);
    // kafkaPortIfFree is a default (npm start's): an explicit kafkaPort replaces it.
    const kafkaPort = config.kafkaPort ?? config.kafkaPortIfFree;
    this.kafka = kafkaPort === undefined ? undefined : kafkaListener(this, config, kafkaPort, this.perAddress, () => this.connections.size, tlsFiles);
    this.server = this.createServer(tlsFiles);
    let self: ReturnType<typeof selfConnection> | undefined;
    const selfConn = () => (self ??= selfConnection(config, this.boundPort));
    this.apiClients = new ApiClients(
      () => selfConn().address,
      () => selfConn().tls,
    );
    const api = new AdminApi({ config, clients: this.apiClients, logger: logger.child({ component: 'admin-api' }), security: () => this.security.snapshot() });
    this.health = createHealthServer(this.metrics, () => (this.state === 'ready' ? { ready: true } : { ready: false, reason: this.unreadyReason() }), api, allowedHostNames(config), {
      headersMs: config.httpHeadersTimeoutMs,
      requestMs: config.httpRequestTimeoutMs,
      keepAliveMs: config.httpKeepAliveTimeoutMs,
    });
    // Its own reason: the metric has no listener label, and the main port's limit is another (docs/operations.md).
    this.healthListener = limitConnections(this.health, config.httpMaxConnections, () => this.metrics.connectionsRejected.inc({ reason: 'http_too_many_connections' }));
  }

  get brokerId(): number {
    return this.config.brokerId;
  }

  get port(): number {
    return this.boundPort;
  }

  get healthPort(): number {
    return this.boundHealthPort;
  }

  get advertised(): { host: string; port: number } {
    return { host: this.config.advertisedHost ?? this.config.host, port: this.config.advertisedPort ?? this.boundPort };
  }

  get ready(): boolean {
    return this.state === 'ready';
  }

  /**
   * Locks the data directory, listens (so /live and PROTOCOL_INFO answer during recovery), then
   * recovers, then serves.
   */
  async start(): Promise<void> {
    if (this.state !== 'new') throw new Error(`broker already ${this.state}`);
    this.state = 'recovering';
    try {
      // Before anything binds or opens a log: a second broker on the directory must touch nothing.
      this.dataDirLock = await lockDataDir(this.config.dataDir, { warn: (msg, holder) => this.logger.warn({ dataDir: this.config.dataDir, pid: holder.pid }, msg) });
    } catch (err) {
      this.state = 'stopped'; // nothing to stop
      throw err;
    }
    this.boundHealthPort = await listen(this.healthListener, this.config.healthPort, this.config.host);
    this.boundPort = await listen(this.server, this.config.port, this.config.host);
    // Bound now, so a cluster registration can name it; its requests wait for readiness (kafka-connection.ts).
    if (this.kafka) {
      try {
        await this.kafka.start();
      } catch (err) {
        if (this.config.kafkaPort !== undefined || this.config.kafkaPortIfFree === undefined || (err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err;
        this.kafkaSkipped = `port ${this.config.kafkaPortIfFree} in use`;
        this.kafka = undefined;
        this.logger.warn({ port: this.config.kafkaPortIfFree }, 'Kafka listener not started: its port is in use (kafkaPortIfFree)');
      }
      if (this.kafka && this.cluster) this.cluster.kafkaAddress = `${this.kafka.advertised.host}:${this.kafka.advertised.port}`;
    }
    const t0 = Date.now();
    const limit = this.config.startupTimeoutMs;
    const timer =
      limit > 0
        ? setTimeout(() => this.startAbort.abort(new Error(`not ready after startupTimeoutMs ${limit}: ${this.notReadyReason}`)), limit)
        : undefined;
    try {
      await this.recover();
    } catch (err) {
      // Stay up and unready: serving with groups or offsets missing would be worse than not serving.
      if (this.state !== 'recovering') return; // stopped while recovering
      // A recovery ended by the startup timeout fails for that reason, not for the abort it caused.
      const reason = this.startAbort.signal.aborted ? (this.startAbort.signal.reason as Error) : (err as Error);
      this.state = 'failed';
      this.recoveryError = reason;
      if (this.stopRequested) {
        // A stop (SIGTERM) ended the recovery's waits: no failure, and stop() runs next.
        this.logger.info({ reason: reason.message }, 'recovery stopped: the broker is stopping');
        return;
      }
      this.logger.error({ err: reason }, this.config.exitOnStartupFailure ? 'recovery failed' : 'recovery failed; the broker stays unready');
      return;
    } finally {
      clearTimeout(timer);
    }
    this.state = 'ready';
    this.logger.info({ port: this.boundPort, healthPort: this.boundHealthPort, kafkaPort: this.kafka?.port, dataDir: this.config.dataDir, recoveryMs: Date.now() - t0, topics: this.topics.list().length }, 'broker ready');
  }

  /** Recovery, step by step; each step says what the broker is doing while it is not ready. */
  private async recover(): Promise<void> {
    this.notReadyReason = 'recovering: opening the metadata store';
    // In a cluster, etcd may come up after the broker (a cold boot): waited for, not a failed start.
    await waitForStore(() => this.store.open(), this.storeWait(this.cluster ? 'the metadata store (etcd)' : 'the metadata store'));
    await this.loadScramStandInKey();
    this.notReadyReason = 'recovering: opening the topics';
    await this.topics.open();
    if (this.cluster) {
      this.notReadyReason = 'recovering: joining the cluster';
      await this.startCluster(this.cluster);
      return;
    }
    await this.ensureInternalTopics();
    this.notReadyReason = `recovering: loading groups and offsets (offset store ${this.config.offsetStore})`;
    await this.coordinator.start(this.storeWait());
    this.notReadyReason = 'recovering: transactions';
    // After the groups: finishing a decided transaction applies its offsets to them.
    await this.transactions.start();
  }

  /**
   * SCRAM's stand-in key, kept in the data directory or (a cluster's, shared) in etcd: before the Kafka port
   * serves, which it does once the broker is ready (docs/kafka.md "SCRAM-SHA-256").
   */
  private async loadScramStandInKey(): Promise<void> {
    if (!this.kafka || !this.security.enabled) return;
    this.notReadyReason = 'recovering: reading the SCRAM stand-in key';
    const cluster = this.cluster;
    if (!cluster) return this.security.useScramStandInKey(await standInKeyFromFile(this.config.dataDir));
    await waitForStore(async () => this.security.useScramStandInKey(await standInKeyFromStore(cluster.store, cluster.store.prefix)), this.storeWait('the metadata store (etcd)'));
  }

  /** What /ready and not_ready say while the broker is not ready. */
  private unreadyReason(): string {
    if (this.state === 'failed') return `recovery failed: ${this.recoveryError?.message ?? 'unknown error'}`;
    if (this.state === 'stopping' || this.state === 'stopped') return 'shutting down';
    return this.notReadyReason;
  }

  /** The start failed (recovery error or startupTimeoutMs): the CLI exits with exitOnStartupFailure. */
  get startFailed(): boolean {
    return this.state === 'failed' && !this.stopRequested;
  }

  /**
   * Cluster mode: follow topics created elsewhere, join (registration, partition roles, controller
   * election). The internal topics are created by the controller once enough brokers are up.
   */
  private async startCluster(cluster: ClusterNode): Promise<void> {
    this.topics.followStore(() => {});
    // Every coordinator deletes a deleted topic's offsets of the groups it coordinates (the only writer of
    // their partition); after followStore's listener, so commits already find no topic.
    this.store.events.on('topic-deleted', (def: TopicDefinition) => {
      this.coordinator
        .deleteTopicOffsets(def.name)
        .catch((err: unknown) => this.logger.error({ err, topic: def.name }, 'deleting the committed offsets of a deleted topic failed'));
    });
    // A coordinator that has just noticed a pause of its own process answers NOT_COORDINATOR, and takes no
    // decision, until etcd confirms its lease (settled): its partitions may have moved while it was frozen,
    // and heartbeats queued meanwhile may not have been read.
    const leaseHeld = () => cluster.registry.settled;
    this.coordinator.enableOwnership(
      (p) => cluster.notCoordinator(OFFSETS_TOPIC, p),
      () => this.topics.tryGet(OFFSETS_TOPIC) !== undefined,
      leaseHeld,
      (p) => (cluster.replicas.get(OFFSETS_TOPIC, p)?.role !== 'leader' ? false : leaseHeld() ? true : undefined),
      // A PostgreSQL commit is fenced by nothing else: a broker cut off from etcd (not paused) would keep
      // taking commits after its groups moved; once its lease may have expired, it takes none.
      () => cluster.registry.confirmed,
    );
    this.transactions.enableOwnership(
      (p) => cluster.notCoordinator(TXN_STATE_TOPIC, p),
      () => this.topics.tryGet(TXN_STATE_TOPIC) !== undefined,
      leaseHeld,
    );
    // Fenced reads of partitions led here, for groups another broker coordinates (docs/architecture.md).
    cluster.memberLeases = new MemberLeases((group, topic, member) => cluster.askMemberLease(group, this.coordinator.partitionFor(group), topic, member));
    this.notReadyReason = `recovering: opening the offset store (${this.config.offsetStore})`;
    await this.coordinator.startOwned(this.storeWait());
    this.notReadyReason = 'recovering: joining the cluster';
    this.topics.hosts = (topic, partition) => cluster.hosts(topic, partition);
    await cluster.start(this.topics, this.advertised, () => this.ensureClusterTopics(cluster));
    // A coordinator is the leader of its internal partition: it loads the partition on leading and drops
    // it on losing the lead.
    const follow = (topic: string, load: (p: number) => Promise<void>, unload: (p: number) => void) => {
      const apply = (r: Replica) => {
        if (r.topic !== topic) return;
        if (r.role === 'leader') load(r.id).catch((err: unknown) => this.logger.error({ err, topic, partition: r.id }, 'loading a coordinator partition failed'));
        else unload(r.id);
      };
      cluster.replicas.events.on('role', apply);
      for (const r of cluster.replicas.all()) apply(r);
    };
    // A broker that stops leading a partition wakes its parked reads: a long poll or a STREAM there ends
    // NOT_LEADER now rather than when its wait runs out (docs/protocol.md, "Reading").
    cluster.replicas.events.on('role', (r: Replica) => {
      if (r.role !== 'leader') r.partition.wakeAll();
    });
    follow(OFFSETS_TOPIC, (p) => this.coordinator.loadPartition(p), (p) => this.coordinator.unloadPartition(p));
    follow(TXN_STATE_TOPIC, (p) => this.transactions.loadPartition(p), (p) => this.transactions.unloadPartition(p));
  }

  /** How recovery waits for an unreachable store: retried until the start is given up, each failure on /ready and in the log. */
  private storeWait(what = `the offset store (${this.config.offsetStore})`): StoreWait {
    return {
      signal: this.startAbort.signal,
      onRetry: (err, attempt, delayMs) => {
        this.notReadyReason = `waiting for ${what}: ${err.message}; attempt ${attempt}, next in ${delayMs} ms`;
        this.logger.warn({ store: what, attempt, delayMs, reason: err.message }, `${what} unavailable; retrying`);
      },
    };
  }

  /** Controller: internal topics once `internalReplicationFactor` brokers are live; states of every topic. */
  private async ensureClusterTopics(cluster: ClusterNode): Promise<void> {
    const rf = this.config.internalReplicationFactor;
    if (cluster.liveBrokers().length >= rf) {
      for (const [name, partitions] of [
        [OFFSETS_TOPIC, this.config.offsetsTopicPartitions],
        [TXN_STATE_TOPIC, this.config.transactionStatePartitions],
      ] as const) {
        if (!this.topics.tryGet(name)) {
          await this.topics.create(
            { name, partitions, replicationFactor: rf, idempotent: false, partitioner: 'hash_key', retentionHours: -1, retentionBytes: -1, cleanupPolicy: 'compact' },
            { allowInternal: true },
          );
        }
      }
    }
    // A topic whose creator died between its definition and its partition states gets them here (and a
    // re-created one loses states its deleted namesake left).
    await cluster.repairPartitionStates(this.topics.list());
  }

  private async ensureInternalTopics(): Promise<void> {
    await this.ensureInternalTopic(OFFSETS_TOPIC, this.config.offsetsTopicPartitions);
    await this.ensureInternalTopic(TXN_STATE_TOPIC, this.config.transactionStatePartitions);
  }

  private async ensureInternalTopic(name: string, partitions: number): Promise<void> {
    if (this.topics.tryGet(name)) return;
    await this.topics.create(
      {
        name,
        partitions,
        replicationFactor: 1,
        idempotent: false,
        partitioner: 'hash_key',
        retentionHours: -1,
        retentionBytes: -1,
        cleanupPolicy: 'compact',
      },
      { allowInternal: true },
    );
  }

  /** TLS (1.2+, optional client certificates) when a certificate and key are configured, plain TCP otherwise. */
  private createServer(files: ListenerTlsFiles | undefined): net.Server {
    const c = this.config;
    // Cluster TLS (docs/operations.md "Securing a cluster"): peers connect to this listener too.
    const peers = this.cluster ? this.cluster.tls : peerTls(c);
    if (files === undefined) {
      // Accepted paused: the connection reads through its FrameReader once set up (direct-reads.ts).
      return net.createServer({ pauseOnConnect: true }, (accepted) => {
        const reads: DirectReads = { reader: brokerFrameReader(c.maxFrameBytes, this.framePool?.take), onRead: undefined, limit: undefined };
        const adopted = adoptDirectReads(accepted, reads);
        const socket = adopted ?? accepted.resume();
        // Per-address limit before anything else: a refused client costs one short write.
        const address = socket.remoteAddress ?? '';
        if (!this.perAddress.tryAcquire(address)) return this.refuse(socket, new TributaryError('too_many_connections', { max: c.maxConnectionsPerAddress, per: 'address' }));
        socket.once('close', () => this.perAddress.release(address));
        this.onConnection(socket, adopted && reads);
      });
    }
    const server = tls.createServer(
      {
        ...listenerTlsOptions(files, c),
        // Client certificates may come from the clients' CA or, from peers, the inter-broker CA.
        ca: files.ca === undefined && peers === undefined ? undefined : [...(files.ca === undefined ? [] : [files.ca]), ...(peers ? [peers.ca] : [])],
        requestCert: files.ca !== undefined || peers !== undefined,
        handshakeTimeout: Math.min(c.frameTimeoutMs, 10_000),
      },
      (socket) => {
        // In a TLS cluster a certificate that does not verify is refused even where client certificates
        // are optional: a broker from another CA must not get in as a plain client of this one.
        if (peers && !socket.authorized && socket.getPeerX509Certificate() !== undefined) {
          this.metrics.connectionsRejected.inc({ reason: 'tls_error' });
          this.logger.warn({ remote: `${socket.remoteAddress}:${socket.remotePort}`, reason: String(socket.authorizationError) }, 'refused a client certificate that does not verify');
          socket.destroy();
          return;
        }
        this.onConnection(socket);
      },
    );
    server.on('tlsClientError', (err, socket) => {
      this.metrics.connectionsRejected.inc({ reason: 'tls_error' });
      this.logger.debug({ remote: `${socket.remoteAddress}:${socket.remotePort}`, reason: err.message }, 'TLS handshake failed');
    });
    // A plain TCP listener in front: the per-address limit is checked on the raw connection, before any
    // TLS state is allocated or a handshake runs, so a flood is closed at the cost of an accept.
    return net.createServer((raw) => {
      const address = raw.remoteAddress ?? '';
      if (!this.perAddress.tryAcquire(address)) {
        this.metrics.connectionsRejected.inc({ reason: 'too_many_connections' });
        raw.on('error', () => {});
        raw.destroy();
        return;
      }
      raw.once('close', () => this.perAddress.release(address));
      server.emit('connection', raw);
    });
  }

  private refuse(socket: net.Socket, err: TributaryError): void {
    this.metrics.connectionsRejected.inc({ reason: err.code });
    socket.on('error', () => {});
    socket.end(encodeFrame(formatError(err)));
    setTimeout(() => socket.destroy(), 1000).unref();
  }

  /** SIGHUP: new users and ACLs, and the open streams they no longer allow ended (`reason=unauthorized`). */
  reloadSecurity(users: BrokerConfig['users'], acls: BrokerConfig['topicAcls'], groupAcls: BrokerConfig['groupAcls']): void {
    this.security.reload(users, acls, groupAcls);
    for (const c of this.connections) c.revalidateStream((cmd, conn, req) => this.security.authorize(cmd, conn, req));
  }

  /** Refuses requests that cannot be served in the current state; undefined when the request may run. */
  admission(command: string): TributaryError | undefined {
    if (this.state === 'ready') return undefined;
    if ((this.state === 'recovering' || this.state === 'failed') && (command === 'PROTOCOL_INFO' || command === 'NEGOTIATE' || command === 'HELP')) return undefined;
    return this.state === 'recovering' || this.state === 'failed' ? new TributaryError('not_ready', { reason: this.unreadyReason() }) : new TributaryError('shutting_down');
  }

  private onConnection(socket: net.Socket, reads?: DirectReads): void {
    // One limit for both ports (docs/kafka.md): the Kafka listener's connections count here too.
    if (this.connections.size + (this.kafka?.connectionCount ?? 0) >= this.config.maxConnections || this.state === 'stopping' || this.state === 'stopped') {
      const err = this.state === 'stopping' || this.state === 'stopped' ? new TributaryError('shutting_down') : new TributaryError('too_many_connections', { max: this.config.maxConnections });
      this.refuse(socket, err);
      return;
    }
    const conn = new ClientConnection(socket, this, (cmd, c, req) => this.admission(cmd) ?? this.security.gate(cmd, c, req), (c) => {
      this.connections.delete(c);
      this.countConnections();
    }, reads);
    this.security.attach(conn, socket);
    this.connections.add(conn);
    this.countConnections();
  }

  /** `tributary_connections`: both ports, as `--max-connections` counts them. */
  private countConnections(): void {
    this.metrics.connections.set(this.connections.size + (this.kafka?.connectionCount ?? 0));
  }

  /** Graceful: stop accepting, answer what is in flight, end streams, fsync and close every log. */
  /** Ends the recovery's waits (e.g. for an unreachable offset store): the start fails and stop() can run. */
  abortStart(reason = 'stopped during recovery'): void {
    this.stopRequested = true;
    if (!this.startAbort.signal.aborted) this.startAbort.abort(new Error(reason));
  }

  async stop(reason = 'stop requested'): Promise<void> {
    this.abortStart();
    if (this.state === 'stopping' || this.state === 'stopped') return;
    this.state = 'stopping';
    this.cluster?.beginClose();
    this.logger.info({ reason }, 'broker stopping');
    await this.apiClients.close();
    // One deadline for both ports: --shutdown-timeout-ms bounds the whole drain (docs/operations.md, "Shutdown").
    const timeoutMs = this.config.shutdownTimeoutMs;
    const deadline = performance.now() + timeoutMs;
    const kafkaCut = (await this.kafka?.stop(timeoutMs)) ?? 0;
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.topics.beginClose();
    const undrained = new Set(this.connections);
    const drain = Promise.all([...undrained].map((c) => c.shutdown().finally(() => undrained.delete(c))));
    const timeout = new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, deadline - performance.now())).unref());
    await Promise.race([drain, timeout]);
    if (undrained.size > 0 || kafkaCut > 0) {
      this.logger.warn({ shutdownTimeoutMs: timeoutMs, connections: undrained.size, kafkaConnections: kafkaCut }, 'shutdown timeout expired: cutting connections with requests still unanswered');
    }
    for (const c of this.connections) c.destroy('broker stopped');
    // Before the coordinators stop: they wait for their writes, which may wait for journal space.
    this.topics.giveUpJournalWhenFull();
    await closed;
    await this.transactions.stop();
    await this.coordinator.stop();
    await this.cluster?.close();
    await this.topics.close();
    if (!this.cluster) await this.store.close();
    const healthClosed = new Promise<void>((resolve) => this.healthListener.close(() => resolve()));
    // Live tails (Server-Sent Events) never end by themselves.
    this.health.closeAllConnections();
    this.health.close();
    await healthClosed;
    await this.dataDirLock?.release();
    this.state = 'stopped';
    this.logger.info('broker stopped');
  }
}
