/**
 * The chaos history checker: a pure function of the history and the final logs (read from offset 0 after
 * the cluster settled). Per partition it looks for the anomalies of Jepsen's Kafka workload, adapted to
 * this broker's guarantees:
 *
 * - lost-write: an acknowledged record (plain or idempotent send, or a send of a committed transaction)
 *   missing from the final log, at another offset than acknowledged, or hidden from read_committed; also
 *   a delivered record that is gone from the final log.
 * - inconsistent-offset: one offset acknowledged or delivered with two different values.
 * - duplicate: a value of the idempotent or transactional producer at two offsets (the plain producer may
 *   duplicate on retry: counted, not an anomaly).
 * - poll-skip: a member starting a partition above every offset the group could have committed, two
 *   consecutive deliveries of one installation with a visible record between them, or a visible record
 *   below the group's committed offset that no member ever received.
 * - nonmonotonic-send: acknowledged offsets of one producer and partition going down in invocation order
 *   (idempotent producer; within one transaction) or in real time (every producer: a send acknowledged
 *   before another was invoked must have the lower offset).
 * - nonmonotonic-poll: offsets not increasing within one installation of a partition in one member
 *   (an installation is the SDK's assignment generation: continuous ownership).
 * - aborted-read: a delivered record of an aborted transaction (aborted by the client, or left aborted
 *   in the log), or a record of such a transaction visible to read_committed in the final log.
 * - uncommitted-read: a transactional record delivered before its transaction's commit was requested.
 * - commit-regression: an acknowledged commit lower than one acknowledged before it was sent, a
 *   FETCH_OFFSET answering below an acknowledged commit, or a final committed offset below one.
 * - txn-atomicity: a transaction whose records are only partly visible to read_committed.
 *
 * It also computes availability per fault (fault start to the first acknowledged write, and to the first
 * delivery of a record written after the fault, on the partitions the fault hit) and the longest time a
 * partition took no acknowledged write while the cluster showed a live leader for it.
 */
import { COMPOUND_FAULTS } from './history.js';
import type { CommitOp, FaultKind, FetchOffsetOp, FinalPartition, FinalRecord, NemesisOp, Op, PollOp, SendOp, StatusOp, TxnOp } from './history.js';

export const SAFETY_KINDS = [
  'lost-write',
  'inconsistent-offset',
  'duplicate',
  'poll-skip',
  'nonmonotonic-send',
  'nonmonotonic-poll',
  'aborted-read',
  'uncommitted-read',
  'commit-regression',
  'txn-atomicity',
] as const;
export type AnomalyKind = (typeof SAFETY_KINDS)[number];

export interface Anomaly {
  kind: AnomalyKind;
  partition?: number;
  /** When it was observed (wall clock ms). */
  time: number;
  detail: string;
  /** The fault that started last before `time` (filled by check()). */
  fault?: string;
}

export interface FaultAvailability {
  id: number;
  kind: FaultKind;
  targets: string[];
  start: number;
  end: number | undefined;
  partitions: number[];
  /** Fault start to the moment every affected partition had acknowledged a write sent after the start. */
  writeMs?: number;
  /** Fault start to the moment every affected partition had delivered a record sent after the start. */
  consumeMs?: number;
  /** Data partitions whose leader differed 2 s after the fault ended from just before it started. */
  leadersMoved?: number;
}

export interface Figures {
  median?: number;
  worst?: number;
  /** Faults after which it never happened within the run. */
  unresolved: number;
  count: number;
  /** Single faults only: left out because the next fault began before this one was resolved, or it began before an earlier one was. */
  overlapped?: number;
}

export interface CheckReport {
  anomalies: Anomaly[];
  counts: Record<AnomalyKind, number>;
  /** Partitions the final read could not cover: nothing about them was verified. */
  unverifiedPartitions: number[];
  stats: {
    ackedWrites: number;
    unknownWrites: number;
    failedWrites: number;
    deliveries: number;
    commits: number;
    txnCommitted: number;
    txnAborted: number;
    txnUnknown: number;
    plainDuplicates: number;
  };
  faults: FaultAvailability[];
  faultCounts: Partial<Record<FaultKind, number>>;
  writeFailover: Figures;
  consumeFailover: Figures;
  /** Longest time without an acknowledged write on a partition whose leader was shown alive. */
  maxStall: { ms: number; partition?: number; from?: number };
  /** The same figures over single faults only (no compound fault in effect), what the bounds are for. */
  single: { writeFailover: Figures; consumeFailover: Figures; maxStall: { ms: number; partition?: number; from?: number } };
}

export interface CheckOptions {
  /** Partitions of the topic (0..n-1). */
  partitions: number;
  /** Where the run ended (for faults whose recovery never came); default: the last op's time. */
  endTime?: number;
  /** At most this many examples per anomaly kind are kept in `anomalies` (counts are exact). */
  maxExamples?: number;
  /** Times in anomaly descriptions are relative to this; default: the first op's time. */
  t0?: number;
}

// ---- small helpers ----

/** Index of the first element >= x in a sorted array. */
function lowerBound(xs: number[], x: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (xs[mid]! < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Sorted visible offsets in [from, to). */
function visibleIn(visible: number[], from: number, to: number): number[] {
  const out: number[] = [];
  for (let i = lowerBound(visible, from); i < visible.length && visible[i]! < to; i++) out.push(visible[i]!);
  return out;
}

function median(xs: number[]): number | undefined {
  if (xs.length === 0) return undefined;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m] : (s[m - 1]! + s[m]!) / 2;
}

function figures(values: Array<number | undefined>): Figures {
  const known = values.filter((v): v is number => v !== undefined);
  return { median: median(known), worst: known.length > 0 ? Math.max(...known) : undefined, unresolved: values.length - known.length, count: values.length };
}

function group<T, K>(xs: T[], key: (x: T) => K): Map<K, T[]> {
  const m = new Map<K, T[]>();
  for (const x of xs) {
    const k = key(x);
    let l = m.get(k);
    if (!l) m.set(k, (l = []));
    l.push(x);
  }
  return m;
}

/**
 * Real-time order: for every pair where `a` completed before `b` was invoked, `ok(a, b)` must hold.
 * Checks each op against the op with the highest value among those completed before it started.
 */
function realTimeViolations<T extends { start: number; end: number }>(ops: T[], value: (o: T) => number, strict: boolean): Array<{ before: T; after: T }> {
  const byEnd = [...ops].sort((a, b) => a.end - b.end);
  const byStart = [...ops].sort((a, b) => a.start - b.start);
  const out: Array<{ before: T; after: T }> = [];
  let i = 0;
  let best: T | undefined;
  for (const op of byStart) {
    while (i < byEnd.length && byEnd[i]!.end < op.start) {
      const c = byEnd[i++]!;
      if (!best || value(c) > value(best)) best = c;
    }
    if (best && (value(op) < value(best) || (strict && value(op) === value(best) && op !== best))) out.push({ before: best, after: op });
  }
  return out;
}

interface TxnInfo {
  id: string;
  status: 'committed' | 'aborted' | 'unknown';
  /** First END_TXN commit invocation. */
  commitStart?: number;
  end: number;
  values: Set<string>;
  both: boolean;
}

interface PartitionIndex {
  byOffset: Map<number, FinalRecord>;
  visible: number[];
  visibleSet: Set<number>;
}

export function check(ops: Op[], final: FinalPartition[], opts: CheckOptions): CheckReport {
  const maxExamples = opts.maxExamples ?? 50;
  const anomalies: Anomaly[] = [];
  const counts = Object.fromEntries(SAFETY_KINDS.map((k) => [k, 0])) as Record<AnomalyKind, number>;
  const flag = (a: Anomaly) => {
    counts[a.kind]++;
    if (counts[a.kind] <= maxExamples) anomalies.push(a);
  };

  const sends = ops.filter((o): o is SendOp => o.f === 'send');
  const txnOps = ops.filter((o): o is TxnOp => o.f === 'txn');
  const polls = ops.filter((o): o is PollOp => o.f === 'poll');
  const commits = ops.filter((o): o is CommitOp => o.f === 'commit');
  const fetches = ops.filter((o): o is FetchOffsetOp => o.f === 'fetch-offset');
  const nemesis = ops.filter((o): o is NemesisOp => o.f === 'nemesis');
  const statuses = ops.filter((o): o is StatusOp => o.f === 'status').sort((a, b) => a.time - b.time);
  const endTime = opts.endTime ?? ops.reduce((m, o) => Math.max(m, 'end' in o ? o.end : 'time' in o ? o.time : 0), 0);

  // ---- final logs ----
  const index = new Map<number, PartitionIndex>();
  for (const fp of final) {
    const byOffset = new Map(fp.records.map((r) => [r.offset, r]));
    const visible = [...fp.visible].sort((a, b) => a - b);
    index.set(fp.partition, { byOffset, visible, visibleSet: new Set(visible) });
  }
  const unverifiedPartitions: number[] = [];
  for (let p = 0; p < opts.partitions; p++) if (!index.has(p)) unverifiedPartitions.push(p);
  /** value -> where the final logs hold it (data records only). */
  const finalWhere = new Map<string, Array<{ partition: number; offset: number }>>();
  for (const fp of final) {
    for (const r of fp.records) {
      if (r.control) continue;
      let l = finalWhere.get(r.value);
      if (!l) finalWhere.set(r.value, (l = []));
      l.push({ partition: fp.partition, offset: r.offset });
    }
  }

  // ---- writes and transactions ----
  const sendOf = new Map<string, SendOp>();
  for (const s of sends) if (!sendOf.has(s.value) || s.outcome === 'ok') sendOf.set(s.value, s);
  const txns = new Map<string, TxnInfo>();
  const txnInfo = (id: string): TxnInfo => {
    let t = txns.get(id);
    if (!t) txns.set(id, (t = { id, status: 'unknown', end: 0, values: new Set(), both: false }));
    return t;
  };
  for (const s of sends) if (s.txn !== undefined) txnInfo(s.txn).values.add(s.value);
  for (const op of txnOps) {
    const t = txnInfo(op.txn);
    for (const v of op.values) t.values.add(v);
    t.end = Math.max(t.end, op.end);
    if (op.action === 'commit') t.commitStart = Math.min(t.commitStart ?? Number.POSITIVE_INFINITY, op.start);
    if (op.outcome !== 'ok') continue;
    const s = op.action === 'commit' ? 'committed' : 'aborted';
    if (t.status !== 'unknown' && t.status !== s) t.both = true;
    t.status = s;
  }
  const txnOfValue = new Map<string, TxnInfo>();
  for (const t of txns.values()) for (const v of t.values) txnOfValue.set(v, t);

  const visibleAt = (p: number, o: number) => index.get(p)?.visibleSet.has(o) ?? false;
  const isVisibleValue = (v: string) => (finalWhere.get(v) ?? []).some((w) => visibleAt(w.partition, w.offset));

  // lost-write: acknowledged records of plain/idempotent sends and of committed transactions
  for (const s of sends) {
    if (s.outcome !== 'ok' || s.offset === undefined) continue;
    const t = s.txn !== undefined ? txns.get(s.txn) : undefined;
    if (s.txn !== undefined && t?.status !== 'committed') continue;
    const idx = index.get(s.partition);
    if (!idx) continue;
    const rec = idx.byOffset.get(s.offset);
    if (rec?.value === s.value) {
      if (!idx.visibleSet.has(s.offset)) {
        flag({
          kind: 'lost-write',
          partition: s.partition,
          time: s.end,
          detail: `${s.value} acknowledged at offset ${s.offset} is in the log but hidden from read_committed`,
        });
      }
      continue;
    }
    const elsewhere = finalWhere.get(s.value);
    const at = elsewhere?.map((w) => `${w.partition}:${w.offset}`).join(',');
    flag({
      kind: 'lost-write',
      partition: s.partition,
      time: s.end,
      detail: elsewhere
        ? `${s.value} (${s.process}) acknowledged at offset ${s.offset} but found at ${at}; offset ${s.offset} holds ${rec ? rec.value : 'nothing'}`
        : `${s.value} (${s.process}) acknowledged at offset ${s.offset} is missing from the final log (offset holds ${rec ? (rec.control ? 'a control record' : rec.value) : 'nothing'})`,
    });
  }
  // a delivered record must still be in the log
  const lostDelivered = new Set<string>();
  for (const p of polls) {
    if (!index.has(p.partition) || finalWhere.has(p.value) || lostDelivered.has(p.value)) continue;
    lostDelivered.add(p.value);
    flag({
      kind: 'lost-write',
      partition: p.partition,
      time: p.time,
      detail: `${p.value} delivered to ${p.process} at offset ${p.offset} is missing from the final log`,
    });
  }

  // inconsistent-offset: one (partition, offset) with two values
  const seenAt = new Map<string, { values: Map<string, string>; time: number; partition: number; offset: number }>();
  const observe = (partition: number, offset: number, value: string, who: string, time: number) => {
    const k = `${partition}:${offset}`;
    let e = seenAt.get(k);
    if (!e) seenAt.set(k, (e = { values: new Map(), time, partition, offset }));
    if (!e.values.has(value)) e.values.set(value, who);
    e.time = Math.min(e.time, time);
  };
  for (const s of sends) if (s.outcome === 'ok' && s.offset !== undefined) observe(s.partition, s.offset, s.value, `acked to ${s.process}`, s.end);
  for (const p of polls) observe(p.partition, p.offset, p.value, `delivered to ${p.process}`, p.time);
  for (const e of seenAt.values()) {
    const rec = index.get(e.partition)?.byOffset.get(e.offset);
    if (rec && !rec.control) {
      if (!e.values.has(rec.value)) e.values.set(rec.value, 'final log');
    } else if (rec?.control && index.has(e.partition)) e.values.set('<control record>', 'final log');
    if (e.values.size > 1) {
      flag({
        kind: 'inconsistent-offset',
        partition: e.partition,
        time: e.time,
        detail: `offset ${e.offset}: ${[...e.values].map(([v, who]) => `${v} (${who})`).join(' vs ')}`,
      });
    }
  }

  // duplicate: a value at two offsets of the final logs
  let plainDuplicates = 0;
  for (const [value, where] of finalWhere) {
    if (where.length < 2) continue;
    const s = sendOf.get(value);
    if (s?.producer === 'plain') {
      plainDuplicates++;
      continue;
    }
    flag({
      kind: 'duplicate',
      partition: where[0]!.partition,
      time: s?.start ?? 0,
      detail: `${value} (${s?.producer ?? 'unknown producer'}) at ${where.map((w) => `${w.partition}:${w.offset}`).join(', ')}`,
    });
  }

  // nonmonotonic-send
  const acked = sends.filter((s) => s.outcome === 'ok' && s.offset !== undefined);
  for (const [, list] of group(acked, (s) => `${s.process}|${s.partition}`)) {
    const incidents = new Set<string>();
    for (const { before, after } of realTimeViolations(list, (s) => s.offset!, true)) {
      const k = `${before.value}>${after.value}`;
      if (incidents.has(k)) continue;
      incidents.add(k);
      flag({
        kind: 'nonmonotonic-send',
        partition: after.partition,
        time: after.end,
        detail: `${after.process}: ${before.value} acknowledged at offset ${before.offset} before ${after.value} was sent, which got offset ${after.offset}`,
      });
    }
    // invocation order: the idempotent producer keeps a partition's order; a transaction keeps its own
    const ordered = list.filter((s) => s.producer !== 'plain');
    for (const [, inOrder] of group(ordered, (s) => s.txn ?? '')) {
      inOrder.sort((a, b) => a.seq - b.seq);
      for (let i = 1; i < inOrder.length; i++) {
        const a = inOrder[i - 1]!;
        const b = inOrder[i]!;
        if (b.offset! > a.offset!) continue;
        if (a.end < b.start) continue; // reported in real time
        flag({
          kind: 'nonmonotonic-send',
          partition: b.partition,
          time: b.end,
          detail: `${b.process}: ${a.value} (sent first) got offset ${a.offset}, ${b.value} (sent next) got offset ${b.offset}`,
        });
      }
    }
  }

  // ---- consumption ----
  // upper bound of the group's committed offset per partition at a time: every commit that may have
  // landed (a failed one too: an earlier attempt of its retries may have gone through)
  const commitAttempts = new Map<number, Array<{ start: number; offset: number }>>();
  for (const c of commits) {
    for (const o of c.offsets) {
      let l = commitAttempts.get(o.partition);
      if (!l) commitAttempts.set(o.partition, (l = []));
      l.push({ start: c.start, offset: o.offset });
    }
  }
  const attemptStarts = new Map<number, { starts: number[]; prefixMax: number[] }>();
  for (const [p, l] of commitAttempts) {
    l.sort((a, b) => a.start - b.start);
    const prefixMax: number[] = [];
    let m = 0;
    for (const x of l) prefixMax.push((m = Math.max(m, x.offset)));
    attemptStarts.set(p, { starts: l.map((x) => x.start), prefixMax });
  }
  const committedUpperBound = (p: number, t: number): number => {
    const a = attemptStarts.get(p);
    if (!a) return 0;
    const i = lowerBound(a.starts, t) - 1; // commits invoked strictly before t
    return i >= 0 ? a.prefixMax[i]! : 0;
  };

  const installations = group(polls, (p) => `${p.process}|${p.partition}|${p.ag}`);
  for (const [, list] of installations) {
    const idx = index.get(list[0]!.partition);
    // stable: ops of one process arrive in its order
    list.sort((a, b) => a.time - b.time);
    const first = list[0]!;
    if (idx) {
      const from = committedUpperBound(first.partition, first.time);
      const skipped = visibleIn(idx.visible, from, first.offset);
      if (skipped.length > 0) {
        flag({
          kind: 'poll-skip',
          partition: first.partition,
          time: first.time,
          detail: `${first.process} started partition ${first.partition} at offset ${first.offset}, but the group could have committed at most ${from}: skipped ${skipped.length} visible record(s) from offset ${skipped[0]}`,
        });
      }
    }
    for (let i = 1; i < list.length; i++) {
      const a = list[i - 1]!;
      const b = list[i]!;
      if (b.offset <= a.offset) {
        flag({
          kind: 'nonmonotonic-poll',
          partition: b.partition,
          time: b.time,
          detail: `${b.process} (assignment generation ${b.ag}) got offset ${b.offset} after ${a.offset}`,
        });
        continue;
      }
      if (!idx) continue;
      const skipped = visibleIn(idx.visible, a.offset + 1, b.offset);
      if (skipped.length > 0) {
        flag({
          kind: 'poll-skip',
          partition: b.partition,
          time: b.time,
          detail: `${b.process} went from offset ${a.offset} to ${b.offset}, skipping ${skipped.length} visible record(s) from offset ${skipped[0]}`,
        });
      }
    }
  }

  // commit-regression (acknowledged commits in real time), then FETCH_OFFSET and the final offsets
  const ackedCommitEntries: Array<{ partition: number; offset: number; start: number; end: number; process: string }> = [];
  for (const c of commits) if (c.outcome === 'ok') for (const o of c.offsets) ackedCommitEntries.push({ ...o, start: c.start, end: c.end, process: c.process });
  const ackedByPartition = group(ackedCommitEntries, (c) => c.partition);
  for (const [p, list] of ackedByPartition) {
    for (const { before, after } of realTimeViolations(list, (c) => c.offset, false)) {
      flag({
        kind: 'commit-regression',
        partition: p,
        time: after.end,
        detail: `commit of ${after.offset} by ${after.process} acknowledged after a commit of ${before.offset} by ${before.process} had been acknowledged`,
      });
    }
  }
  const maxAckedBefore = (p: number, t: number): { offset: number; process: string } | undefined => {
    let best: { offset: number; process: string } | undefined;
    for (const c of ackedByPartition.get(p) ?? []) if (c.end < t && (!best || c.offset > best.offset)) best = c;
    return best;
  };
  for (const f of fetches) {
    if (f.outcome !== 'ok') continue;
    const best = maxAckedBefore(f.partition, f.start);
    const got = f.committed ? (f.offset ?? 0) : undefined;
    if (best && (got === undefined || got < best.offset)) {
      flag({
        kind: 'commit-regression',
        partition: f.partition,
        time: f.end,
        detail: `FETCH_OFFSET by ${f.process} answered ${got === undefined ? 'no committed offset' : got} after a commit of ${best.offset} by ${best.process} was acknowledged`,
      });
    }
  }
  for (const fp of final) {
    const best = maxAckedBefore(fp.partition, Number.POSITIVE_INFINITY);
    if (best && (fp.groupCommitted === undefined || fp.groupCommitted < best.offset)) {
      flag({
        kind: 'commit-regression',
        partition: fp.partition,
        time: endTime,
        detail: `the group's final committed offset is ${fp.groupCommitted ?? 'none'}, below the acknowledged commit of ${best.offset} by ${best.process}`,
      });
    }
  }

  // group-level skip: a visible record below the committed offset that nobody received
  const delivered = new Map<number, Set<number>>();
  for (const p of polls) {
    let s = delivered.get(p.partition);
    if (!s) delivered.set(p.partition, (s = new Set()));
    s.add(p.offset);
  }
  for (const fp of final) {
    const idx = index.get(fp.partition)!;
    const committed = Math.max(fp.groupCommitted ?? 0, maxAckedBefore(fp.partition, Number.POSITIVE_INFINITY)?.offset ?? 0);
    const got = delivered.get(fp.partition) ?? new Set<number>();
    const missing = visibleIn(idx.visible, 0, committed).filter((o) => !got.has(o));
    if (missing.length > 0) {
      flag({
        kind: 'poll-skip',
        partition: fp.partition,
        time: endTime,
        detail: `${missing.length} visible record(s) below the group's committed offset ${committed} were never delivered to any member (first at offset ${missing[0]})`,
      });
    }
  }

  // aborted-read / uncommitted-read on deliveries
  for (const p of polls) {
    const t = txnOfValue.get(p.value);
    if (!t) continue;
    const where = finalWhere.get(p.value);
    if (t.status === 'aborted') {
      flag({
        kind: 'aborted-read',
        partition: p.partition,
        time: p.time,
        detail: `${p.process} received ${p.value} at offset ${p.offset}; transaction ${t.id} was aborted`,
      });
    } else if (where && !isVisibleValue(p.value)) {
      flag({
        kind: 'aborted-read',
        partition: p.partition,
        time: p.time,
        detail: `${p.process} received ${p.value} at offset ${p.offset}; transaction ${t.id} is aborted in the log`,
      });
    } else if (t.commitStart === undefined || p.time < t.commitStart) {
      flag({
        kind: 'uncommitted-read',
        partition: p.partition,
        time: p.time,
        detail: `${p.process} received ${p.value} at offset ${p.offset} ${t.commitStart === undefined ? 'but its transaction never asked to commit' : `${t.commitStart - p.time} ms before its transaction ${t.id} asked to commit`}`,
      });
    }
  }

  // transactions in the final log
  for (const t of txns.values()) {
    const values = [...t.values];
    const checkable = values.filter((v) => {
      const s = sendOf.get(v);
      return s !== undefined && index.has(s.partition);
    });
    const visible = checkable.filter(isVisibleValue);
    if (t.both) {
      flag({ kind: 'txn-atomicity', time: t.end, detail: `transaction ${t.id} was acknowledged both committed and aborted` });
    }
    if (t.status === 'aborted' || t.commitStart === undefined) {
      if (visible.length > 0) {
        flag({
          kind: 'aborted-read',
          partition: sendOf.get(visible[0]!)?.partition,
          time: t.end,
          detail: `transaction ${t.id} (${t.status === 'aborted' ? 'aborted' : 'never asked to commit'}): ${visible.length} of its records are visible to read_committed (${visible.slice(0, 3).join(', ')})`,
        });
      }
      continue;
    }
    // committed transactions missing records are lost writes (above); unknown ones must be all or nothing
    if (t.status === 'unknown' && visible.length > 0 && visible.length < checkable.length) {
      flag({
        kind: 'txn-atomicity',
        partition: sendOf.get(visible[0]!)?.partition,
        time: t.end,
        detail: `transaction ${t.id}: ${visible.length} of ${checkable.length} records visible to read_committed`,
      });
    }
  }

  // ---- availability ----
  const starts = nemesis.filter((n) => n.phase === 'start');
  const endOf = new Map(nemesis.filter((n) => n.phase === 'end').map((n) => [n.id, n.time]));
  const ackTimes = new Map<number, SendOp[]>();
  for (const s of sends) {
    if (s.outcome !== 'ok' || s.producer === 'transactional') continue;
    let l = ackTimes.get(s.partition);
    if (!l) ackTimes.set(s.partition, (l = []));
    l.push(s);
  }
  for (const l of ackTimes.values()) l.sort((a, b) => a.end - b.end);
  const pollsByPartition = group(
    [...polls].sort((a, b) => a.time - b.time),
    (p) => p.partition,
  );
  const faults: FaultAvailability[] = [];
  const faultCounts: Partial<Record<FaultKind, number>> = {};
  for (const n of starts) {
    faultCounts[n.kind] = (faultCounts[n.kind] ?? 0) + 1;
    const f: FaultAvailability = { id: n.id, kind: n.kind, targets: n.targets, start: n.time, end: endOf.get(n.id), partitions: n.partitions };
    if (n.partitions.length > 0 && n.kind !== 'kill-consumer') {
      let worst = 0;
      for (const p of n.partitions) {
        const first = (ackTimes.get(p) ?? []).find((s) => s.start >= n.time);
        if (!first) {
          worst = Number.NaN;
          break;
        }
        worst = Math.max(worst, first.end - n.time);
      }
      if (!Number.isNaN(worst)) f.writeMs = worst;
    }
    if (n.partitions.length > 0) {
      let worst = 0;
      for (const p of n.partitions) {
        const first = (pollsByPartition.get(p) ?? []).find((x) => x.time > n.time && (sendOf.get(x.value)?.start ?? Number.NEGATIVE_INFINITY) >= n.time);
        if (!first) {
          worst = Number.NaN;
          break;
        }
        worst = Math.max(worst, first.time - n.time);
      }
      if (!Number.isNaN(worst)) f.consumeMs = worst;
    }
    const before = [...statuses].reverse().find((x) => x.time <= n.time);
    const endAt = endOf.get(n.id);
    const after = endAt === undefined ? undefined : (statuses.find((x) => x.time >= endAt + 2000) ?? statuses[statuses.length - 1]);
    if (before && after && after.time > n.time) f.leadersMoved = before.leaders.filter((l, p) => after.leaders[p] !== l).length;
    faults.push(f);
  }
  const writeFailover = figures(faults.filter((f) => f.partitions.length > 0 && f.kind !== 'kill-consumer').map((f) => f.writeMs));
  const consumeFailover = figures(faults.filter((f) => f.partitions.length > 0).map((f) => f.consumeMs));
  // A fault is single when it is not compound, the next fault began only after it was resolved, and
  // every earlier fault was resolved before it began: a kill-consumer whose member's session is still
  // running when the coordinator is paused is a compound fault too, whichever of the two is measured.
  const singleFaults = faults.filter((f) => !COMPOUND_FAULTS.has(f.kind));
  const nextStart = (f: FaultAvailability) => starts.reduce((m, n) => (n.time > f.start && n.time < m ? n.time : m), Number.POSITIVE_INFINITY);
  const singleFigures = (list: FaultAvailability[], ms: (f: FaultAvailability) => number | undefined): Figures => {
    const measured = new Set(list);
    // When a fault stopped mattering for this figure: at its start if the figure does not apply to it.
    const resolvedAt = (g: FaultAvailability) => {
      const v = ms(g);
      if (v !== undefined) return g.start + v;
      return measured.has(g) || (g.partitions.length > 0 && COMPOUND_FAULTS.has(g.kind)) ? Number.POSITIVE_INFINITY : g.start;
    };
    const clean = list.filter((f) => {
      if (faults.some((g) => g.start < f.start && resolvedAt(g) > f.start)) return false;
      const v = ms(f);
      return v !== undefined ? nextStart(f) >= f.start + v : nextStart(f) === Number.POSITIVE_INFINITY;
    });
    return { ...figures(clean.map(ms)), overlapped: list.length - clean.length };
  };
  const single = {
    writeFailover: singleFigures(
      singleFaults.filter((f) => f.partitions.length > 0 && f.kind !== 'kill-consumer'),
      (f) => f.writeMs,
    ),
    consumeFailover: singleFigures(
      singleFaults.filter((f) => f.partitions.length > 0),
      (f) => f.consumeMs,
    ),
    maxStall: { ms: 0 } as CheckReport['maxStall'],
  };
  const compoundIntervals = starts.filter((n) => COMPOUND_FAULTS.has(n.kind)).map((n) => ({ from: n.time, to: endOf.get(n.id) ?? Number.POSITIVE_INFINITY }));
  const duringCompound = (from: number, to: number) => compoundIntervals.some((c) => c.from < to && from < c.to);

  // ---- producer stalls while the partition's leader was alive ----
  const downIntervals = starts.map((n) => ({ brokers: n.brokers, from: n.time, to: endOf.get(n.id) ?? Number.POSITIVE_INFINITY }));
  const down = (b: number, t: number) => downIntervals.some((d) => d.from <= t && t < d.to && d.brokers.includes(b));
  const statusTimes = statuses.map((s) => s.time);
  const aliveTime = (p: number, from: number, to: number): number => {
    if (statuses.length === 0) return 0;
    let total = 0;
    let i = Math.max(0, lowerBound(statusTimes, from + 1) - 1);
    for (; i < statuses.length && statuses[i]!.time < to; i++) {
      const s = statuses[i]!;
      const a = Math.max(from, s.time);
      const b = Math.min(to, i + 1 < statuses.length ? statuses[i + 1]!.time : to);
      if (b <= a) continue;
      const leader = s.leaders[p] ?? -1;
      // piecewise: the leader may go down between samples
      if (leader < 0) continue;
      const step = 50;
      for (let t = a; t < b; t += step) if (!down(leader, t)) total += Math.min(step, b - t);
    }
    return total;
  };
  const maxStall: CheckReport['maxStall'] = { ms: 0 };
  for (const [p, list] of ackTimes) {
    const lastSend = sends.filter((s) => s.partition === p && s.producer !== 'transactional').reduce((m, s) => Math.max(m, s.start), 0);
    const times = list.map((s) => s.end);
    if (lastSend > (times[times.length - 1] ?? 0)) times.push(lastSend);
    for (let i = 1; i < times.length; i++) {
      const gap = times[i]! - times[i - 1]!;
      if (gap < 200) continue;
      const alive = aliveTime(p, times[i - 1]!, times[i]!);
      if (alive > maxStall.ms) {
        maxStall.ms = alive;
        maxStall.partition = p;
        maxStall.from = times[i - 1];
      }
      if (alive > single.maxStall.ms && !duringCompound(times[i - 1]!, times[i]!)) single.maxStall = { ms: alive, partition: p, from: times[i - 1] };
    }
  }

  // ---- which fault preceded each anomaly ----
  const sortedStarts = [...starts].sort((a, b) => a.time - b.time);
  const t0 = opts.t0 ?? ops.reduce((m, o) => Math.min(m, 'start' in o ? o.start : 'time' in o ? o.time : m), Number.POSITIVE_INFINITY);
  for (const a of anomalies) {
    let last: NemesisOp | undefined;
    for (const n of sortedStarts) if (n.time <= a.time) last = n;
    if (!last) {
      a.fault = 'none before it';
      continue;
    }
    const e = endOf.get(last.id);
    const when = e === undefined || a.time < e ? 'during it' : `${((a.time - e) / 1000).toFixed(1)} s after it ended`;
    a.fault = `#${last.id} ${last.kind} (${last.targets.join(', ')}) at +${((last.time - t0) / 1000).toFixed(1)}s, ${when}`;
  }

  let txnCommitted = 0;
  let txnAborted = 0;
  let txnUnknown = 0;
  for (const t of txns.values()) {
    if (t.status === 'committed') txnCommitted++;
    else if (t.status === 'aborted') txnAborted++;
    else txnUnknown++;
  }
  return {
    anomalies,
    counts,
    unverifiedPartitions,
    stats: {
      ackedWrites: sends.filter((s) => s.outcome === 'ok' && (s.txn === undefined || txns.get(s.txn)?.status === 'committed')).length,
      unknownWrites: sends.filter((s) => s.outcome === 'info').length,
      failedWrites: sends.filter((s) => s.outcome === 'fail').length,
      deliveries: polls.length,
      commits: commits.filter((c) => c.outcome === 'ok').length,
      txnCommitted,
      txnAborted,
      txnUnknown,
      plainDuplicates,
    },
    faults,
    faultCounts,
    writeFailover,
    consumeFailover,
    maxStall,
    single,
  };
}

export function safetyAnomalyCount(r: CheckReport): number {
  return SAFETY_KINDS.reduce((n, k) => n + r.counts[k], 0);
}
