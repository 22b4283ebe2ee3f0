/** The replica manager's records of the partitions it replicates (replica-manager.ts). */
import type { Logger } from '../common/logger.js';
import type { Partition } from '../partition/partition.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { LeaderEpochCache } from '../storage/leader-epoch-cache.js';

export interface ReplicationConfig {
  /** A follower that has not caught up with the leader's log end for this long leaves the ISR. */
  replicaLagMaxMs: number;
  /** How long a follower's fetch waits at the leader for new records. */
  fetchWaitMs: number;
  fetchMaxBytes: number;
  /** acks=all needs at least this many in-sync replicas (the leader included). */
  minInsyncReplicas: number;
}

export type Role = 'leader' | 'follower' | 'none';

export interface FollowerPosition {
  /** The follower's log end as of its last fetch: it holds everything below. */
  offset: number;
  /** Last time its fetch reached the leader's log end. */
  caughtUpMs: number;
  /**
   * Its last fetch (`park=true`) found nothing new, so it waits for this partition to be marked for it
   * (fetch-watch.ts) instead of asking again; `sentEnd` and `sentHwm` are what that fetch told it.
   */
  parked: boolean;
  sentEnd: number;
  sentHwm: number;
}

/** This broker's view of one partition it replicates. */
export interface Replica {
  topic: string;
  id: number;
  /** The id of the topic `partition` belongs to: fetches of another incarnation of the name are refused. */
  topicId: string | undefined;
  partition: Partition;
  role: Role;
  leaderEpoch: number;
  leaderId: number;
  isr: number[];
  replicas: number[];
  epochs: LeaderEpochCache;
  /** The epoch history read from disk: truncation must not decide before it is loaded. */
  epochsLoaded: Promise<void>;
  followers: Map<number, FollowerPosition>;
  /** Follower: stops its fetch loop. */
  stop: AbortController | null;
  /** Follower: the fetch loop, until it has exited (a promotion waits for it). */
  fetcher: Promise<void> | null;
  /** The leader epoch this broker is about to lead at, once its last replica append has landed. */
  promoting: number | null;
  /** An ISR change being written to etcd (one at a time per partition). */
  isrChange: Promise<void> | null;
  /**
   * Leader: followers an expansion is adding, counted in the HWM from the moment it is sent (a maximal
   * ISR, KIP-497) until a state newer than `afterRevision` shows whether it landed: etcd may list them,
   * and the controller elect one, before the compare-and-set's answer arrives.
   */
  isrAdding: { ids: number[]; afterRevision: number } | null;
  /** acks=all and coordinator appends waiting for the HWM to pass their record (see waitReplicated). */
  ackWaiters: Set<AckWaiter>;
  /** Not a replica any more: its local data being dropped (a fetch loop starting again waits for it). */
  dropping: Promise<void> | null;
}

/** A replica of `topic`[`id`] that has no role yet; its epoch history (not loaded yet) is in `partition`'s directory. */
export function newReplica(topic: string, id: number, partition: Partition, topicId?: string): Replica {
  const epochs = new LeaderEpochCache(partition.log.dir);
  // Retention moved the log start: the epochs whose records all went go too, the last of them now starting
  // there (Kafka's truncateFromStart), and on disk, or an OffsetsForLeaderEpoch-style answer could name an
  // offset below the log start (docs/architecture.md, "Cluster mode").
  partition.log.onLogStartMoved((start) => {
    if (!epochs.truncateFromStart(start)) return;
    epochs.flush().catch((err: unknown) => partition.log.logger.warn({ err, file: epochs.file }, 'could not write the leader epoch checkpoint after retention'));
  });
  return {
    topic,
    id,
    topicId,
    partition,
    role: 'none',
    leaderEpoch: -1,
    leaderId: -1,
    isr: [],
    replicas: [],
    epochs,
    epochsLoaded: Promise.resolve(),
    followers: new Map(),
    stop: null,
    fetcher: null,
    promoting: null,
    isrChange: null,
    isrAdding: null,
    ackWaiters: new Set(),
    dropping: null,
  };
}

/**
 * Loads `r`'s epoch history and fits it to its log. Recovery may have cut the log (a crash under --flush
 * interval or os): an epoch starting at or past its end never reached it. Kept, a leader re-taking that
 * epoch wrote from the cut on under it while its history gave those offsets to the epoch before, and
 * followers kept their own records there. Retention may have moved the log start after the history's last
 * flush (a crash between the two): trimmed from the start as a retention pass does. Memory only: a crash
 * before the next flush reloads and trims the same way.
 */
export async function loadEpochs(r: Replica, logger: Logger): Promise<void> {
  await r.epochs.load();
  const end = r.partition.logEndOffset;
  if (r.epochs.truncateFromEnd(end)) logger.warn({ topic: r.topic, partition: r.id, logEndOffset: end }, 'leader epochs starting past the log end dropped (recovery cut the log)');
  r.epochs.truncateFromStart(r.partition.earliest);
}

/**
 * The refusal when `r`'s ISR is below min_insync_replicas, else null: before an acks=all append, and again
 * once the HWM passed it (Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND), since a shrink meanwhile leaves the
 * record on fewer brokers than an acknowledgement promises.
 */
export function notEnoughReplicas(r: Replica, min: number): TributaryError | null {
  return r.isr.length < min ? new TributaryError('NOT_ENOUGH_REPLICAS', { topic: r.topic, partition: r.id, isr: r.isr.length, min_insync_replicas: min }) : null;
}

/** An append acknowledged only once replicated, and only if this broker still leads at the append's epoch. */
export interface AckWaiter {
  epoch: number;
  offset: number;
  resolve: () => void;
  reject: (err: Error) => void;
}
