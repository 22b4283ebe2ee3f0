/**
 * What the Kafka listener needs of the broker (docs/kafka.md): the same topics, producer ids and limits
 * as the main port. The Broker implements it; the kafka layer sits below the broker layer and names only
 * the layers under it.
 */
import type { ClusterNode } from '../cluster/cluster-node.js';
import type { GroupCoordinator } from '../coordinator/group-coordinator.js';
import type { BrokerConfig } from '../common/config.js';
import type { Logger } from '../common/logger.js';
import type { ProducerIdAllocator } from '../partition/producer-ids.js';
import type { TopicManager } from '../partition/topic-manager.js';

export interface KafkaBrokerContext {
  readonly config: BrokerConfig;
  readonly topics: TopicManager;
  readonly producerIds: ProducerIdAllocator;
  /** Groups and offsets: Kafka classic groups live beside Tributary's in the same coordinator. */
  readonly coordinator: GroupCoordinator;
  /** Where a transactional id's coordinator lives (its `__transaction_state` partition). */
  readonly transactions: { partitionFor(transactionalId: string): number };
  readonly logger: Logger;
  readonly brokerId: number;
  /** Recovery done and not stopping: until then (and after) Kafka requests are not served. */
  readonly ready: boolean;
  /** Cluster mode: who leads what, replication. */
  readonly cluster?: ClusterNode;
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

/** What one request handler gets: the broker, the listener's address, and the connection's abort signal. */
export interface KafkaRequestContext {
  readonly broker: KafkaBrokerContext;
  readonly advertised: KafkaAdvertised;
  /** The client's address (`host:port`), as DescribeGroups shows a member's host. */
  readonly remote: string;
  /** Aborted when the connection closes: long polls stop. */
  readonly signal: AbortSignal;
  /**
   * Produce requests of one connection append in request order whatever their decoding takes (a gzip
   * batch before a plain one must not land after it): taken when the handler starts, before any await.
   */
  produceTurn(): AppendTurn;
}
