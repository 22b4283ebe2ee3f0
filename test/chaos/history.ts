/**
 * The chaos run's single history: one JSON object per line, wall-clock milliseconds. Operations that take
 * time carry `start` (invoke) and `end` (complete) and an outcome: `ok`, `fail` (certainly had no effect)
 * or `info` (unknown: it may or may not have taken effect). Instantaneous observations carry `time`.
 */
import { createWriteStream, type WriteStream } from 'node:fs';

export type Outcome = 'ok' | 'fail' | 'info';
export type ProducerKind = 'plain' | 'idempotent' | 'transactional';

/** One record handed to a producer. `seq` orders a process's send() calls (invocation order). */
export interface SendOp {
  f: 'send';
  process: string;
  producer: ProducerKind;
  seq: number;
  partition: number;
  value: string;
  start: number;
  end: number;
  outcome: Outcome;
  offset?: number;
  error?: string;
  /** Transactional sends: the transaction they belong to (visible only if it commits). */
  txn?: string;
}

/** The end of a transaction: `begin` is when it was opened, `start`/`end` bracket END_TXN. */
export interface TxnOp {
  f: 'txn';
  process: string;
  txn: string;
  action: 'commit' | 'abort';
  begin: number;
  start: number;
  end: number;
  outcome: Outcome;
  values: string[];
  error?: string;
}

/** One record handed to a consumer's handler. `ag` is the SDK's assignment generation of the partition. */
export interface PollOp {
  f: 'poll';
  process: string;
  member: string;
  partition: number;
  offset: number;
  value: string;
  ag: number;
  time: number;
}

export interface CommitOp {
  f: 'commit';
  process: string;
  member: string;
  generation: number;
  offsets: Array<{ partition: number; offset: number }>;
  start: number;
  end: number;
  outcome: Outcome;
  error?: string;
}

/** A consumer's FETCH_OFFSET (where it resumes a partition it was just given). */
export interface FetchOffsetOp {
  f: 'fetch-offset';
  process: string;
  partition: number;
  start: number;
  end: number;
  outcome: Outcome;
  offset?: number;
  committed?: boolean;
  error?: string;
}

/**
 * A consumer's partition reader: a failed read (it re-routes on it), a dial, a lookup or read that took
 * longer than 200 ms, a reply that started before the offset asked for (`behind`), or an
 * OFFSET_OUT_OF_RANGE answer (`range`, on which the reader resets its position). Diagnostics of how a
 * reader spent a fault, not checked.
 */
export interface ReaderOp {
  f: 'reader';
  process: string;
  partition: number;
  step: 'error' | 'lookup' | 'dial' | 'read' | 'behind' | 'range';
  detail: string;
  ms?: number;
  time: number;
}

export interface AssignOp {
  f: 'assign';
  process: string;
  member: string;
  generation: number;
  ag: number;
  assigned: number[];
  revoked: number[];
  kept: number[];
  owned: number[];
  time: number;
}

export type FaultKind =
  | 'kill-broker'
  | 'pause-leader'
  | 'pause-controller'
  | 'pause-coordinator'
  | 'pause-etcd-short'
  | 'pause-etcd-long'
  | 'kill-consumer'
  | 'partition-broker'
  | 'stale-leader'
  | 'etcd-and-follower'
  | 'reassign'
  | 'reassign-cancel';

/**
 * Faults that are two at once (a frozen follower set under its leader; etcd and a follower together).
 * Availability bounds are stated for single faults: with etcd and a follower both frozen, for one, the
 * ISR cannot shrink, so acks=all must wait for one of them (docs/architecture.md, "Guarantees").
 */
export const COMPOUND_FAULTS: ReadonlySet<FaultKind> = new Set<FaultKind>(['stale-leader', 'etcd-and-follower']);

export interface NemesisOp {
  f: 'nemesis';
  id: number;
  kind: FaultKind;
  phase: 'start' | 'end';
  time: number;
  /** Human-readable targets: `broker 1`, `etcd`, `c2.1`. */
  targets: string[];
  /** Brokers made unavailable (killed, paused or cut off) by the fault. */
  brokers: number[];
  /** Data partitions the fault is expected to interrupt (their leader was a target). */
  partitions: number[];
  detail?: string;
}

/** The cluster as the harness sampled it (leaders per data partition; -1 when leaderless). */
export interface StatusOp {
  f: 'status';
  time: number;
  controller: number | null;
  leaders: number[];
  isr: number[][];
}

export interface ProcessOp {
  f: 'process';
  process: string;
  event: 'spawn' | 'exit' | 'kill' | 'stderr' | 'crash';
  time: number;
  detail?: string;
}

export type Op = SendOp | TxnOp | PollOp | CommitOp | FetchOffsetOp | ReaderOp | AssignOp | NemesisOp | StatusOp | ProcessOp;

/** The ground truth read at the end from every partition's leader, after the cluster settled. */
export interface FinalRecord {
  offset: number;
  value: string;
  control: boolean;
  transactional: boolean;
}

export interface FinalPartition {
  partition: number;
  /** read_uncommitted from offset 0: every record, control records included. */
  records: FinalRecord[];
  /** Offsets a read_committed reader gets. */
  visible: number[];
  hwm: number;
  lso: number;
  /** The consumer group's committed offset at the end (next offset to read), if any. */
  groupCommitted?: number;
}

/** Appends ops to a JSON-lines file and keeps them in memory for the checker. */
export class History {
  readonly ops: Op[] = [];
  /** Ops per kind (`f`), e.g. to see whether deliveries still arrive. */
  readonly counts = new Map<Op['f'], number>();
  private readonly out: WriteStream;

  constructor(readonly file: string) {
    this.out = createWriteStream(file, { flags: 'a' });
  }

  private closed = false;

  add(op: Op): void {
    // a loop that outlived the run's bounded stop may still report: too late to count
    if (this.closed) return;
    this.ops.push(op);
    this.counts.set(op.f, (this.counts.get(op.f) ?? 0) + 1);
    this.out.write(`${JSON.stringify(op)}\n`);
  }

  close(): Promise<void> {
    this.closed = true;
    return new Promise((resolve) => this.out.end(resolve));
  }
}

export function readHistory(text: string): Op[] {
  return text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Op);
}
