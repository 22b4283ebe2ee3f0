import { z } from 'zod';
import { groupAclKeyProblem } from './group-acls.js';

const flushModes = ['always', 'interval', 'os'] as const;

export const PERMISSIONS = ['admin', 'topic.read', 'topic.write', 'group', 'transaction'] as const;
export type Permission = (typeof PERMISSIONS)[number];

const usersEntry = z
  .object({
    /** base64 scrypt(token, salt) */
    hash: z.string().min(1),
    /** base64, random per user */
    salt: z.string().min(1),
    permissions: z.array(z.enum(PERMISSIONS)).default([]),
    /** SCRAM-SHA-256 keys of the same token (the Kafka port's SCRAM), base64; absent for users added before them. */
    scram: z
      .object({ salt: z.string().min(1), iterations: z.number().int().min(4096), storedKey: z.string().min(1), serverKey: z.string().min(1) })
      .strict()
      .optional(),
  })
  .strict();

const topicAcl = z.object({ read: z.array(z.string()).optional(), write: z.array(z.string()).optional() }).strict();

/**
 * The longest delay a Node timer takes (a longer one fires after 1 ms): every setting used as a timer's
 * delay is at most this. Above it --auth-timeout-ms closed every connection at once, --retention-check-ms
 * ran the retention pass every millisecond and --flush-interval-ms left the broker unready. The group
 * timeouts are bound too (a SYNC waits out the rebalance timeout on a timer of its own). Settings only
 * compared with clocks (segmentMs, the retentions, the expirations) or run through the coordinators'
 * scheduler alone, which steps through long waits (offsetsRetentionMs), are not.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;
/** storage/log-options.ts's MAX_SEGMENT_BYTES (positions are u32 in the index): above it every topic create failed. */
export const MAX_SEGMENT_BYTES = 0x7fffffff;
/** The most retention_hours CREATE takes (docs/protocol.md), so a topic's default is one it could be given. */
export const MAX_RETENTION_HOURS = 1_000_000;

/**
 * The most record bytes one read answer holds, on both ports (CONSUME, STREAM, REPLICA_FETCH, Kafka's
 * Fetch): the frame size less room for the answer's own fields, 1 MiB or half of a smaller frame
 * (docs/protocol.md, CONSUME's `max_bytes`). A fixed 1 MiB left nothing under `--max-frame-bytes` of 1 MiB
 * or less, and every answer one record (or one Kafka batch).
 */
export function readBytesLimit(maxFrameBytes: number): number {
  return maxFrameBytes - Math.min(1024 * 1024, Math.floor(maxFrameBytes / 2));
}

/** A DNS name (or an IPv4 address, allowed anyway): letters, digits, `-` and `_` in dot-separated labels. */
const HOST_NAME = /^(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*$/i;

/** Every broker setting with its default; the CLI merges flags > TRIBUTARY_* env > config file > these. */
export const brokerConfigSchema = z
  .object({
    host: z.string().min(1).default('127.0.0.1'),
    port: z.number().int().min(0).max(65535).default(9000),
    healthPort: z.number().int().min(0).max(65535).default(9080),
    /** Address clients are told to use (METADATA, FIND_COORDINATOR); defaults to host:port. */
    advertisedHost: z.string().min(1).optional(),
    /**
     * Host names, comma-separated, the admin API and console answer to besides IP addresses, localhost,
     * `host` and `advertisedHost`: any other Host header is refused (DNS rebinding; docs/http-api.md).
     */
    httpAllowedHosts: z
      .string()
      .min(1)
      .superRefine((v, ctx) => {
        // The Host header's name is compared without its port: an entry with a port or a scheme never matched.
        // An empty entry (a trailing comma) names nothing and is skipped, as the listener's parse skips it.
        const bad = v.split(',').find((n) => n.trim() !== '' && !HOST_NAME.test(n.trim()));
        if (bad !== undefined) ctx.addIssue({ code: 'custom', message: `${JSON.stringify(bad.trim())} is not a host name: expected names only, comma-separated, without scheme, port or path (console.example,ops.example)` });
      })
      .optional(),
    /**
     * Connections the HTTP port holds at once (API, console, tails, health, metrics); past it a new one gets
     * 503 and is closed. Each held a socket without bound (docs/http-api.md, "Limits").
     */
    httpMaxConnections: z.number().int().min(1).default(1024),
    /**
     * The HTTP port's timeouts (docs/http-api.md, "Limits"): a request's line and headers must arrive within
     * httpHeadersTimeoutMs and the whole request (its body too) within httpRequestTimeoutMs, both counted from
     * its first byte (a new connection's: from its accept), or it gets 408 and is closed; a connection idle
     * after a response is closed after httpKeepAliveTimeoutMs (and a second Node adds). They bound what a
     * client sends, never a response: a live tail streams on. The main port's frameTimeoutMs (30 s) bounded
     * both, and Node's keep-alive timeout was not a setting.
     */
    httpHeadersTimeoutMs: z.number().int().min(100).max(MAX_TIMER_MS).default(5_000),
    httpRequestTimeoutMs: z.number().int().min(100).max(MAX_TIMER_MS).default(10_000),
    httpKeepAliveTimeoutMs: z.number().int().min(100).max(MAX_TIMER_MS).default(5_000),
    advertisedPort: z.number().int().min(1).max(65535).optional(),
    /** A second listener speaking the Kafka protocol (docs/kafka.md); off unless a port is given (0: any free port). */
    kafkaPort: z.number().int().min(0).max(65535).optional(),
    /**
     * Without kafkaPort: the Kafka listener on this port if it is free, else none (the listening line says
     * which). `npm start` gives 9092, so a first broker speaks Kafka without failing where something else
     * has that port; an explicit kafkaPort replaces it.
     */
    kafkaPortIfFree: z.number().int().min(1).max(65535).optional(),
    /** Where the Kafka listener binds; `host` when absent. */
    kafkaHost: z.string().min(1).optional(),
    /** The host Kafka clients are told to use (Metadata); advertisedHost, else the Kafka listener's host, when absent. */
    kafkaAdvertisedHost: z.string().min(1).optional(),
    /** The port Kafka clients are told to use (a proxy or NAT in front of the listener); the bound port when absent. */
    kafkaAdvertisedPort: z.number().int().min(1).max(65535).optional(),
    brokerId: z.number().int().min(0).default(0),
    dataDir: z.string().min(1).default('./data'),
    logLevel: z.enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']).default('info'),
    /** Log lines on stderr: readable (pretty) on a terminal and JSON otherwise (auto), or always one of them. */
    logFormat: z.enum(['auto', 'pretty', 'json']).default('auto'),
    maxFrameBytes: z.number().int().min(1024).max(1024 * 1024 * 1024).default(64 * 1024 * 1024),
    maxRecordBytes: z.number().int().min(1).default(8 * 1024 * 1024),
    maxConnections: z.number().int().min(1).default(10_000),
    /** A connection with no traffic for this long is closed. */
    idleTimeoutMs: z.number().int().min(100).max(MAX_TIMER_MS).default(600_000),
    /** A frame that starts but does not complete within this time closes the connection (slow senders). */
    frameTimeoutMs: z.number().int().min(100).max(MAX_TIMER_MS).default(30_000),
    /** Replies queued for a client that does not read: past this the broker stops reading its requests. */
    maxPendingReplyBytes: z.number().int().min(1024).default(16 * 1024 * 1024),
    /** A client that stays blocked this long with a full reply queue is disconnected. */
    writeStallTimeoutMs: z.number().int().min(100).max(MAX_TIMER_MS).default(60_000),
    defaultPartitions: z.number().int().min(1).max(10_000).default(4),
    maxPartitions: z.number().int().min(1).max(100_000).default(10_000),
    flush: z.enum(flushModes).default('always'),
    flushIntervalMs: z.number().int().min(1).max(MAX_TIMER_MS).default(1000),
    /**
     * The journal (docs/architecture.md, "The journal"): logs under flush=always (the internal topics'
     * always) are durable with one write of a broker-wide file per round instead of an fsync per
     * partition, and fsync their segments every flushIntervalMs. For many partitions written at once; off
     * by default, where each append waits for its own segment's fsync (bench/README.md, "scale").
     */
    journal: z.boolean().default(false),
    segmentBytes: z.number().int().min(1024).max(MAX_SEGMENT_BYTES).default(128 * 1024 * 1024),
    /**
     * Memory for recently appended records kept for tail readers, over every partition together (each also
     * keeps at most 4 MiB); past it the oldest records of the least recently written partitions are read from
     * their segments instead. 0 turns the cache off.
     */
    tailCacheBytes: z.number().int().min(0).default(128 * 1024 * 1024),
    /**
     * The layout new appends are stored in (docs/architecture.md "Stored batches"): append blocks (one per
     * produce batch frame), or per-record records as earlier versions wrote them. Segments hold both, so it
     * can change between starts.
     */
    storedLayout: z.enum(['records', 'blocks']).default('blocks'),
    /**
     * MiB the old generation of the broker process may grow by between full garbage collections while its
     * live heap is smaller than that (common/heap-headroom.ts); 0 leaves V8's own sizing. Set by the CLI's
     * `broker start`: the factor is process-wide.
     */
    heapHeadroomMb: z.number().int().min(0).max(65_536).default(128),
    segmentMs: z.number().int().min(1000).default(7 * 24 * 3600 * 1000),
    retentionHours: z.number().int().min(-1).max(MAX_RETENTION_HOURS).default(168),
    retentionBytes: z.number().int().min(-1).default(-1),
    retentionCheckMs: z.number().int().min(100).max(MAX_TIMER_MS).default(300_000),
    /**
     * How long a tombstone (an empty value) stays in a compacted topic once it is its key's latest record,
     * for topics whose definition sets no `delete_retention_ms` (the internal topics): Kafka's
     * log.cleaner.delete.retention.ms, 24 h. Replicas that fall behind further are rebuilt
     * (docs/architecture.md, "Compaction").
     */
    deleteRetentionMs: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).default(86_400_000),
    /** Maximum wait_ms a CONSUME may ask for. */
    maxWaitMs: z.number().int().min(0).max(MAX_TIMER_MS).default(30_000),
    streamKeepaliveMs: z.number().int().min(50).max(MAX_TIMER_MS).default(5_000),
    shutdownTimeoutMs: z.number().int().min(100).max(MAX_TIMER_MS).default(10_000),
    /** Recovery not done within this long fails the start (the broker stays unready, or exits with exitOnStartupFailure); 0: no limit. */
    startupTimeoutMs: z.number().int().min(0).max(MAX_TIMER_MS).default(0),
    /** A failed start (recovery error or startupTimeoutMs) exits the process with code 1, for service managers to restart it. */
    exitOnStartupFailure: z.boolean().default(false),
    /** Partitions of `__consumer_offsets`: a group's coordinator is the leader of hash(group) mod this. */
    offsetsTopicPartitions: z.number().int().min(1).max(1000).default(50),
    /** Cluster mode: topic definitions, partition states and brokers live in etcd (`etcd` endpoints). */
    cluster: z.boolean().default(false),
    /** etcd client URLs, comma-separated (`127.0.0.1:2379` or `http://...`). */
    etcd: z.string().min(1).optional(),
    etcdPrefix: z.string().min(1).default('/tributary/'),
    /** How long one etcd call may take before a metadata change fails with metadata_unavailable. */
    etcdRequestTimeoutMs: z.number().int().min(100).max(MAX_TIMER_MS).default(2000),
    /** A broker that stops renewing its lease for this long leaves the cluster and loses its leaderships. */
    brokerLeaseTtlSeconds: z.number().int().min(2).max(300).default(10),
    /** A follower this far behind the leader's log end leaves the ISR. */
    replicaLagMaxMs: z.number().int().min(100).max(MAX_TIMER_MS).default(10_000),
    replicaFetchWaitMs: z.number().int().min(10).max(30_000).default(500),
    /** acks=all: how long the reply waits for the in-sync replicas before request_timeout. */
    replicationTimeoutMs: z.number().int().min(1).max(MAX_TIMER_MS).default(30_000),
    /** acks=all fails with NOT_ENOUGH_REPLICAS below this many in-sync replicas. */
    minInsyncReplicas: z.number().int().min(1).default(1),
    /** CREATE without replication_factor (cluster mode). */
    defaultReplicationFactor: z.number().int().min(1).default(1),
    /** Replication of `__consumer_offsets` and `__transaction_state`: created once this many brokers are up. */
    internalReplicationFactor: z.number().int().min(1).default(3),
    /** Cluster mode with authentication on: the user other brokers connect as (needs `admin`). */
    interBrokerPrincipal: z.string().min(1).optional(),
    interBrokerToken: z.string().min(1).optional(),
    /** Allow an out-of-sync replica to become leader when no in-sync one is alive (may lose acknowledged records). */
    uncleanLeaderElection: z.boolean().default(false),
    /**
     * Give leadership back to each partition's preferred replica (the first of its replicas) once it is
     * in sync again, so faults do not leave one broker leading everything.
     */
    autoLeaderRebalance: z.boolean().default(true),
    /** How long a returning preferred replica must have been registered before it takes the lead back. */
    leaderRebalanceDelayMs: z.number().int().min(0).default(10_000),
    /**
     * How long the etcd tombstone of a deleted topic stays (docs/architecture.md, "Metadata"): a broker
     * down for longer moves that topic's directory aside at its next start instead of deleting it. Wall
     * time, measured by the controller; 0 keeps every tombstone for ever. Default 7 days.
     */
    deletedTopicRetentionMs: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).default(604_800_000),
    /** Partitions of `__transaction_state` (fixed once the topic exists). */
    transactionStatePartitions: z.number().int().min(1).max(1000).default(50),
    /** An open transaction older than this is aborted (INIT_PRODUCER_ID may ask for another, up to the max). */
    transactionTimeoutMs: z.number().int().min(1).max(MAX_TIMER_MS).default(60_000),
    maxTransactionTimeoutMs: z.number().int().min(1).max(MAX_TIMER_MS).default(900_000),
    /**
     * Segment files held open at most, over every partition (an LRU; idle, fsynced segments close and reopen
     * on their next use). Transient files and sockets come on top: set the process's fd limit above it.
     */
    maxOpenSegmentFiles: z.number().int().min(8).default(1000),
    /** Partitions opened (recovered) or closed at once at start and shutdown. */
    partitionOpenConcurrency: z.number().int().min(1).max(1024).default(32),
    /** A transactional id idle this long (no transaction open, no request) is forgotten; Kafka's default, 7 days. */
    transactionalIdExpirationMs: z.number().int().min(1).default(604_800_000),
    /** Where committed offsets live: the internal log, PostgreSQL, or memory (not durable: tests only). */
    offsetStore: z.enum(['log', 'postgres', 'memory']).default('log'),
    // A URL, checked here: pg read 'this is not a url' as a host named "base" and retried it forever.
    offsetStorePostgresUrl: z
      .string()
      .min(1)
      .superRefine((u, ctx) => {
        if (/^postgres(ql)?:\/\//.test(u) && URL.canParse(u)) return;
        // A postgres:// URL whose port is out of range is one still: say what is wrong with it.
        const port = /^postgres(ql)?:\/\/(?:[^@/?#]*@)?(?:\[[^\]]*\]|[^:/?#]*):(\d+)(?:[/?#]|$)/.exec(u)?.[2];
        const bad = port !== undefined && (Number(port) < 1 || Number(port) > 65535);
        ctx.addIssue({ code: 'custom', message: bad ? `its port ${port} is out of range (1 to 65535)` : 'expected a postgres:// or postgresql:// URL' });
      })
      .optional(),
    groupJoinWindowMs: z.number().int().min(0).max(60_000).default(30),
    groupSessionTimeoutMs: z.number().int().min(1).max(MAX_TIMER_MS).default(10_000),
    groupMinSessionTimeoutMs: z.number().int().min(1).max(MAX_TIMER_MS).default(100),
    groupMaxSessionTimeoutMs: z.number().int().min(1).max(MAX_TIMER_MS).default(300_000),
    groupRebalanceTimeoutMs: z.number().int().min(1).max(MAX_TIMER_MS).default(60_000),
    groupAssignor: z.enum(['range', 'roundrobin', 'sticky', 'cooperative-sticky']).default('cooperative-sticky'),
    /**
     * A group without members (and its committed offsets) is deleted this long after it became empty or
     * last had an offset committed, whichever is later (Kafka's offsets.retention.minutes, KIP-211: 7 days);
     * 0 keeps every group for ever.
     */
    offsetsRetentionMs: z.number().int().min(0).default(604_800_000),
    // ---- security (docs/security.md) ----
    /** PEM certificate and key files: when both are set the client listener speaks TLS (1.2 or later) only. */
    tlsCert: z.string().min(1).optional(),
    tlsKey: z.string().min(1).optional(),
    /** PEM CA bundle that client certificates must chain to (mTLS). */
    tlsCa: z.string().min(1).optional(),
    /** Refuse TLS clients without a certificate signed by tlsCa. */
    tlsRequireClientCert: z.boolean().default(false),
    /**
     * Cluster mode with TLS (docs/operations.md "Securing a cluster"): the PEM CA bundle that brokers'
     * certificates are issued by. Each broker checks its peers' listener certificates against it, and
     * only a connection whose client certificate it issued may send broker-to-broker commands.
     */
    interBrokerTlsCa: z.string().min(1).optional(),
    /** The client certificate and key this broker presents to its peers; default tlsCert and tlsKey. */
    interBrokerTlsCert: z.string().min(1).optional(),
    interBrokerTlsKey: z.string().min(1).optional(),
    /** PEM CA bundle etcd's server certificate must chain to: the etcd endpoints are then https. */
    etcdTlsCa: z.string().min(1).optional(),
    /** Client certificate and key for etcd (`--client-cert-auth`); they need etcdTlsCa. */
    etcdTlsCert: z.string().min(1).optional(),
    etcdTlsKey: z.string().min(1).optional(),
    /** Every command but PROTOCOL_INFO, NEGOTIATE, HELP and AUTH needs `AUTH principal= token=` first. */
    authentication: z.boolean().default(false),
    /** principal → salted scrypt hash of its token and its permissions (`tributary user add` writes these). */
    users: z.record(z.string().min(1).max(256), usersEntry).default({}),
    /** topic → principals allowed to read / write it, on top of their permissions. */
    topicAcls: z.record(z.string().min(1), topicAcl).default({}),
    /**
     * group id, or prefix `<prefix>*`, → principals allowed to use the groups it matches (`*`: any
     * authenticated one), on top of the `group` permission; an exact id beats a prefix, a longer prefix a
     * shorter one (common/group-acls.ts). A group no entry matches is open to every principal with `group`.
     */
    groupAcls: z.record(z.string().min(1), z.array(z.string().min(1))).default({}),
    /** A connection that has not authenticated within this time is closed (authentication on). */
    authTimeoutMs: z.number().int().min(100).max(MAX_TIMER_MS).default(10_000),
    /** Connections from one client IP address at once; 0 = unlimited. */
    maxConnectionsPerAddress: z.number().int().min(0).default(0),
    /** Requests per second per connection (token bucket, burst of one second); past it `ERROR: throttled`. 0 = unlimited. */
    maxRequestsPerSecondPerConnection: z.number().int().min(0).default(0),
    /** Largest binary batch frame accepted (`ERROR: record_too_large`); 0 = up to maxFrameBytes. */
    maxBatchBytes: z.number().int().min(0).default(0),
  })
  .strict()
  .superRefine((c, ctx) => {
    // Node refuses a server whose headers may take longer than the whole request (ERR_OUT_OF_RANGE).
    if (c.httpHeadersTimeoutMs > c.httpRequestTimeoutMs) {
      ctx.addIssue({ code: 'custom', path: ['httpHeadersTimeoutMs'], message: `must be <= httpRequestTimeoutMs (${c.httpRequestTimeoutMs})` });
    }
    // The listener's TLS (the files themselves are read at start: broker/listener-tls.ts). Found only there,
    // these were errors of the Broker (exit 1) without their source.
    if ((c.tlsCert === undefined) !== (c.tlsKey === undefined)) {
      const [given, missing] = c.tlsCert === undefined ? ['tlsKey', 'tlsCert'] : ['tlsCert', 'tlsKey'];
      ctx.addIssue({ code: 'custom', path: [given], message: `needs ${missing} too (the listener's certificate and key are given together)` });
    } else if (c.tlsCa !== undefined && c.tlsCert === undefined) {
      // Before: the broker started with TLS off, clients' certificates never asked for.
      ctx.addIssue({ code: 'custom', path: ['tlsCa'], message: 'needs tlsCert and tlsKey: without them the listener does not speak TLS' });
    } else if (c.tlsRequireClientCert && (c.tlsCert === undefined || c.tlsCa === undefined)) {
      ctx.addIssue({ code: 'custom', path: ['tlsRequireClientCert'], message: 'needs tlsCert, tlsKey and tlsCa' });
    }
    // Two listeners on one port: the second failed with EADDRINUSE, naming neither setting.
    const ports: Array<'port' | 'healthPort' | 'kafkaPort'> = ['port', 'healthPort', 'kafkaPort'];
    for (const [i, a] of ports.entries()) {
      // The Kafka listener may bind another address (kafkaHost), where the same number is another port.
      const apart = (x: string) => x === 'kafkaPort' && c.kafkaHost !== undefined && c.kafkaHost !== c.host;
      const same = ports.slice(0, i).find((b) => c[a] !== undefined && c[a] !== 0 && c[a] === c[b] && !apart(a) && !apart(b));
      if (same) ctx.addIssue({ code: 'custom', path: [a], message: `is the same port as ${same} (${c[same]}): each listener needs its own` });
    }
    // Each default must be one its own bound allows: else every request relying on it failed, naming a
    // parameter the client never sent (INIT_PRODUCER_ID's transaction_timeout_ms), or got past the bound
    // (a CREATE without partitions made more than maxPartitions).
    type NumberKey = { [K in keyof typeof c]-?: (typeof c)[K] extends number ? K : never }[keyof typeof c];
    const atMost = (key: NumberKey, bound: NumberKey) => {
      if (c[key] > c[bound]) ctx.addIssue({ code: 'custom', path: [key], message: `must be <= ${bound} (${c[bound]})` });
    };
    const atLeast = (key: NumberKey, bound: NumberKey) => {
      if (c[key] < c[bound]) ctx.addIssue({ code: 'custom', path: [key], message: `must be >= ${bound} (${c[bound]})` });
    };
    for (const key of Object.keys(c.groupAcls)) {
      const problem = groupAclKeyProblem(key);
      if (problem) ctx.addIssue({ code: 'custom', path: ['groupAcls', key], message: problem });
    }
    atMost('transactionTimeoutMs', 'maxTransactionTimeoutMs');
    atMost('defaultPartitions', 'maxPartitions');
    atMost('groupMinSessionTimeoutMs', 'groupMaxSessionTimeoutMs');
    if (c.groupMinSessionTimeoutMs <= c.groupMaxSessionTimeoutMs) {
      atLeast('groupSessionTimeoutMs', 'groupMinSessionTimeoutMs');
      atMost('groupSessionTimeoutMs', 'groupMaxSessionTimeoutMs');
    }
  });

export type BrokerConfig = z.infer<typeof brokerConfigSchema>;
export type BrokerConfigInput = z.input<typeof brokerConfigSchema>;

export function resolveConfig(input: BrokerConfigInput = {}): BrokerConfig {
  return brokerConfigSchema.parse(input);
}

/** Map of TRIBUTARY_* environment variable names to config keys (e.g. TRIBUTARY_DATA_DIR → dataDir). */
export function envKey(key: string): string {
  return `TRIBUTARY_${key.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase()}`;
}
