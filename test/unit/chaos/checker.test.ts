import { describe, expect, it } from 'vitest';
import { type AnomalyKind, check, SAFETY_KINDS, safetyAnomalyCount } from '../../chaos/checker.js';
import type { CommitOp, FetchOffsetOp, FinalPartition, NemesisOp, Op, PollOp, SendOp, StatusOp, TxnOp } from '../../chaos/history.js';

// ---- tiny builders ----

let seq = 0;
function send(value: string, partition: number, offset: number | undefined, start: number, end: number, o: Partial<SendOp> = {}): SendOp {
  return {
    f: 'send',
    process: 'idem',
    producer: 'idempotent',
    seq: seq++,
    partition,
    value,
    start,
    end,
    outcome: offset === undefined ? 'info' : 'ok',
    offset,
    ...o,
  };
}
function poll(value: string, partition: number, offset: number, time: number, o: Partial<PollOp> = {}): PollOp {
  return { f: 'poll', process: 'c0.1', member: 'm0', partition, offset, value, ag: 1, time, ...o };
}
function commit(partition: number, offset: number, start: number, end: number, o: Partial<CommitOp> = {}): CommitOp {
  return { f: 'commit', process: 'c0.1', member: 'm0', generation: 1, offsets: [{ partition, offset }], start, end, outcome: 'ok', ...o };
}
function txn(
  id: string,
  action: 'commit' | 'abort',
  values: string[],
  begin: number,
  start: number,
  end: number,
  outcome: 'ok' | 'fail' | 'info' = 'ok',
): TxnOp {
  return { f: 'txn', process: 'tx0', txn: id, action, begin, start, end, outcome, values };
}
/** A final log of one partition from [value, flags] entries at offsets 0..n-1. */
function log(
  partition: number,
  entries: Array<string | { value: string; control?: boolean; txn?: boolean; hidden?: boolean }>,
  groupCommitted?: number,
): FinalPartition {
  const records = entries.map((e, offset) => {
    const x = typeof e === 'string' ? { value: e } : e;
    return { offset, value: x.value, control: x.control ?? false, transactional: x.txn ?? false, hidden: x.hidden ?? x.control ?? false };
  });
  return {
    partition,
    records: records.map(({ hidden: _, ...r }) => r),
    visible: records.filter((r) => !r.hidden).map((r) => r.offset),
    hwm: records.length,
    lso: records.length,
    groupCommitted,
  };
}

function kinds(ops: Op[], final: FinalPartition[], partitions = 1): Partial<Record<AnomalyKind, number>> {
  const r = check(ops, final, { partitions });
  return Object.fromEntries(Object.entries(r.counts).filter(([, n]) => n > 0));
}

/** A clean run: writes acked in order, delivered in order, committed, one committed and one aborted txn. */
function cleanHistory(): { ops: Op[]; final: FinalPartition[] } {
  const ops: Op[] = [
    send('i-0', 0, 0, 0, 5),
    send('i-1', 0, 1, 6, 10),
    send('p-0', 0, 2, 11, 15, { process: 'plain', producer: 'plain' }),
    send('t0-0-0', 0, 3, 20, 22, { process: 'tx0', producer: 'transactional', txn: 't0-0' }),
    txn('t0-0', 'commit', ['t0-0-0'], 18, 23, 30),
    send('t0-1-0', 0, 5, 31, 33, { process: 'tx0', producer: 'transactional', txn: 't0-1' }),
    txn('t0-1', 'abort', ['t0-1-0'], 31, 34, 40),
    poll('i-0', 0, 0, 12),
    poll('i-1', 0, 1, 13),
    poll('p-0', 0, 2, 16),
    commit(0, 3, 17, 19),
    poll('t0-0-0', 0, 3, 31),
    commit(0, 4, 41, 45),
    { f: 'fetch-offset', process: 'c1.1', partition: 0, start: 50, end: 51, outcome: 'ok', offset: 4, committed: true } satisfies FetchOffsetOp,
  ];
  const final = [
    log(
      0,
      [
        'i-0',
        'i-1',
        'p-0',
        { value: 't0-0-0', txn: true },
        { value: 'C', control: true, txn: true },
        { value: 't0-1-0', txn: true, hidden: true },
        { value: 'A', control: true, txn: true },
      ],
      4,
    ),
  ];
  return { ops, final };
}

describe('chaos history checker', () => {
  it('passes a clean history', () => {
    const { ops, final } = cleanHistory();
    const r = check(ops, final, { partitions: 1 });
    expect(r.anomalies).toEqual([]);
    expect(safetyAnomalyCount(r)).toBe(0);
    expect(r.stats.ackedWrites).toBe(4);
    expect(r.stats.txnCommitted).toBe(1);
    expect(r.stats.txnAborted).toBe(1);
    expect(r.unverifiedPartitions).toEqual([]);
  });

  it('reports a partition the final read did not cover', () => {
    const { ops, final } = cleanHistory();
    expect(check(ops, final, { partitions: 2 }).unverifiedPartitions).toEqual([1]);
  });

  describe('lost-write', () => {
    it('an acknowledged value missing from the final log', () => {
      expect(kinds([send('i-0', 0, 0, 0, 1), send('i-1', 0, 1, 2, 3)], [log(0, ['i-0'])])).toEqual({ 'lost-write': 1 });
    });
    it('an acknowledged value at another offset than acknowledged', () => {
      const r = check([send('i-0', 0, 0, 0, 1), send('i-1', 0, 1, 2, 3)], [log(0, ['i-0', 'x', 'i-1'])], { partitions: 1 });
      expect(r.counts['lost-write']).toBe(1);
      expect(r.anomalies.find((a) => a.kind === 'lost-write')!.detail).toMatch(/found at 0:2/);
    });
    it('a record of a committed transaction missing or hidden', () => {
      const ops: Op[] = [
        send('t-0', 0, 0, 0, 1, { producer: 'transactional', txn: 't' }),
        send('t-1', 0, 1, 0, 1, { producer: 'transactional', txn: 't' }),
        txn('t', 'commit', ['t-0', 't-1'], 0, 2, 3),
      ];
      expect(
        kinds(ops, [
          log(0, [
            { value: 't-0', txn: true },
            { value: 't-1', txn: true, hidden: true },
          ]),
        ])['lost-write'],
      ).toBe(1);
    });
    it('a delivered value gone from the final log', () => {
      expect(kinds([send('p-0', 0, undefined, 0, 1, { producer: 'plain' }), poll('p-0', 0, 0, 2)], [log(0, [])])).toMatchObject({ 'lost-write': 1 });
    });
    it('ignores sends that were not acknowledged', () => {
      expect(kinds([send('i-0', 0, undefined, 0, 1), send('i-1', 0, undefined, 0, 1, { outcome: 'fail' })], [log(0, [])])).toEqual({});
    });
  });

  it('inconsistent-offset: one offset acknowledged with one value and delivered with another', () => {
    const ops = [send('i-0', 0, 0, 0, 1), poll('i-9', 0, 0, 2), send('i-9', 0, undefined, 0, 1)];
    expect(kinds(ops, [log(0, ['i-0'])])).toMatchObject({ 'inconsistent-offset': 1 });
    // two acks at one offset (an old leader acknowledging a truncated record)
    const r = kinds([send('i-0', 0, 0, 0, 1), send('i-1', 0, 0, 2, 3)], [log(0, ['i-1'])]);
    expect(r['inconsistent-offset']).toBe(1);
    expect(r['lost-write']).toBe(1);
  });

  describe('duplicate', () => {
    it('an idempotent value at two offsets', () => {
      expect(kinds([send('i-0', 0, 0, 0, 1)], [log(0, ['i-0', 'i-0'])])).toEqual({ duplicate: 1 });
    });
    it('a transactional value at two offsets', () => {
      const ops = [send('t-0', 0, 0, 0, 1, { producer: 'transactional', txn: 't' }), txn('t', 'commit', ['t-0'], 0, 2, 3)];
      expect(
        kinds(ops, [
          log(0, [
            { value: 't-0', txn: true },
            { value: 't-0', txn: true },
          ]),
        ]),
      ).toEqual({ duplicate: 1 });
    });
    it('the plain producer may duplicate: counted, not an anomaly', () => {
      const r = check([send('p-0', 0, 1, 0, 1, { producer: 'plain' })], [log(0, ['p-0', 'p-0'])], { partitions: 1 });
      expect(safetyAnomalyCount(r)).toBe(0);
      expect(r.stats.plainDuplicates).toBe(1);
    });
  });

  describe('poll-skip', () => {
    const final = () => [log(0, ['a', 'b', 'c', 'd'])];
    it('a member resuming above every offset the group could have committed', () => {
      const ops = [commit(0, 1, 10, 11), poll('d', 0, 3, 20, { process: 'c1.1', ag: 1 })];
      const r = check(ops, final(), { partitions: 1 });
      expect(r.counts['poll-skip']).toBeGreaterThanOrEqual(1);
      expect(r.anomalies[0]!.detail).toMatch(/could have committed at most 1/);
    });
    it('an unacknowledged commit counts as possibly committed', () => {
      const ops = [commit(0, 3, 10, 11, { outcome: 'info' }), poll('d', 0, 3, 20, { process: 'c1.1' })];
      expect(kinds(ops, [log(0, ['a', 'b', 'c', 'd'])])).toEqual({});
    });
    it('consecutive deliveries skipping a visible record', () => {
      const ops = [poll('a', 0, 0, 1), poll('b', 0, 1, 2), poll('d', 0, 3, 3)];
      expect(kinds(ops, final())).toEqual({ 'poll-skip': 1 });
    });
    it('stepping over aborted and control records is no skip', () => {
      const ops = [poll('a', 0, 0, 1), poll('d', 0, 3, 3)];
      expect(kinds(ops, [log(0, ['a', { value: 'x', txn: true, hidden: true }, { value: 'A', control: true }, 'd'])])).toEqual({});
    });
    it('a visible record below the committed offset that no member received', () => {
      const ops = [poll('a', 0, 0, 1), commit(0, 1, 2, 3), poll('c', 0, 2, 5, { ag: 2 })];
      const r = check(ops, [log(0, ['a', 'b', 'c', 'd'], 3)], { partitions: 1 });
      expect(r.counts['poll-skip']).toBe(2); // the resume above the commit, and b never delivered
    });
  });

  describe('nonmonotonic-send', () => {
    it('an idempotent producer whose later send got a lower offset', () => {
      const ops = [send('i-0', 0, 1, 0, 5), send('i-1', 0, 0, 1, 6)];
      expect(kinds(ops, [log(0, ['i-1', 'i-0'])])).toEqual({ 'nonmonotonic-send': 1 });
    });
    it('a plain producer in real time', () => {
      const ops = [send('p-0', 0, 1, 0, 1, { producer: 'plain', process: 'plain' }), send('p-1', 0, 0, 2, 3, { producer: 'plain', process: 'plain' })];
      expect(kinds(ops, [log(0, ['p-1', 'p-0'])])).toEqual({ 'nonmonotonic-send': 1 });
    });
    it('concurrent plain sends may land in either order', () => {
      const ops = [send('p-0', 0, 1, 0, 5, { producer: 'plain', process: 'plain' }), send('p-1', 0, 0, 1, 6, { producer: 'plain', process: 'plain' })];
      expect(kinds(ops, [log(0, ['p-1', 'p-0'])])).toEqual({});
    });
    it('within one transaction', () => {
      const ops = [
        send('t-0', 0, 1, 0, 5, { producer: 'transactional', txn: 't', process: 'tx0' }),
        send('t-1', 0, 0, 1, 6, { producer: 'transactional', txn: 't', process: 'tx0' }),
        txn('t', 'commit', ['t-0', 't-1'], 0, 7, 8),
      ];
      expect(
        kinds(ops, [
          log(0, [
            { value: 't-1', txn: true },
            { value: 't-0', txn: true },
          ]),
        ]),
      ).toEqual({ 'nonmonotonic-send': 1 });
    });
  });

  it('nonmonotonic-poll: an offset delivered again within one installation', () => {
    const ops = [poll('a', 0, 0, 1), poll('b', 0, 1, 2), poll('a', 0, 0, 3)];
    expect(kinds(ops, [log(0, ['a', 'b'])])).toEqual({ 'nonmonotonic-poll': 1 });
    // a new installation (rebalance) may start over from the committed offset
    expect(kinds([poll('a', 0, 0, 1), poll('b', 0, 1, 2), poll('a', 0, 0, 3, { ag: 2 })], [log(0, ['a', 'b'])])).toEqual({});
  });

  describe('transactions', () => {
    const tx = (id: string, value: string, offset: number) => send(value, 0, offset, 0, 1, { producer: 'transactional', process: 'tx0', txn: id });
    it('aborted-read: a delivered record of an aborted transaction', () => {
      const ops = [tx('t', 't-0', 0), txn('t', 'abort', ['t-0'], 0, 2, 3), poll('t-0', 0, 0, 4)];
      expect(
        kinds(ops, [
          log(0, [
            { value: 't-0', txn: true, hidden: true },
            { value: 'A', control: true },
          ]),
        ]),
      ).toEqual({ 'aborted-read': 1 });
    });
    it('aborted-read: a record of an aborted transaction visible in the final log', () => {
      const ops = [tx('t', 't-0', 0), txn('t', 'abort', ['t-0'], 0, 2, 3)];
      expect(
        kinds(ops, [
          log(0, [
            { value: 't-0', txn: true },
            { value: 'A', control: true },
          ]),
        ]),
      ).toEqual({ 'aborted-read': 1 });
    });
    it('aborted-read: a delivered record that the log has as aborted (outcome unknown to the client)', () => {
      const ops = [tx('t', 't-0', 0), txn('t', 'commit', ['t-0'], 0, 2, 3, 'info'), poll('t-0', 0, 0, 4)];
      expect(
        kinds(ops, [
          log(0, [
            { value: 't-0', txn: true, hidden: true },
            { value: 'A', control: true },
          ]),
        ]),
      ).toEqual({ 'aborted-read': 1 });
    });
    it('uncommitted-read: a record delivered before its commit was requested', () => {
      const ops = [tx('t', 't-0', 0), poll('t-0', 0, 0, 2), txn('t', 'commit', ['t-0'], 0, 5, 6)];
      expect(
        kinds(ops, [
          log(0, [
            { value: 't-0', txn: true },
            { value: 'C', control: true },
          ]),
        ]),
      ).toEqual({ 'uncommitted-read': 1 });
    });
    it('txn-atomicity: a transaction of unknown outcome partly visible', () => {
      const ops = [tx('t', 't-0', 0), tx('t', 't-1', 1), txn('t', 'commit', ['t-0', 't-1'], 0, 2, 3, 'info')];
      const final = [
        log(0, [
          { value: 't-0', txn: true },
          { value: 't-1', txn: true, hidden: true },
        ]),
      ];
      expect(kinds(ops, final)).toEqual({ 'txn-atomicity': 1 });
      // all or nothing is fine either way
      expect(
        kinds(ops, [
          log(0, [
            { value: 't-0', txn: true },
            { value: 't-1', txn: true },
          ]),
        ]),
      ).toEqual({});
      expect(
        kinds(ops, [
          log(0, [
            { value: 't-0', txn: true, hidden: true },
            { value: 't-1', txn: true, hidden: true },
          ]),
        ]),
      ).toEqual({});
    });
  });

  describe('commit-regression', () => {
    const consumed = [poll('a', 0, 0, -3), poll('b', 0, 1, -2), poll('c', 0, 2, -1)];
    it('an acknowledged commit below one acknowledged before it was sent', () => {
      const ops = [...consumed, commit(0, 3, 0, 1), commit(0, 2, 2, 3, { process: 'c1.1' })];
      expect(kinds(ops, [log(0, ['a', 'b', 'c'], 3)])).toEqual({ 'commit-regression': 1 });
    });
    it('concurrent commits may land in either order', () => {
      const ops = [...consumed, commit(0, 3, 0, 5), commit(0, 2, 1, 6, { process: 'c1.1' })];
      expect(kinds(ops, [log(0, ['a', 'b', 'c'], 3)])).toEqual({});
    });
    it('FETCH_OFFSET answering below an acknowledged commit (stale coordinator)', () => {
      const fetch: FetchOffsetOp = { f: 'fetch-offset', process: 'c1.1', partition: 0, start: 5, end: 6, outcome: 'ok', offset: 1, committed: true };
      expect(kinds([...consumed, commit(0, 2, 0, 1), fetch], [log(0, ['a', 'b', 'c'], 2)])).toEqual({ 'commit-regression': 1 });
    });
    it('a final committed offset below an acknowledged commit', () => {
      expect(kinds([...consumed, commit(0, 2, 0, 1)], [log(0, ['a', 'b', 'c'], 1)])).toEqual({ 'commit-regression': 1 });
    });
  });

  it('names the fault that preceded each anomaly', () => {
    const start: NemesisOp = { f: 'nemesis', id: 3, kind: 'pause-leader', phase: 'start', time: 100, targets: ['broker 1'], brokers: [1], partitions: [0] };
    const end: NemesisOp = { ...start, phase: 'end', time: 200 };
    const r = check([start, end, send('i-0', 0, 0, 150, 250)], [log(0, [])], { partitions: 1 });
    expect(r.anomalies[0]!.fault).toMatch(/#3 pause-leader \(broker 1\) at \+0\.0s, 0\.1 s after it ended/);
  });

  it('computes failover figures and stalls with a live leader', () => {
    const status = (time: number, leader: number): StatusOp => ({ f: 'status', time, controller: 0, leaders: [leader], isr: [[leader]] });
    const start: NemesisOp = { f: 'nemesis', id: 1, kind: 'kill-broker', phase: 'start', time: 1000, targets: ['broker 0'], brokers: [0], partitions: [0] };
    const ops: Op[] = [
      status(0, 0),
      send('i-0', 0, 0, 900, 950),
      start,
      status(1000, 0),
      // the new leader shows up at 1500; the next ack comes 4 s after that
      status(1500, 1),
      { ...start, phase: 'end', time: 3000 },
      send('i-1', 0, 1, 1001, 5500),
      poll('i-1', 0, 1, 5600),
    ];
    const r = check(ops, [log(0, ['i-0', 'i-1'])], { partitions: 1 });
    expect(r.faults).toHaveLength(1);
    expect(r.faults[0]!.writeMs).toBe(4500);
    expect(r.faults[0]!.consumeMs).toBe(4600);
    expect(r.writeFailover).toMatchObject({ median: 4500, worst: 4500, unresolved: 0 });
    expect(r.maxStall.ms).toBeGreaterThanOrEqual(3950);
    expect(r.maxStall.ms).toBeLessThanOrEqual(4050);
    expect(r.faultCounts).toEqual({ 'kill-broker': 1 });
  });

  it('does not count a cut-off leader as live, only the live leaders either side of it', () => {
    // The chaos run's 5.1 s stall: broker 1 is black-holed while leading nothing, the controller then
    // moves the partition onto it (preferred leader, its lease still valid), and back once the lease expires.
    const status = (time: number, leader: number): StatusOp => ({ f: 'status', time, controller: 2, leaders: [leader], isr: [[0, 1, 2]] });
    const start: NemesisOp = { f: 'nemesis', id: 21, kind: 'partition-broker', phase: 'start', time: 1000, targets: ['broker 1'], brokers: [1], partitions: [] };
    const ops: Op[] = [
      status(0, 2),
      send('i-0', 0, 0, 900, 950),
      start,
      status(1500, 1),
      status(2900, 2),
      send('i-1', 0, 1, 1001, 7300),
      { ...start, phase: 'end', time: 8000 },
    ];
    const r = check(ops, [log(0, ['i-0', 'i-1'])], { partitions: 1 });
    // 950-1500 and 2900-7300 on broker 2; 1500-2900 on the cut-off broker 1 is left out
    expect(r.maxStall.ms).toBeGreaterThanOrEqual(4900);
    expect(r.maxStall.ms).toBeLessThanOrEqual(5000);
  });

  it('leaves a single fault out of the single-fault figures when the next fault began before it was resolved, or it began before an earlier one was', () => {
    const nem = (id: number, kind: NemesisOp['kind'], time: number, held: number): NemesisOp[] => {
      const start: NemesisOp = { f: 'nemesis', id, kind, phase: 'start', time, targets: ['c0.1'], brokers: [], partitions: [0] };
      return [start, { ...start, phase: 'end', time: time + held }];
    };
    const ops: Op[] = [
      // #1 resolved 3 s after it began, before #2 began: counted
      ...nem(1, 'kill-consumer', 1000, 500),
      send('i-0', 0, 0, 1500, 1510),
      poll('i-0', 0, 0, 4000),
      // #2 resolved 7 s after it began, but #3 began 4 s after it: left out
      ...nem(2, 'kill-consumer', 10_000, 500),
      send('i-1', 0, 1, 10_500, 10_510),
      ...nem(3, 'kill-consumer', 14_000, 500),
      poll('i-1', 0, 1, 17_000),
      send('i-2', 0, 2, 20_000, 20_010),
      poll('i-2', 0, 2, 20_100),
    ];
    const r = check(ops, [log(0, ['i-0', 'i-1', 'i-2'])], { partitions: 1 });
    expect(r.faults.map((f) => f.consumeMs)).toEqual([3000, 7000, 6100]);
    expect(r.consumeFailover).toMatchObject({ worst: 7000, count: 3 });
    // #3 is followed by no fault, but began while #2 was unresolved (its figure counts #2's wait too):
    // left out as well; only #1 is a single fault
    expect(r.single.consumeFailover).toMatchObject({ worst: 3000, count: 1, overlapped: 2 });
  });

  it('lists every safety kind', () => {
    expect(SAFETY_KINDS).toHaveLength(10);
  });
});
