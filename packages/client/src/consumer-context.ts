/**
 * What the parts of one consumer share (group membership, partition fetcher, offset committer, the
 * Consumer facade): its options, cluster client, root AbortController, membership, installed partitions
 * and the events they all emit. The lifecycle it records is docs/sdk.md's "Consumer" → "Lifecycle".
 */
import type { RecordHeader } from 'tributary-protocol/record.js';
import type { Cluster, ConnectionEvents } from './cluster.js';
import type { ResolvedConsumerOptions } from './consumer-options.js';
import type { PartitionWorker } from './partition-worker.js';
import { Signal } from './wake-signal.js';

export type ConsumerState = 'new' | 'running' | 'rebalancing' | 'closing' | 'closed';

export interface ConsumedMessage {
  topic: string;
  partition: number;
  offset: number;
  key: Buffer | null;
  value: Buffer;
  timestamp: number;
  headers: RecordHeader[];
  /** The local assignment generation of the partition when this message was fetched. */
  assignmentGeneration: number;
  /**
   * Aborted the moment this message's partition assignment ends: revoked by a rebalance, lost (the
   * member expired, or the broker refused a read of it as fenced: the reason is that TributaryError),
   * or the consumer closes. Side effects of the message should stop when it fires (docs/sdk.md, "Fenced reads").
   */
  signal: AbortSignal;
  /** `signal.aborted`: the partition is no longer this consumer's, and its new owner may redo this message. */
  readonly fenced: boolean;
}

export interface ConsumerEvents extends ConnectionEvents {
  'group.join': { memberId: string; generation: number; leader: string; assignments: number[] };
  'rebalance.start': { reason: string; generation: number };
  'rebalance.end': { generation: number; assignmentGeneration: number; assigned: number[]; revoked: number[]; kept: number[]; durationMs: number };
  commit: { offsets: Array<{ partition: number; offset: number }>; generation: number };
  heartbeat: { memberId: string; generation: number };
  crash: { error: Error; fatal: boolean };
  'handler.slow': { partition: number; offset: number; elapsedMs: number };
  /** run({ retryTopics }): a failed message was parked (on a retry topic, or the dead-letter topic) and its offset committed. */
  'retry.parked': import('./retry-topics.js').ParkedEvent;
  /** Readers and handlers of these partitions have stopped (before the revocation is confirmed). */
  'partitions.revoked': { partitions: number[]; generation: number };
  /**
   * The coordinator no longer knows this member (its session expired), or a read of a partition was
   * refused as fenced: these partitions are another member's now. Their readers and handlers were
   * stopped (their signals aborted with the reason) and nothing of theirs is committed.
   */
  'partitions.lost': { partitions: number[]; generation: number };
  /** Readers of these partitions have started. */
  'partitions.assigned': { partitions: number[]; generation: number; assignmentGeneration: number };
}

/** The Consumer's own emit, handed to the parts so that every event comes from the Consumer. */
export type EmitConsumerEvent = <K extends keyof ConsumerEvents & string>(event: K, payload: ConsumerEvents[K]) => void;

export class ConsumerContext {
  /** Owns every loop (heartbeat, commit worker, partition readers, handlers); close() aborts it. */
  readonly root = new AbortController();
  state: ConsumerState = 'new';
  memberId: string | undefined;
  /** The broker's group generation this member last joined. */
  generation = 0;
  /** The local assignment generation: bumped by every rebalance. */
  assignmentGeneration = 0;
  readonly workers = new Map<number, PartitionWorker>();
  /**
   * The signal of every partition installation this consumer made, which each of its messages carries:
   * how commit({ message }) tells its own messages (revoked since, or not) from any other.
   */
  readonly installations = new WeakSet<AbortSignal>();
  fatal: Error | undefined;
  /**
   * performance.now() when the last request the coordinator answered as this member's (a heartbeat, a
   * SYNC_GROUP) was sent: the coordinator cannot expire the member before this + sessionTimeoutMs.
   */
  sessionProvenAt = Number.NEGATIVE_INFINITY;
  /** Woken whenever the session is proven again (session-guard.ts). */
  readonly sessionProven = new Signal();

  constructor(
    readonly options: ResolvedConsumerOptions,
    readonly cluster: Cluster,
    readonly emit: EmitConsumerEvent,
    private readonly close: () => Promise<void>,
  ) {}

  get group() {
    return { group: this.options.groupId };
  }

  get closing(): boolean {
    return this.state === 'closing' || this.state === 'closed';
  }

  /** The coordinator answered a request of this member sent at `sentAt` (performance.now()). */
  proveSession(sentAt: number): void {
    if (sentAt > this.sessionProvenAt) this.sessionProvenAt = sentAt;
    this.sessionProven.wake();
  }

  /** Whether the coordinator can not have expired this member yet. */
  get sessionLive(): boolean {
    return performance.now() < this.sessionProvenAt + this.options.sessionTimeoutMs;
  }

  crash(error: Error, fatal: boolean): void {
    this.emit('crash', { error, fatal });
    if (fatal) {
      this.fatal = error;
      void this.close();
    }
  }
}
