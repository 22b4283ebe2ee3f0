/**
 * kill -9 in the middle of a transaction that writes to two partitions of a data topic and sends
 * consumer-group offsets (consume-process-produce), against a real broker process:
 *  (a) killed before END_TXN: the restarted coordinator aborts the transaction as it loads (it could only
 *      be aborted), releasing the LSO at once; the next INIT_PRODUCER_ID fences the old producer;
 *  (b) killed between the commit decision and the markers (failpoints txn.after_decision and
 *      txn.after_offsets) and (c) after the markers (txn.after_markers): the restarted broker finishes the
 *      commit before it serves, and the records and offsets are applied exactly once;
 *  and the abort counterpart of (b): a decided abort stays an abort, nothing visible, offsets unchanged.
 * Every scenario has its own data directory; a broker armed with a failpoint is replaced, after it died,
 * by a new process on the same directory without it (the launcher keeps its env across relaunches).
 */
import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { GroupMember, fetchOffset } from '../integration/groups/helpers.js';
import { RawTxnProducer, type ReadRecord, offsets, readAll } from '../integration/transactions/helpers.js';
import { eventually, expectError, removeDir, tempDir } from '../helpers/util.js';

const ARGS = ['--offsets-topic-partitions', '2', '--transaction-state-partitions', '2', '--group-join-window-ms', '20', '--flush', 'always'];
const IN = 'k9t-in';
const OUT = 'k9t-out';
const GROUP = 'k9t-g';
const CLIENT = 'k9t-m';
const TXN_ID = 'k9t-txn';
const IN_RECORDS = 5;
/** Offsets the transaction sends for the input topic; before it, P0 is committed at 1 and P1 not at all. */
const SENT = { 0: 4, 1: 3 } as const;
const BEFORE = { 0: { offset: 1, committed: true }, 1: { offset: 0, committed: false } } as const;
/** Short enough to wait for, long enough that a restart finishes well before it fires. */
const TIMEOUT_MS = 3000;

type Failpoint = 'txn.after_decision' | 'txn.after_offsets' | 'txn.after_markers';

interface Written {
  partition: number;
  offset: number;
  value: string;
}

/** One scenario: its data directory and every broker process started on it. */
class Scenario {
  readonly brokers: BrokerProcess[] = [];
  private constructor(readonly dataDir: string) {}

  static async create(): Promise<Scenario> {
    return new Scenario(await tempDir('tributary-txn-k9-'));
  }

  async start(failpoints = ''): Promise<BrokerProcess> {
    // Always set, so a TRIBUTARY_FAILPOINTS inherited from the environment never arms a relaunch.
    const b = await BrokerProcess.start({ dataDir: this.dataDir, args: ARGS, env: { TRIBUTARY_FAILPOINTS: failpoints } });
    this.brokers.push(b);
    return b;
  }

  async dispose(): Promise<void> {
    for (const b of this.brokers) await b.dispose().catch(() => {});
    await removeDir(this.dataDir);
  }
}

/** Waits for a broker that is about to kill itself at a failpoint; asserts it died of SIGKILL. */
async function waitForSelfKill(b: BrokerProcess, timeoutMs = 5000): Promise<void> {
  const proc = b.proc!;
  if (proc.exitCode === null && proc.signalCode === null) {
    const timer = setTimeout(() => proc.emit('error', new Error('the broker did not die at its failpoint')), timeoutMs);
    try {
      await once(proc, 'exit');
    } finally {
      clearTimeout(timer);
    }
  }
  expect(proc.signalCode).toBe('SIGKILL');
}

/** The broker is serving right away: it prints its listening line only after recovery finished. */
async function expectReadyNow(b: BrokerProcess): Promise<void> {
  expect((await b.health('/ready')).status).toBe(200);
}

interface Setup {
  admin: Connection;
  member: GroupMember;
  producer: RawTxnProducer;
  /** The transaction's records, in the order they were published. */
  written: Written[];
  /** Log end of each output partition before the transaction (one plain record each). */
  leoBefore: number[];
  /** Client time just before BEGIN_TXN (the coordinator's start of the transaction is not earlier). */
  beganAt: number;
}

/**
 * Topics, a group member owning both input partitions (P0 committed at 1), one plain record per output
 * partition, then a transaction left open: 3 records on each output partition (interleaved) and the
 * offsets SENT staged for the group.
 */
async function openTransaction(broker: BrokerProcess, initExtra: Record<string, number> = {}): Promise<Setup> {
  const admin = await broker.connect();
  await admin.command('CREATE', { topic: IN, partitions: 2 });
  await admin.command('CREATE', { topic: OUT, partitions: 2 });
  for (let p = 0; p < 2; p++) {
    for (let i = 0; i < IN_RECORDS; i++) await admin.command('PUBLISH', { topic: IN, partition: p, message: `in-p${p}-${i}` });
    await admin.command('PUBLISH', { topic: OUT, partition: p, message: `plain-p${p}` });
  }
  const member = await GroupMember.connect(broker, IN, GROUP, CLIENT);
  await member.join({ session_timeout_ms: 60_000 });
  await member.sync();
  expect(member.owned).toEqual([0, 1]);
  await member.commit(0, BEFORE[0].offset);

  const producer = new RawTxnProducer(await broker.connect(), TXN_ID);
  await producer.init(initExtra);
  const beganAt = Date.now();
  await producer.begin();
  const written: Written[] = [];
  for (let i = 0; i < 6; i++) {
    const partition = i % 2;
    const value = `txn-${i}`;
    const r = await producer.publish(OUT, value, { partition });
    expect(r).toMatchObject({ partition, duplicate: false });
    written.push({ partition, offset: r.offset, value });
  }
  expect(await producer.sendOffsets(IN, GROUP, member.id, member.generation, `P0:${SENT[0]},P1:${SENT[1]}`)).toBe(2);
  const status = await producer.status();
  expect({ state: status.get('state'), partitions: status.get('partitions'), offsets: status.get('offsets') }).toEqual({
    state: 'open',
    partitions: '2',
    offsets: '2',
  });
  return { admin, member, producer, written, leoBefore: [1, 1], beganAt };
}

function ofPartition(written: Written[], p: number): Written[] {
  return written.filter((w) => w.partition === p);
}

/** The same member (id, generation, assignments) on a connection to the restarted broker. */
async function sameMember(broker: BrokerProcess, m: GroupMember): Promise<GroupMember> {
  const again = new GroupMember(await broker.connect(), IN, GROUP, CLIENT);
  Object.assign(again, { id: m.id, generation: m.generation, owned: [...m.owned] });
  return again;
}

/** The same producer (id, epoch) on a connection to the restarted broker. */
async function sameProducer(broker: BrokerProcess, p: RawTxnProducer): Promise<RawTxnProducer> {
  const again = new RawTxnProducer(await broker.connect(), TXN_ID);
  Object.assign(again, { producerId: p.producerId, epoch: p.epoch, seq: p.seq });
  return again;
}

function dataRecords(rs: ReadRecord[]): ReadRecord[] {
  return rs.filter((r) => !r.control);
}

/** Nothing of the transaction is visible, the LSO is released, the offsets are as before it. */
async function expectAbortedEffects(c: Connection, s: Setup): Promise<void> {
  for (let p = 0; p < 2; p++) {
    const committed = await readAll(c, OUT, p, 'read_committed');
    expect(committed.map((r) => r.value)).toEqual([`plain-p${p}`]);
    const o = await offsets(c, OUT, p);
    expect(o.latest).toBe(o.leo);
    // An abort marker closes the transaction on each partition; the data records stay stored once.
    const raw = await readAll(c, OUT, p, 'read_uncommitted');
    expect(dataRecords(raw).map((r) => r.value)).toEqual([`plain-p${p}`, ...ofPartition(s.written, p).map((w) => w.value)]);
    expect(raw.filter((r) => r.control).length).toBeGreaterThanOrEqual(1);
  }
  expect(await fetchOffset(c, IN, GROUP, 0)).toEqual(BEFORE[0]);
  expect(await fetchOffset(c, IN, GROUP, 1)).toEqual(BEFORE[1]);
}

describe('transactions across kill -9', () => {
  let scenario: Scenario | undefined;

  afterEach(async () => {
    await scenario?.dispose();
    scenario = undefined;
  });

  describe('(a) killed before END_TXN', () => {
    it('is aborted by the coordinator as it loads (epoch kept, LSO released at once); offsets never move', async () => {
      scenario = await Scenario.create();
      const broker = await scenario.start();
      const s = await openTransaction(broker, { transaction_timeout_ms: TIMEOUT_MS });
      await broker.kill('SIGKILL');
      await broker.relaunch();
      await expectReadyNow(broker);
      const c = await broker.connect();
      const p = await sameProducer(broker, s.producer);
      // Which of its records were acknowledged is not known: it can only be aborted, and the restarted
      // coordinator does so itself rather than holding read_committed readers until its timeout.
      const st = await eventually('the recovered transaction to be aborted', async () => {
        const x = await p.status();
        return x.get('state') === 'aborted' ? x : undefined;
      });
      expect(Number(st.get('epoch'))).toBe(s.producer.epoch);
      expect(st.get('abort_reason')).toMatch(/restarted or moved/);
      await expectAbortedEffects(c, s);
      await expectError(p.publish(OUT, 'after-restart', { partition: 0 }), 'invalid_txn_state');
      await expectError(p.end('commit'), 'invalid_txn_state', { state: 'aborted' });
      expect(await p.end('abort')).toBe('aborted');
      // Its producer goes on with the same epoch.
      await p.begin();
      expect((await p.status()).get('state')).toBe('open');
      expect(await p.end('abort')).toBe('aborted');
      // The member is still there, and the offsets it did not send through a commit stay its own to move.
      const m = await sameMember(broker, s.member);
      await expectError(m.commit(0, 0), 'offset_regression');
      await m.commit(1, 2);
      expect(await fetchOffset(c, IN, GROUP, 1)).toEqual({ offset: 2, committed: true });
    });

    it('the next INIT_PRODUCER_ID of the transactional id fences the old producer; the new producer commits', async () => {
      scenario = await Scenario.create();
      const broker = await scenario.start();
      const s = await openTransaction(broker);
      await broker.kill('SIGKILL');
      await broker.relaunch();
      await expectReadyNow(broker);
      const c = await broker.connect();
      const old = await sameProducer(broker, s.producer);
      await eventually('the recovered transaction to be aborted', async () => (await old.status()).get('state') === 'aborted');

      const fresh = new RawTxnProducer(await broker.connect(), TXN_ID);
      await fresh.init();
      expect(fresh.producerId).toBe(s.producer.producerId);
      expect(fresh.epoch).toBe(s.producer.epoch + 1);
      const st = await fresh.status();
      expect(st.get('state')).toBe('aborted');
      expect(st.get('abort_reason')).toMatch(/restarted or moved/);
      await expectAbortedEffects(c, s);
      await expectError(old.end('abort'), 'producer_fenced');
      await expectError(fresh.end('abort'), 'invalid_txn_state'); // that abort was the old producer's

      // The new producer runs a transaction of its own, with the same member's offsets.
      const m = await sameMember(broker, s.member);
      await fresh.begin();
      const next: Written[] = [];
      for (let i = 0; i < 4; i++) {
        const partition = i % 2;
        const r = await fresh.publish(OUT, `next-${i}`, { partition });
        next.push({ partition, offset: r.offset, value: `next-${i}` });
      }
      expect(await fresh.sendOffsets(IN, GROUP, m.id, m.generation, 'P0:5,P1:5')).toBe(2);
      await expectError(old.publish(OUT, 'zombie', { partition: 0 }), 'producer_fenced');
      expect(await fresh.end('commit')).toBe('committed');
      for (let p = 0; p < 2; p++) {
        const committed = await readAll(c, OUT, p, 'read_committed');
        expect(committed.map((r) => r.value)).toEqual([`plain-p${p}`, ...ofPartition(next, p).map((w) => w.value)]);
        expect(committed.slice(1).map((r) => r.offset)).toEqual(ofPartition(next, p).map((w) => w.offset));
        const o = await offsets(c, OUT, p);
        expect(o.latest).toBe(o.leo);
        expect(await fetchOffset(c, IN, GROUP, p)).toEqual({ offset: 5, committed: true });
      }
    });
  });

  /**
   * (b)/(c): a broker armed with the failpoint dies inside END_TXN; a new process on the same data
   * directory, without the failpoint, must have finished the transaction before it serves.
   */
  async function crashInEnd(failpoint: Failpoint, result: 'commit' | 'abort'): Promise<{ broker: BrokerProcess; s: Setup; c: Connection }> {
    scenario = await Scenario.create();
    const armed = await scenario.start(failpoint);
    const s = await openTransaction(armed);
    await expectError(s.producer.end(result), 'connection_lost');
    await waitForSelfKill(armed);
    const broker = await scenario.start();
    await expectReadyNow(broker);
    return { broker, s, c: await broker.connect() };
  }

  const commits: Array<{ failpoint: Failpoint; label: string }> = [
    { failpoint: 'txn.after_decision', label: '(b) killed after the commit decision, before offsets and markers' },
    { failpoint: 'txn.after_offsets', label: '(b) killed after the offsets were applied, before the markers' },
    { failpoint: 'txn.after_markers', label: '(c) killed after the markers, before the end record' },
  ];

  for (const { failpoint, label } of commits) {
    it(`${label}: committed exactly once after the restart, offsets applied once (${failpoint})`, async () => {
      const { broker, s, c } = await crashInEnd(failpoint, 'commit');
      const p = await sameProducer(broker, s.producer);
      // The first request after the restart already sees the end: recovery finished it before serving.
      const st = await p.status();
      expect({
        state: st.get('state'),
        producerId: st.get('producerId'),
        epoch: st.get('epoch'),
        partitions: st.get('partitions'),
        offsets: st.get('offsets'),
      }).toEqual({
        state: 'committed',
        producerId: s.producer.producerId,
        epoch: String(s.producer.epoch),
        partitions: '0',
        offsets: '0',
      });
      expect(st.has('abort_reason')).toBe(false);

      for (let part = 0; part < 2; part++) {
        const mine = ofPartition(s.written, part);
        // read_committed: every record of the transaction, once each, at its acknowledged offset, in order.
        const committed = await readAll(c, OUT, part, 'read_committed');
        expect(committed.map((r) => r.value)).toEqual([`plain-p${part}`, ...mine.map((w) => w.value)]);
        expect(committed.slice(1).map((r) => r.offset)).toEqual(mine.map((w) => w.offset));
        expect(committed.every((r) => !r.control)).toBe(true);
        const inOrder = committed.map((r) => r.offset);
        expect(inOrder).toEqual([...inOrder].sort((x, y) => x - y));
        // read_uncommitted: no data record stored twice; the commit marker once (twice at most when the
        // crash came after the markers, since recovery writes them again).
        const raw = await readAll(c, OUT, part, 'read_uncommitted');
        expect(dataRecords(raw).map((r) => r.value)).toEqual([`plain-p${part}`, ...mine.map((w) => w.value)]);
        const markers = raw.filter((r) => r.control).length;
        if (failpoint === 'txn.after_markers') {
          expect(markers).toBeGreaterThanOrEqual(1);
          expect(markers).toBeLessThanOrEqual(2);
        } else {
          expect(markers).toBe(1);
        }
        expect(raw.filter((r) => r.control).every((r) => r.offset > mine.at(-1)!.offset)).toBe(true);
        const o = await offsets(c, OUT, part);
        expect(o.latest).toBe(o.leo);
        // The offsets sent in the transaction, applied (and stable).
        expect(await fetchOffset(c, IN, GROUP, part)).toEqual({ offset: SENT[part as 0 | 1], committed: true });
      }

      // Applied once and durable as a real commit: a lower commit by the owner is still a regression.
      const m = await sameMember(broker, s.member);
      await expectError(m.commit(0, SENT[0] - 1), 'offset_regression', { current: String(SENT[0]) });
      await expectError(m.batchCommit(`P1:${SENT[1] - 1}`), 'offset_regression', { current: String(SENT[1]) });
      expect(await fetchOffset(c, IN, GROUP, 0)).toEqual({ offset: SENT[0], committed: true });

      // The producer's END_TXN commit, retried with its producer id and epoch, is answered again.
      expect(await p.end('commit')).toBe('committed');
      await expectError(p.end('abort'), 'invalid_txn_state', { state: 'committed' });
      // ...and the producer can go on with the next transaction at the same epoch.
      await p.begin();
      const r = await p.publish(OUT, 'after', { partition: 1 });
      expect(await p.end('commit')).toBe('committed');
      const last = await readAll(c, OUT, 1, 'read_committed', r.offset);
      expect(last.map((x) => x.value)).toEqual(['after']);
    });
  }

  it('(b, abort) killed after the abort decision: aborted after the restart, nothing visible, offsets unchanged', async () => {
    const { broker, s, c } = await crashInEnd('txn.after_decision', 'abort');
    const p = await sameProducer(broker, s.producer);
    const st = await p.status();
    expect({ state: st.get('state'), epoch: st.get('epoch'), partitions: st.get('partitions'), offsets: st.get('offsets') }).toEqual({
      state: 'aborted',
      epoch: String(s.producer.epoch),
      partitions: '0',
      offsets: '0',
    });
    await expectAbortedEffects(c, s);
    for (let part = 0; part < 2; part++) expect((await readAll(c, OUT, part, 'read_uncommitted')).filter((r) => r.control)).toHaveLength(1);
    expect(await p.end('abort')).toBe('aborted');
    await expectError(p.end('commit'), 'invalid_txn_state', { state: 'aborted' });
    // The offsets the transaction staged are free again: the owner commits below them.
    const m = await sameMember(broker, s.member);
    await m.commit(0, 2);
    expect(await fetchOffset(c, IN, GROUP, 0)).toEqual({ offset: 2, committed: true });
  });
});
