/**
 * What a command handler is given (the broker and the connection a request came on) and how it is
 * registered. Every handler module imports this; only commands.ts imports the handler modules.
 */
import type { Params } from 'tributary-protocol/command.js';
import type { ClusterNode } from '../cluster/cluster-node.js';
import type { GroupCoordinator } from '../coordinator/group-coordinator.js';
import type { TransactionCoordinator } from '../txn/txn-coordinator.js';
import type { BrokerConfig } from '../common/config.js';
import type { Logger } from '../common/logger.js';
import type { BrokerMetrics } from '../common/metrics.js';
import type { Security } from './security.js';
import type { TopicManager } from '../partition/topic-manager.js';
import type { ProducerIdAllocator } from '../partition/producer-ids.js';
import type { FramePool } from '../storage/frame-pool.js';
import type { ReplyBuffers } from './reply-buffers.js';
import type { TurnWrites } from './turn-writes.js';

/** What handlers may use of the broker. */
export interface BrokerContext {
  readonly config: BrokerConfig;
  readonly topics: TopicManager;
  readonly metrics: BrokerMetrics;
  readonly logger: Logger;
  readonly brokerId: number;
  /** host:port clients should use to reach this broker. */
  readonly advertised: { host: string; port: number };
  readonly coordinator: GroupCoordinator;
  readonly transactions: TransactionCoordinator;
  /** Producer ids for idempotent producers (INIT_PRODUCER_ID without a transactional id) and transactions. */
  readonly producerIds: ProducerIdAllocator;
  /** Cluster mode only: who leads what, replication, the controller. */
  readonly cluster?: ClusterNode;
  /** Authentication and authorization (src/broker/security.ts); absent in unit-test contexts. */
  readonly security?: Security;
  /** Reused memory for the replies the tail cache writes (src/broker/reply-buffers.ts); absent in unit-test contexts. */
  readonly replyBuffers?: ReplyBuffers;
  /** Reused memory for produce frames (src/storage/frame-pool.ts); absent in unit-test contexts. */
  readonly framePool?: FramePool;
  /** Corks the main port's sockets for a turn of the event loop, acks last (src/broker/turn-writes.ts). */
  readonly turnWrites: TurnWrites;
}

/** What handlers may use of the connection a request came on. */
export interface ConnectionContext {
  features: Set<string>;
  principal: string | undefined;
  readonly remote: string;
  /**
   * performance.now() when the request now starting was read (the queue phase of the produce and fetch
   * metrics); set just before a handler is called, so a handler reads it before its first await.
   */
  receivedAt?: number;
  /**
   * Cluster mode: committed offsets this connection's CONSUMEs asked other brokers (the groups'
   * coordinators) for, once per (group, topic, partition) for the connection's life.
   */
  remoteCommitted?: Map<string, number | undefined>;
  /** Aborted once the connection closed (a JOIN's new member is removed when its reply cannot be sent). */
  readonly closedSignal?: AbortSignal;
}

/**
 * A command's reply: a text line, a binary body, or a binary body in pieces written one after another
 * (a CONSUME reply whose records are views of the tail cache: docs/architecture.md, "Broker", reply buffers).
 */
export type Reply = string | Buffer | Buffer[];

/** Bytes of a binary reply body. */
export function bodyLength(body: Buffer | Buffer[]): number {
  if (Buffer.isBuffer(body)) return body.length;
  let n = 0;
  for (const b of body) n += b.length;
  return n;
}

export interface CommandSpec {
  handler: (b: BrokerContext, c: ConnectionContext, p: Params) => Promise<Reply> | Reply;
  /** Every parameter the command takes: any other is refused before it runs (docs/protocol.md, section 2). */
  params: readonly string[];
  /** The command takes positional tokens (the `P<n>:<offset>` entries of the batch commits). */
  positional?: boolean;
  /**
   * Pipelined commands may run while later requests of the same connection start (produce).
   * Others complete before the next request starts, so `CREATE` then `PUBLISH` sent back to back work.
   */
  pipelined?: boolean;
}


export function leaderAddress(b: BrokerContext): string {
  return `${b.advertised.host}:${b.advertised.port}`;
}

/** A JSON reply (DESCRIBE, CLUSTER_STATUS). */
export function json(obj: Record<string, unknown>): string {
  return JSON.stringify({ status: 'OK', ...obj });
}
