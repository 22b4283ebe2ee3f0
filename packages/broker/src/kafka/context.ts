/**
 * What the Kafka listener needs of the broker (docs/kafka.md): the same topics, producer ids and limits
 * as the main port. The Broker implements it; the kafka layer sits below the broker layer and names only
 * the layers under it.
 */
import type net from 'node:net';
import type { ParsedLine } from 'tributary-protocol/command.js';
import type { TributaryError } from 'tributary-protocol/errors.js';
import type { ClusterNode } from '../cluster/cluster-node.js';
import type { BrokerConfig } from '../common/config.js';
import type { Logger } from '../common/logger.js';
import type { BrokerMetrics } from '../common/metrics.js';
import type { ClassicGroups } from '../coordinator/classic-groups.js';
import type { GroupCoordinator } from '../coordinator/group-coordinator.js';
import type { ProducerIdAllocator } from '../partition/producer-ids.js';
import type { TopicManager } from '../partition/topic-manager.js';
import type { TransactionCoordinator } from '../txn/txn-coordinator.js';

export interface KafkaBrokerContext {
  readonly config: BrokerConfig;
  readonly topics: TopicManager;
  readonly producerIds: ProducerIdAllocator;
  /** Groups and offsets: Kafka classic groups live beside Tributary's in the same coordinator. */
  readonly coordinator: GroupCoordinator;
  /** The transaction coordinator: where a transactional id's coordinator lives, and Kafka's transactions on it. */
  readonly transactions: TransactionCoordinator;
  readonly logger: Logger;
  /** The records and bytes in and out counters count this port's traffic too (docs/operations.md). */
  readonly metrics: BrokerMetrics;
  readonly brokerId: number;
  /** Recovery done and not stopping: until then (and after) Kafka requests are not served. */
  readonly ready: boolean;
  /** Cluster mode: who leads what, replication. */
  readonly cluster?: ClusterNode;
  /** The main port's authentication and authorization (broker/security.ts), shared by this port. */
  readonly security: KafkaSecurity;
}

/**
 * A Kafka connection as the security layer sees it: the main port's connection shape, so the same
 * sessions, failure counting and revocation apply to both ports.
 */
export interface KafkaIdentity {
  features: Set<string>;
  /** Set once the connection authenticated (SASL, or a client certificate naming a user). */
  principal: string | undefined;
  readonly remote: string;
  /** Aborted when the connection closes: a password check still queued for it is dropped. */
  readonly closedSignal?: AbortSignal;
  /** Closes the connection (the authentication timeout, too many failures). */
  destroy(reason: string, graceMs?: number): void;
}

/** What the Kafka port uses of broker/security.ts's Security (the layer above; the Broker passes it in). */
export interface KafkaSecurity {
  /** `--authentication`: SASL is required and every request is authorized. */
  readonly enabled: boolean;
  /** The authentication timeout, and a verified client certificate naming a user as the principal. */
  attach(conn: KafkaIdentity, socket: net.Socket): void;
  /** The AUTH command's check (scrypt, bounded concurrency, failure counting). Throws authentication_failed or throttled. */
  authenticate(conn: KafkaIdentity, principal: string, token: string): Promise<unknown>;
  /** The main port's permission and topic-ACL check of one command; undefined when allowed. */
  authorize(command: string, conn: KafkaIdentity, req: ParsedLine | undefined): TributaryError | undefined;
  /** Whether the connection sees a group: its group ACL lets it use it, and it may describe every topic the group names (docs/security.md, "Group ACLs"). */
  groupVisible(conn: KafkaIdentity, groups: ClassicGroups, groupId: string): boolean;
  /** Who names a transactional id (its owner check); undefined with authentication off. */
  txnCaller(conn: KafkaIdentity): { principal: string; admin: boolean } | undefined;
  /** A user's SCRAM-SHA-256 keys, or stand-ins that never verify (unknown user, or none stored). */
  scramKeys(principal: string): { keys: { salt: Buffer; iterations: number; storedKey: Buffer; serverKey: Buffer }; known: boolean; credential?: string };
  /**
   * The outcome of a check made with those keys (`verified`: their `credential`, or false): the same session
   * state, failure counting and logs as AUTH; fails if the user changed since the keys were read. Throws when it fails.
   */
  settle(conn: KafkaIdentity, principal: string, verified: string | false, reason?: string): void;
  /** A failed check with those keys: paced through the password-check queue as a failed AUTH is, then settled. Throws. */
  settleFailed(conn: KafkaIdentity, principal: string, reason?: string): Promise<never>;
}

/** The listener's own address as clients are told it (Metadata). */
export interface KafkaAdvertised {
  host: string;
  port: number;
}

/** A place in the connection's order of appends (produceTurn()). */
export interface AppendTurn {
  /** Resolves once every earlier Produce of the connection has started its appends. */
  readonly ready: Promise<void>;
  /** This Produce has started its appends (or will start none): the next one may start. Idempotent. */
  release(): void;
}

/** Where a connection is in its SASL exchange (apis/sasl.ts). */
export interface SaslState {
  step: 'start' | 'handshaken' | 'done' | 'failed';
  /** The mechanism the handshake chose. */
  mechanism?: string;
  /** Handshake v0: the next frame is a bare SASL token, not a SaslAuthenticate request. */
  raw?: boolean;
}

/** What one request handler gets: the broker, the listener's address, and the connection's abort signal. */
export interface KafkaRequestContext {
  readonly broker: KafkaBrokerContext;
  readonly advertised: KafkaAdvertised;
  /** Aborted when the connection closes: long polls stop. */
  readonly signal: AbortSignal;
  /** This connection as the security layer knows it. */
  readonly identity: KafkaIdentity;
  /** This connection's SASL exchange; `failed` closes the connection once the response went out. */
  readonly sasl: SaslState;
  /**
   * The one authorization hook: may this connection's principal run `command` (the main port's command
   * this Kafka API stands for) on `topic`? Undefined when allowed (always, with authentication off); else
   * the main port's refusal, which a handler turns into its Kafka code with `refusal()` (apis/handler.ts).
   * `params` are further main-port parameters the requirement depends on (`transactional_id`, `group`).
   *
   * The Kafka APIs and the commands they stand for (security.ts `requirementOf`, docs/kafka.md):
   * - Produce: PUBLISH per topic (topic.write, write ACL) → TOPIC_AUTHORIZATION_FAILED
   * - Fetch: CONSUME per topic (topic.read, read ACL) → TOPIC_AUTHORIZATION_FAILED
   * - ListOffsets: LIST_OFFSETS per topic (topic.read or topic.write, describe) → TOPIC_AUTHORIZATION_FAILED
   * - Metadata: METADATA per topic (describe); all topics: only those allowed are listed
   * - DescribeConfigs: DESCRIBE per topic (describe) → TOPIC_; the broker resource: CLUSTER_STATUS (admin) → CLUSTER_
   * - CreateTopics CREATE, DeleteTopics DELETE, CreatePartitions ADD_PARTITIONS (admin), per topic → TOPIC_
   * - AlterConfigs, IncrementalAlterConfigs: ALTER_TOPIC (admin) per topic → TOPIC_; a broker resource:
   *   CLUSTER_STATUS (admin) → CLUSTER_
   * - InitProducerId without a transactional id: INIT_PRODUCER_ID (topic.write) → CLUSTER_AUTHORIZATION_FAILED
   * - FindCoordinator: FIND_COORDINATOR with `group` (group) → GROUP_, or with `transactional_id`
   *   (transaction) → TRANSACTIONAL_ID_AUTHORIZATION_FAILED
   * - JoinGroup, SyncGroup, Heartbeat, LeaveGroup: JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP (group and
   *   topic.read; the subscribed topics' ACLs are checked when they are read) → GROUP_
   * - OffsetCommit: COMMIT_OFFSET per topic, OffsetFetch: FETCH_OFFSET per topic (group, topic.read) → TOPIC_
   *   or GROUP_; DescribeGroups GROUP_STATUS, ListGroups LIST_GROUPS (group) → GROUP_
   * - every API naming a group passes it as `group`: the group's ACL (docs/security.md, "Group ACLs") refuses
   *   with NOT_AUTHORIZED_FOR_GROUP → GROUP_AUTHORIZATION_FAILED, whichever resource the call site names
   * - ApiVersions, SaslHandshake, SaslAuthenticate: open (the only APIs served before authentication)
   */
  authorize(command: string, topic?: string, params?: Readonly<Record<string, string>>): TributaryError | undefined;
  /**
   * Produce requests of one connection append in request order whatever their decoding takes (a gzip
   * batch before a plain one must not land after it): taken when the handler starts, before any await.
   */
  produceTurn(): AppendTurn;
}
