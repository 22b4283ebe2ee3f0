/**
 * The Consumer's side of fenced reads (docs/sdk.md, "Fenced reads") against a scripted broker: a read
 * refused with NOT_OWNER loses that partition at once (its signal aborts with the refusal, nothing of it
 * is delivered or committed afterwards, the member rejoins) while the other keeps going; a GEN_MISMATCH
 * on a read (the consumer's own rejoin racing it) loses nothing; and a consumer whose heartbeats go
 * unanswered for a session stops delivering until one is answered again.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Consumer, type ConsumerOptions, type RunOptions } from 'tributary-client/consumer.js';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { batchFrom as batchOf } from '../../helpers/scripted-group.js';
import { ScriptedServer } from '../../helpers/scripted-server.js';
import { sleep, until } from '../../helpers/util.js';

const TOPIC = 't';

/** A reply batch of partition `partition`, valued `p<partition>-<offset>`. */
function batchFrom(partition: number, offset: number, n: number): Buffer {
  return batchOf(offset, n, partition, (o) => `p${partition}-${o}`);
}

interface Group {
  member: string;
  generation: number;
  /** What JOIN_GROUP and SYNC_GROUP give the member. */
  assignments: number[];
  /** While set, HEARTBEAT is held (a coordinator that does not answer). */
  hold: Promise<void> | undefined;
}

/** One server is the whole cluster: coordinator and leader of both partitions (an endless log). */
function script(s: ScriptedServer, g: Group): void {
  s.on('FIND_COORDINATOR', () => `OK coordinator_id=0 host=127.0.0.1 port=${s.port} partition=0`);
  s.on('METADATA', () => `OK topic=${TOPIC} partitions=2 leaders=${s.address},${s.address} epochs=0,0`);
  const reply = () => `OK generation=${g.generation} member=${g.member} leader=${g.member} assignments=[${g.assignments.join(',')}]`;
  s.on('JOIN_GROUP', (l) => {
    if (!l.params.has('generation')) g.member = `${l.params.get('member')}-x`;
    g.generation++;
    return reply();
  });
  s.on('SYNC_GROUP', reply);
  s.on('HEARTBEAT', async (l) => {
    if (g.hold) await g.hold;
    await sleep(Math.min(Number(l.params.get('wait_ms') ?? 0), 30));
    return `OK member=${g.member} generation=${g.generation}`;
  });
  s.on('FETCH_OFFSET', () => 'OK offset=0 committed=true');
  s.on('BATCH_COMMIT', (l) => `OK batched=${l.positional[0]!.split(',').length}`);
  s.on('LEAVE_GROUP', (l) => `OK group=g member=${l.params.get('member')} left=true`);
}

describe('Consumer: fenced reads (scripted broker)', () => {
  const servers: ScriptedServer[] = [];
  const consumers: Consumer[] = [];

  afterEach(async () => {
    await Promise.all(consumers.splice(0).map((c) => c.close()));
    await Promise.all(servers.splice(0).map((s) => s.close()));
  });

  async function setup(extra: Partial<ConsumerOptions> = {}, run: Partial<RunOptions> = {}, handlerMs = 0) {
    const s = await ScriptedServer.start();
    servers.push(s);
    const g: Group = { member: '', generation: 0, assignments: [0, 1], hold: undefined };
    script(s, g);
    const c = new Consumer({
      brokers: [s.address],
      groupId: 'g',
      topic: TOPIC,
      clientId: 'cli',
      sessionTimeoutMs: 1000,
      heartbeatIntervalMs: 50,
      maxWaitMs: 30,
      autoCommitIntervalMs: 50,
      partitionsConsumedConcurrently: 2,
      retry: { initialDelayMs: 1, maxDelayMs: 10 },
      ...extra,
    });
    consumers.push(c);
    const delivered: Array<{ partition: number; offset: number; at: number; signal: AbortSignal }> = [];
    const lost: number[][] = [];
    const crashes: string[] = [];
    c.on('partitions.lost', (e) => lost.push(e.partitions));
    c.on('crash', (e) => crashes.push((e.error as TributaryError).code));
    const running = c.run({
      eachMessage: async ({ message }) => {
        delivered.push({ partition: message.partition, offset: message.offset, at: Date.now(), signal: message.signal });
        if (handlerMs > 0) await sleep(handlerMs);
      },
      ...run,
    });
    return { s, g, c, delivered, lost, crashes, run: running };
  }

  it('NOT_OWNER on a read loses that partition at once: its signal aborts with it, nothing more of it is delivered or committed, the member rejoins', async () => {
    const { s, g, c, delivered, lost, crashes, run } = await setup();
    let refuse = false;
    let refusedOffset = -1;
    s.on('CONSUME', async (l) => {
      const p = Number(l.params.get('partition'));
      if (p === 1 && refuse) {
        if (refusedOffset < 0) refusedOffset = Number(l.params.get('offset'));
        return `ERROR: NOT_OWNER partition=1 member=${g.member} class=fencing retryable=false`;
      }
      await sleep(5);
      return batchFrom(p, Number(l.params.get('offset')), 2);
    });
    await until(() => [0, 1].every((p) => delivered.some((d) => d.partition === p)), 5000, 'both partitions delivering');
    const signal1 = delivered.find((d) => d.partition === 1)!.signal;
    const joinsBefore = s.count('JOIN_GROUP');
    // The coordinator gave partition 1 away: its next rejoin assigns partition 0 only.
    g.assignments = [0];
    refuse = true;
    await until(() => lost.length === 1, 5000, 'partition 1 lost');
    const lostAt = Date.now();
    expect(lost[0]).toEqual([1]);
    expect(signal1.aborted).toBe(true);
    expect((signal1.reason as TributaryError).code).toBe('NOT_OWNER');
    await until(() => s.count('JOIN_GROUP') > joinsBefore && c.assignment().join() === '0', 5000, 'the rejoin');
    // the rejoin was as the same member (with its generation), not a fresh join
    expect(s.received('JOIN_GROUP').at(-1)!.line!.params.get('member')).toBe(g.member);
    const rejoinedAt = Date.now();
    await until(() => delivered.some((d) => d.partition === 0 && d.at > rejoinedAt), 5000, 'partition 0 going on');
    // nothing from the refused read's offset on, and no commit of partition 1 once it was lost
    expect(delivered.filter((d) => d.partition === 1 && d.offset >= refusedOffset)).toEqual([]);
    for (const r of s.received('BATCH_COMMIT')) if (r.at > lostAt) expect(r.line!.positional.join(' ')).not.toMatch(/P1:/);
    // partition 0's signal never fired: it was not interrupted
    expect(delivered.filter((d) => d.partition === 0).every((d) => !d.signal.aborted)).toBe(true);
    expect(crashes).toEqual([]);
    await c.close();
    await run;
  });

  it('GEN_MISMATCH on a read (the consumer’s own rejoin racing it) loses nothing: the read is sent again', async () => {
    const { s, g, c, delivered, lost, crashes, run } = await setup();
    let mismatches = 1;
    s.on('CONSUME', async (l) => {
      const p = Number(l.params.get('partition'));
      if (p === 0 && delivered.length > 0 && mismatches > 0) {
        mismatches--;
        return `ERROR: GEN_MISMATCH current=${g.generation + 1} requested=${g.generation} class=fencing retryable=false`;
      }
      await sleep(5);
      return batchFrom(p, Number(l.params.get('offset')), 2);
    });
    await until(() => mismatches === 0, 5000, 'the refused read');
    const at = Date.now();
    await until(() => [0, 1].every((p) => delivered.some((d) => d.partition === p && d.at > at)), 5000, 'both partitions going on');
    expect(lost).toEqual([]);
    expect(crashes).toEqual([]);
    expect(delivered.every((d) => !d.signal.aborted)).toBe(true);
    expect(c.assignment()).toEqual([0, 1]);
    await c.close();
    await run;
  });

  it('delivers nothing while no heartbeat was answered for a session, and again once one is', async () => {
    const { s, g, c, delivered, run } = await setup();
    s.on('CONSUME', async (l) => {
      await sleep(5);
      return batchFrom(Number(l.params.get('partition')), Number(l.params.get('offset')), 2);
    });
    await until(() => delivered.length > 0, 5000, 'delivering');
    let release!: () => void;
    g.hold = new Promise<void>((r) => {
      release = r;
    });
    const heldAt = Date.now();
    // Once a session has passed since the last answered heartbeat, the readers stop handing out batches
    // (they wait in the guard, so they stop fetching as well).
    await until(() => Date.now() - heldAt > 1000 && s.received('CONSUME').every((r) => r.at < Date.now() - 200), 10_000, 'the readers to stop');
    const stoppedAt = Date.now();
    const before = delivered.length;
    expect(delivered.filter((d) => d.at >= stoppedAt)).toEqual([]);
    g.hold = undefined;
    release();
    await until(() => delivered.length > before + 4, 10_000, 'delivering again');
    expect(delivered.filter((d) => d.at > heldAt + 1000 && d.at < stoppedAt)).toEqual([]);
    await c.close();
    await run;
  });

  it('with concurrency, handlers of messages already in the window do not start outside the session either', async () => {
    // One partition's window holds far more work than a session (500 messages of 50 ms, one at a time).
    const { s, g, c, delivered, run } = await setup({ maxBatchRecords: 500 }, { concurrency: { perPartition: 1, maxBuffered: 500 } }, 50);
    s.on('CONSUME', async (l) => {
      await sleep(5);
      return batchFrom(Number(l.params.get('partition')), Number(l.params.get('offset')), 500);
    });
    await until(() => delivered.length > 0, 5000, 'delivering');
    let release!: () => void;
    g.hold = new Promise<void>((r) => {
      release = r;
    });
    const heldAt = Date.now();
    await until(() => Date.now() - heldAt > 1000 && delivered.every((d) => d.at < Date.now() - 300), 10_000, 'the handlers to stop starting');
    const before = delivered.length;
    g.hold = undefined;
    release();
    await until(() => delivered.length > before + 4, 10_000, 'handlers starting again');
    await c.close();
    await run;
  });

  it('a partition lost while a JOIN is out and assigned again by it gets no new handler before its old ones returned', async () => {
    const s = await ScriptedServer.start();
    servers.push(s);
    const g: Group = { member: '', generation: 0, assignments: [0, 1], hold: undefined };
    script(s, g);
    let joinGate: Promise<void> | undefined;
    let openJoin!: () => void;
    s.on('JOIN_GROUP', async (l) => {
      if (joinGate) await joinGate;
      if (!l.params.has('generation')) g.member = `${l.params.get('member')}-x`;
      g.generation++;
      return `OK generation=${g.generation} member=${g.member} leader=${g.member} assignments=[${g.assignments.join(',')}]`;
    });
    let askRejoin = false;
    s.on('HEARTBEAT', async () => {
      await sleep(10);
      if (askRejoin) {
        askRejoin = false;
        return `ERROR: REBALANCE_IN_PROGRESS group=g class=coordination retryable=true`;
      }
      return `OK member=${g.member} generation=${g.generation}`;
    });
    let refuse1 = false;
    s.on('CONSUME', async (l) => {
      const p = Number(l.params.get('partition'));
      if (p === 1 && refuse1) return `ERROR: NOT_OWNER partition=1 member=${g.member} class=fencing retryable=false`;
      await sleep(5);
      return batchFrom(p, Number(l.params.get('offset')), 2);
    });
    const c = new Consumer({ brokers: [s.address], groupId: 'g', topic: TOPIC, clientId: 'cli', sessionTimeoutMs: 1000, heartbeatIntervalMs: 50, maxWaitMs: 30, retry: { initialDelayMs: 1, maxDelayMs: 10 } });
    consumers.push(c);
    const lost: number[][] = [];
    c.on('partitions.lost', (e) => lost.push(e.partitions));
    // Partition 1's first handler runs until released; any partition-1 handler starting meanwhile overlaps it.
    let releaseOld!: () => void;
    const oldDone = new Promise<void>((r) => {
      releaseOld = r;
    });
    let oldRunning = false;
    const overlaps: number[] = [];
    const started1: number[] = [];
    const run = c.run({
      concurrency: { perPartition: 4 },
      eachMessage: async ({ message }) => {
        if (message.partition !== 1) return;
        if (oldRunning) {
          overlaps.push(message.offset);
          releaseOld();
        }
        started1.push(message.offset);
        if (message.offset === 0 && started1.length === 1) {
          oldRunning = true;
          await oldDone;
          oldRunning = false;
        }
      },
    });
    await until(() => oldRunning, 5000, "partition 1's first handler running");
    const joins = s.count('JOIN_GROUP');
    joinGate = new Promise<void>((r) => {
      openJoin = r;
    });
    askRejoin = true;
    await until(() => s.count('JOIN_GROUP') > joins, 5000, 'the rejoin sent');
    // While the JOIN is out, a read of partition 1 is refused: the partition is lost.
    refuse1 = true;
    await until(() => lost.some((l) => l.includes(1)), 5000, 'partition 1 lost');
    refuse1 = false;
    const syncs = s.count('SYNC_GROUP');
    joinGate = undefined;
    openJoin();
    await until(() => s.count('SYNC_GROUP') > syncs, 5000, 'the sync');
    // A new reader of partition 1 would start handlers at once; give it that chance, then let the old one go.
    const synced = Date.now();
    await until(() => overlaps.length > 0 || Date.now() - synced > 500, 5000, 'a new handler, or none');
    releaseOld();
    await until(() => started1.length > 1, 5000, 'partition 1 delivered again');
    expect(overlaps).toEqual([]);
    await c.close();
    await run;
  });
});
