/**
 * The Consumer's routing against scripted servers standing in for brokers: group commands follow
 * NOT_COORDINATOR to the coordinator, CONSUME follows NOT_LEADER to the partition leader, a malformed
 * reply is survived, fencing errors on heartbeats lead to the right kind of rejoin, and close() wins even
 * when a server stops answering.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Consumer, type ConsumerOptions } from 'tributary-client/consumer.js';
import { type BatchRecord, encodeBatch } from 'tributary-protocol/batch.js';
import type { ParsedLine } from 'tributary-protocol/command.js';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { track, untilReal, useFakeTimersForIo } from '../../helpers/fake-timers.js';
import { type Script, ScriptedServer } from '../../helpers/scripted-server.js';
import { sleep, until } from '../../helpers/util.js';

const TOPIC = 't';
const PARTITIONS = 2;
const PER_PARTITION = 5;

/** The record at `offset` of the in-memory log: value `p<partition>-<offset>`. */
function recordAt(partition: number, offset: number): BatchRecord {
  return { offset, sequence: 0, producerId: '', key: null, epoch: -1, value: Buffer.from(`p${partition}-${offset}`), timestamp: 0, attributes: 0, headers: [] };
}

function batchOf(partition: number, records: BatchRecord[]): Buffer {
  return encodeBatch({ topic: TOPIC, partition, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records });
}

function batchReply(partition: number, from: number, max: number): Buffer {
  const records: BatchRecord[] = [];
  for (let o = from; o < PER_PARTITION && records.length < max; o++) records.push(recordAt(partition, o));
  return batchOf(partition, records);
}

/** CONSUME from an endless log: every poll gets `perPoll` records, so a reader left running keeps delivering. */
function endlessConsume(perPoll: number): Script {
  return async (l) => {
    const partition = Number(l.params.get('partition'));
    const offset = Number(l.params.get('offset'));
    await sleep(5);
    return batchOf(partition, Array.from({ length: perPoll }, (_, i) => recordAt(partition, offset + i)));
  };
}

/** CONSUME from an in-memory log of PER_PARTITION records per partition; an empty poll waits a little. */
const consumeScript: Script = async (l: ParsedLine) => {
  const partition = Number(l.params.get('partition'));
  const offset = Number(l.params.get('offset'));
  if (offset >= PER_PARTITION) await sleep(Math.min(Number(l.params.get('wait_ms') ?? 0), 30));
  return batchReply(partition, offset, Number(l.params.get('batch') ?? 500));
};

interface GroupState {
  member: string;
  generation: number;
  commits: string[];
  /** HEARTBEAT replies to send next (then OK). */
  heartbeatErrors: string[];
}

/** Scripts the group commands on `s` for a single member that gets every partition. */
function scriptCoordinator(s: ScriptedServer, g: GroupState): void {
  s.on('JOIN_GROUP', (l) => {
    const asked = l.params.get('member')!;
    if (!l.params.has('generation')) g.member = `${asked}-${++g.generation}`; // fresh member
    return `OK generation=${g.generation} member=${g.member} leader=${g.member} assignments=[0,1]`;
  });
  s.on('SYNC_GROUP', () => `OK generation=${g.generation} member=${g.member} leader=${g.member} assignments=[0,1]`);
  s.on('HEARTBEAT', async (l) => {
    const err = g.heartbeatErrors.shift();
    if (err) return err;
    await sleep(Math.min(Number(l.params.get('wait_ms') ?? 0), 30));
    return `OK member=${g.member} generation=${g.generation}`;
  });
  s.on('FETCH_OFFSET', () => 'OK offset=0 committed=false');
  s.on('BATCH_COMMIT', (l) => {
    g.commits.push(l.positional.join(' '));
    return `OK batched=${l.positional[0]!.split(',').length}`;
  });
  s.on('LEAVE_GROUP', (l) => `OK group=${l.params.get('group')} member=${l.params.get('member')} left=true`);
}

/** `s` is the whole cluster: the coordinator and the leader of both partitions. */
function scriptAlone(s: ScriptedServer): void {
  s.on('FIND_COORDINATOR', () => `OK coordinator_id=0 host=127.0.0.1 port=${s.port} partition=0`);
  s.on('METADATA', () => `OK topic=${TOPIC} partitions=2 leaders=${s.address},${s.address} epochs=0,0`);
}

function commandsOf(s: ScriptedServer, command: string, partition?: number): ParsedLine[] {
  return s
    .received(command)
    .map((r) => r.line!)
    .filter((l) => partition === undefined || Number(l.params.get('partition')) === partition);
}

describe('Consumer routing (scripted brokers)', () => {
  const servers: ScriptedServer[] = [];
  const consumers: Consumer[] = [];
  const unhandled: unknown[] = [];
  const onUnhandled = (r: unknown) => unhandled.push(r);

  async function server(): Promise<ScriptedServer> {
    const s = await ScriptedServer.start();
    servers.push(s);
    return s;
  }

  function consumer(brokers: string[], extra: Partial<ConsumerOptions> = {}): Consumer {
    const c = new Consumer({
      brokers,
      groupId: 'g',
      topic: TOPIC,
      clientId: 'cli',
      autoOffsetReset: 'earliest',
      sessionTimeoutMs: 1000,
      heartbeatIntervalMs: 50,
      maxWaitMs: 30,
      autoCommitIntervalMs: 50,
      retry: { initialDelayMs: 1, maxDelayMs: 10 },
      ...extra,
    });
    consumers.push(c);
    return c;
  }

  beforeEach(() => {
    unhandled.length = 0;
    process.on('unhandledRejection', onUnhandled);
  });

  afterEach(async () => {
    vi.useRealTimers();
    await Promise.all(consumers.splice(0).map((c) => c.close()));
    await Promise.all(servers.splice(0).map((s) => s.close()));
    await sleep(20);
    process.off('unhandledRejection', onUnhandled);
    expect(unhandled).toEqual([]);
  });

  it('group commands follow NOT_COORDINATOR to the coordinator; CONSUME follows NOT_LEADER to the leader', async () => {
    const a = await server(); // bootstrap: stale coordinator, leader of partition 0 only
    const b = await server(); // the real coordinator
    const c = await server(); // the real leader of partition 1
    const g: GroupState = { member: '', generation: 0, commits: [], heartbeatErrors: [] };
    a.on('FIND_COORDINATOR', () => `OK coordinator_id=0 host=127.0.0.1 port=${a.port} partition=0`);
    a.on('JOIN_GROUP', () => `ERROR: NOT_COORDINATOR class=routing retryable=true host=127.0.0.1 port=${b.port}`);
    a.on('METADATA', () => `OK topic=${TOPIC} partitions=2 leaders=${a.address},${a.address} epochs=0,0`);
    a.on('LIST_OFFSETS', (l) => `OK topic=${TOPIC} partitions=2 offsets=P${l.params.get('partition')}:earliest=0:latest=${PER_PARTITION}:leo=${PER_PARTITION}:hwm=${PER_PARTITION}`);
    a.on('CONSUME', (l, conn, req) => (Number(l.params.get('partition')) === 1 ? `ERROR: NOT_LEADER LEADER_IS ${c.address} class=routing retryable=true` : consumeScript(l, conn, req)));
    scriptCoordinator(b, g);
    c.on('CONSUME', consumeScript);

    const consumer0 = consumer([a.address]);
    const seen: string[] = [];
    const run = consumer0.run({ eachMessage: ({ message }) => void seen.push(message.value.toString()) });
    await until(() => seen.length >= PARTITIONS * PER_PARTITION, 5000, 'all messages');
    await until(() => g.commits.some((x) => x.includes(`P0:${PER_PARTITION}`)) && g.commits.some((x) => x.includes(`P1:${PER_PARTITION}`)), 5000, 'commits');
    await consumer0.close();
    await run;

    const expected = [0, 1].flatMap((p) => Array.from({ length: PER_PARTITION }, (_, o) => `p${p}-${o}`));
    expect([...seen].sort()).toEqual(expected.sort());
    // Coordinator routing: one JOIN reached A, everything after the redirect went to B.
    expect(a.count('JOIN_GROUP')).toBe(1);
    expect(b.count('JOIN_GROUP')).toBe(1);
    expect(b.count('SYNC_GROUP')).toBe(1);
    expect(b.count('HEARTBEAT')).toBeGreaterThan(0);
    expect(b.count('LEAVE_GROUP')).toBe(1);
    for (const cmd of ['SYNC_GROUP', 'HEARTBEAT', 'FETCH_OFFSET', 'BATCH_COMMIT', 'LEAVE_GROUP']) expect(a.count(cmd), cmd).toBe(0);
    expect(a.count('FIND_COORDINATOR')).toBe(1);
    // Leader routing: partition 1 was asked of A once, then only of C; partition 0 stayed on A.
    expect(commandsOf(a, 'CONSUME', 1)).toHaveLength(1);
    expect(commandsOf(c, 'CONSUME', 1).length).toBeGreaterThan(0);
    expect(commandsOf(c, 'CONSUME', 0)).toHaveLength(0);
    // the redirect needed no metadata refresh (one METADATA per reader at most, all before the redirect)
    expect(a.count('METADATA')).toBeLessThanOrEqual(2);
    const firstOnC = c.received('CONSUME')[0]!.at;
    for (const r of a.received('METADATA')) expect(r.at).toBeLessThanOrEqual(firstOnC);
    // Every CONSUME carried the member's identity and the read_committed default.
    for (const l of [...commandsOf(a, 'CONSUME'), ...commandsOf(c, 'CONSUME')]) {
      expect(Object.fromEntries(l.params)).toMatchObject({ group: 'g', member: g.member, generation: '1', isolation: 'read_committed' });
    }
    // Commits carry the broker-assigned member and generation; the last one is complete.
    for (const l of commandsOf(b, 'BATCH_COMMIT')) expect(Object.fromEntries(l.params)).toMatchObject({ member: g.member, generation: '1', group: 'g', topic: TOPIC });
    expect(consumer0.state).toBe('closed');
  });

  it('a malformed CONSUME reply is reported as a non-fatal crash and reading goes on without loss', async () => {
    const a = await server();
    const g: GroupState = { member: '', generation: 0, commits: [], heartbeatErrors: [] };
    scriptAlone(a);
    a.on('LIST_OFFSETS', () => `OK topic=${TOPIC} partitions=1 offsets=P0:earliest=0:latest=5:leo=5:hwm=5`);
    scriptCoordinator(a, g);
    const bad = { 0: 1, 1: 1 } as Record<number, number>;
    a.on('CONSUME', (l, conn, req) => {
      const p = Number(l.params.get('partition'));
      if (bad[p]! > 0) {
        bad[p]!--;
        return p === 0 ? 'garbage' : 'huge';
      }
      return consumeScript(l, conn, req);
    });
    const c0 = consumer([a.address]);
    const crashes: Array<{ code: string; fatal: boolean }> = [];
    c0.on('crash', ({ error, fatal }) => crashes.push({ code: (error as TributaryError).code, fatal }));
    const seen: string[] = [];
    const run = c0.run({ eachMessage: ({ message }) => void seen.push(`${message.partition}:${message.offset}`) });
    await until(() => seen.length >= PARTITIONS * PER_PARTITION, 5000, 'all messages');
    await sleep(100);
    await c0.close();
    await run;
    expect(seen).toHaveLength(PARTITIONS * PER_PARTITION); // nothing lost, nothing twice
    expect(new Set(seen).size).toBe(seen.length);
    // the malformed body is a non-retriable decode error reported as a crash; the broken frame header is a lost connection
    expect(crashes).toContainEqual({ code: 'invalid_batch', fatal: false });
    expect(crashes.every((x) => !x.fatal)).toBe(true);
    expect(c0.state).toBe('closed');
  });

  it('OFFSET_OUT_OF_RANGE for a position the leader can serve re-routes the read and keeps the position; one outside the range resets', async () => {
    const a = await server(); // coordinator; led partition 0 until it was moved off and dropped its copy
    const b = await server(); // the new leader of partition 0
    const g: GroupState = { member: '', generation: 0, commits: [], heartbeatErrors: [] };
    scriptCoordinator(a, g);
    a.on('FETCH_OFFSET', () => 'OK offset=0 committed=true'); // both readers start at 0
    let moved = false;
    a.on('FIND_COORDINATOR', () => `OK coordinator_id=0 host=127.0.0.1 port=${a.port} partition=0`);
    a.on('METADATA', () => `OK topic=${TOPIC} partitions=2 leaders=${moved ? b.address : a.address},${a.address} epochs=${moved ? 1 : 0},0`);
    // Asked of any broker, answered by the leader: partition 0 holds 0..4; partition 1 was cut back to
    // 2..4 (retention), so its reader's position 0 is really out of range.
    a.on('LIST_OFFSETS', (l) => {
      const p = Number(l.params.get('partition'));
      return `OK topic=${TOPIC} partitions=2 offsets=P${p}:earliest=${p === 0 ? 0 : 2}:latest=${PER_PARTITION}:leo=${PER_PARTITION}:hwm=${PER_PARTITION}`;
    });
    a.on('CONSUME', (l, conn, req) => {
      const p = Number(l.params.get('partition'));
      const offset = Number(l.params.get('offset'));
      if (p === 1) {
        if (offset < 2) return `ERROR: OFFSET_OUT_OF_RANGE class=validation retryable=false requested=${offset} earliest=2 latest=${PER_PARTITION}`;
        return consumeScript(l, conn, req);
      }
      if (offset < 2) return batchReply(0, offset, 2 - offset);
      // The move: this copy is gone, so the old leader answers from an empty log.
      moved = true;
      return `ERROR: OFFSET_OUT_OF_RANGE class=validation retryable=false requested=${offset} earliest=0 latest=0`;
    });
    b.on('CONSUME', consumeScript);
    const c0 = consumer([a.address], { autoOffsetReset: 'latest' });
    const seen: string[] = [];
    const run = c0.run({ eachMessage: ({ message }) => void seen.push(`${message.partition}:${message.offset}`) });
    const readAtEnd = () => commandsOf(a, 'CONSUME', 1).some((l) => l.params.get('offset') === String(PER_PARTITION));
    await until(() => g.commits.some((x) => x.includes(`P0:${PER_PARTITION}`)) && readAtEnd(), 5000, 'partition 0 committed, partition 1 reset');
    await c0.close();
    await run;
    // Partition 0: every record once, 2..4 from the new leader (a reset to `latest` would have skipped them).
    expect(seen.filter((s) => s.startsWith('0:'))).toEqual(['0:0', '0:1', '0:2', '0:3', '0:4']);
    expect(commandsOf(b, 'CONSUME', 0)[0]!.params.get('offset')).toBe('2');
    // Partition 1: the leader itself said the position is gone, so autoOffsetReset (latest) applies.
    expect(seen.filter((s) => s.startsWith('1:'))).toEqual([]);
  });

  it('REBALANCE_IN_PROGRESS on a heartbeat rejoins as the same member; member_not_found joins fresh', async () => {
    const a = await server();
    const g: GroupState = { member: '', generation: 0, commits: [], heartbeatErrors: [] };
    scriptAlone(a);
    a.on('LIST_OFFSETS', () => `OK topic=${TOPIC} partitions=1 offsets=P0:earliest=0:latest=5:leo=5:hwm=5`);
    a.on('CONSUME', consumeScript);
    scriptCoordinator(a, g);
    const c0 = consumer([a.address]);
    const joins: Array<{ memberId: string; generation: number }> = [];
    c0.on('group.join', (j) => joins.push({ memberId: j.memberId, generation: j.generation }));
    const run = c0.run({ eachMessage: () => {} });
    await until(() => joins.length === 1 && a.count('HEARTBEAT') > 0, 5000, 'first join');
    const first = g.member;

    g.heartbeatErrors.push(`ERROR: REBALANCE_IN_PROGRESS class=fencing retryable=false group=g generation=${g.generation}`);
    await until(() => a.count('JOIN_GROUP') === 2 && c0.state === 'running', 5000, 'rejoin');
    const rejoin = commandsOf(a, 'JOIN_GROUP')[1]!;
    expect(rejoin.params.get('member')).toBe(first);
    expect(rejoin.params.get('generation')).toBe('1');
    expect(c0.memberId).toBe(first);

    g.heartbeatErrors.push(`ERROR: member_not_found class=fencing retryable=false member=${first}`);
    await until(() => a.count('JOIN_GROUP') === 3 && c0.state === 'running', 5000, 'fresh join');
    const fresh = commandsOf(a, 'JOIN_GROUP')[2]!;
    expect(fresh.params.get('member')).toBe('cli');
    expect(fresh.params.has('generation')).toBe(false);
    expect(c0.memberId).not.toBe(first);
    expect(c0.memberId).toBe(g.member);
    await c0.close();
    await run;
  });

  it('member_not_found stops every reader at once: nothing is delivered or committed until the fresh join', async () => {
    const a = await server();
    const g: GroupState = { member: '', generation: 0, commits: [], heartbeatErrors: [] };
    scriptAlone(a);
    a.on('CONSUME', endlessConsume(2));
    scriptCoordinator(a, g);
    // The new owner committed further on meanwhile: the fresh assignment starts there.
    let committed = 'OK offset=0 committed=true';
    a.on('FETCH_OFFSET', () => committed);
    // The fresh JOIN is held as a coordinator in mid-rebalance would hold it.
    let holdJoin = false;
    a.on('JOIN_GROUP', async (l) => {
      if (holdJoin) await sleep(400);
      if (!l.params.has('generation')) g.member = `${l.params.get('member')}-${++g.generation}`;
      return `OK generation=${g.generation} member=${g.member} leader=${g.member} assignments=[0,1]`;
    });
    const c0 = consumer([a.address], { partitionsConsumedConcurrently: 2 });
    const delivered: Array<{ partition: number; offset: number; at: number }> = [];
    const lost: Array<{ partitions: number[]; at: number }> = [];
    const ends: number[] = [];
    c0.on('partitions.lost', (e) => lost.push({ partitions: e.partitions, at: Date.now() }));
    c0.on('rebalance.end', () => ends.push(Date.now()));
    const run = c0.run({ eachMessage: ({ message }) => void delivered.push({ partition: message.partition, offset: message.offset, at: Date.now() }) });
    await until(() => delivered.some((d) => d.partition === 0) && delivered.some((d) => d.partition === 1), 5000, 'both partitions delivering');
    const expired = g.member;

    holdJoin = true;
    committed = 'OK offset=1000 committed=true';
    const commitsBefore = a.count('BATCH_COMMIT');
    g.heartbeatErrors.push(`ERROR: member_not_found class=fencing retryable=false member=${expired}`);
    await until(() => lost.length === 1, 5000, 'partitions lost');
    expect(lost[0]!.partitions).toEqual([0, 1]);
    const lostAt = lost[0]!.at;
    await until(() => ends.length === 2, 5000, 'the fresh join done');
    const rejoinedAt = ends[1]!;
    // The window holds the whole held JOIN (a zombie reader would deliver in it): the fresh JOIN came after the loss.
    const freshJoin = a.received('JOIN_GROUP').filter((r) => !r.line!.params.has('generation'))[1]!; // after the first join
    expect(freshJoin.at).toBeGreaterThanOrEqual(lostAt);

    expect(delivered.filter((d) => d.at > lostAt && d.at < rejoinedAt)).toEqual([]);
    // Nothing committed under the expired member once it was told.
    const lateCommits = a.received('BATCH_COMMIT').slice(commitsBefore).filter((r) => r.at > lostAt && r.line!.params.get('member') === expired);
    expect(lateCommits).toEqual([]);
    // The fresh assignment reads from the committed offsets on.
    await until(() => delivered.some((d) => d.at >= rejoinedAt && d.partition === 0) && delivered.some((d) => d.at >= rejoinedAt && d.partition === 1), 5000, 'delivering again');
    for (const p of [0, 1]) expect(delivered.find((d) => d.at >= rejoinedAt && d.partition === p)!.offset).toBe(1000);
    await c0.close();
    await run;
  });

  it('a member_not_found about a member id the consumer already gave up does not touch the new membership', async () => {
    const a = await server();
    const g: GroupState = { member: '', generation: 0, commits: [], heartbeatErrors: [] };
    scriptAlone(a);
    a.on('CONSUME', endlessConsume(1));
    scriptCoordinator(a, g);
    a.on('FETCH_OFFSET', () => 'OK offset=0 committed=true');
    const c0 = consumer([a.address], { partitionsConsumedConcurrently: 2 });
    let expired = '';
    let parked = 0;
    let expire = false;
    // The old member's heartbeat, parked at the coordinator (a long poll), is answered only after the
    // consumer rejoined under a new id.
    a.on('HEARTBEAT', async (l) => {
      if (expired && l.params.get('member') === expired) {
        parked++;
        await until(() => c0.memberId !== undefined && c0.memberId !== expired && c0.state === 'running', 10_000, 'the rejoin');
        return `ERROR: member_not_found class=fencing retryable=false member=${expired}`;
      }
      await sleep(Math.min(Number(l.params.get('wait_ms') ?? 0), 30));
      return `OK member=${g.member} generation=${g.generation}`;
    });
    // What tells the consumer it expired: a commit refused for the old id.
    a.on('BATCH_COMMIT', (l) => {
      if (expire && l.params.get('member') === expired) return `ERROR: member_not_found class=fencing retryable=false member=${expired}`;
      return `OK batched=${l.positional[0]!.split(',').length}`;
    });
    const lost: number[][] = [];
    c0.on('partitions.lost', (e) => lost.push(e.partitions));
    const delivered: number[] = [];
    const run = c0.run({ eachMessage: () => void delivered.push(Date.now()) });
    await until(() => delivered.length > 5, 10_000, 'consuming');
    expired = g.member;
    await until(() => parked > 0, 10_000, 'a heartbeat of the member parked at the coordinator');
    expire = true;
    await until(() => lost.length === 1, 10_000, 'the partitions lost');
    await until(() => c0.memberId !== undefined && c0.memberId !== expired && c0.state === 'running', 10_000, 'the fresh join');
    const fresh = c0.memberId;
    // The parked heartbeat's answer about the old id comes now; the consumer goes on as the new member.
    await until(() => a.received('HEARTBEAT').some((r) => r.line!.params.get('member') === fresh), 10_000, 'a heartbeat of the new member');
    const before = delivered.length;
    await until(() => delivered.length > before + 5, 10_000, 'deliveries going on');
    expect(lost).toEqual([[0, 1]]);
    expect(c0.memberId).toBe(fresh);
    expect(c0.assignment()).toEqual([0, 1]);
    await c0.close();
    await run;
  });

  it('stream mode: a stream that delivered before it broke is re-opened at once, however often that happened', async () => {
    const a = await server();
    const g: GroupState = { member: '', generation: 0, commits: [], heartbeatErrors: [] };
    scriptAlone(a);
    a.on('LIST_OFFSETS', () => `OK topic=${TOPIC} partitions=1 offsets=P0:earliest=0:latest=5:leo=5:hwm=5`);
    scriptCoordinator(a, g);
    a.on('FETCH_OFFSET', () => 'OK offset=0 committed=true');
    // Each stream pushes the next record of its partition, then the connection breaks (a flaky network).
    a.on('STREAM', (l, conn) => {
      const partition = Number(l.params.get('partition'));
      const offset = Number(l.params.get('offset'));
      conn.push(batchOf(partition, [recordAt(partition, offset)]));
      setTimeout(() => conn.socket.destroy(), 5);
      return 'hang';
    });
    const c0 = consumer([a.address], { mode: 'stream', partitionsConsumedConcurrently: 2 });
    const seen: number[] = [];
    const run = c0.run({ eachMessage: ({ message }) => void (message.partition === 0 && seen.push(message.offset)) });
    await until(() => seen.length >= 1, 5000, 'the first record');
    const t0 = Date.now();
    // 20 breaks in a row, each after a delivery: the backoff restarts from its first step every time
    // (a failure count that only grew would wait up to 2 s per break by now).
    await until(() => seen.length >= 21, 15_000, '20 more re-opened streams');
    const perBreak = (Date.now() - t0) / 20;
    expect(perBreak).toBeLessThan(250);
    expect(seen.slice(0, 21)).toEqual([...Array(21).keys()]);
    await c0.close();
    await run;
  });

  it('start() rejects with a non-retriable JOIN error and leaves the consumer closed (no deadlock with close())', async () => {
    const a = await server();
    a.on('FIND_COORDINATOR', () => `OK coordinator_id=0 host=127.0.0.1 port=${a.port} partition=0`);
    a.on('JOIN_GROUP', () => `ERROR: topic_not_found class=not_found retryable=false topic=${TOPIC}`);
    const c0 = consumer([a.address]);
    const outcome = await Promise.race([
      c0.start().then(
        () => 'started',
        (e: TributaryError) => e.code,
      ),
      sleep(3000).then(() => 'hung'),
    ]);
    expect(outcome).toBe('topic_not_found');
    expect(c0.state).toBe('closed');
    expect(a.count('JOIN_GROUP')).toBe(1); // not retried
    await expect(c0.start()).rejects.toMatchObject({ code: 'client_closed' });
    await c0.close(); // idempotent
  });

  it('close() while run() is still starting ends run() cleanly: it resolves, no client_closed rejection', async () => {
    const a = await server();
    const g: GroupState = { member: '', generation: 0, commits: [], heartbeatErrors: [] };
    scriptAlone(a);
    a.on('CONSUME', consumeScript);
    scriptCoordinator(a, g);
    a.on('FETCH_OFFSET', async () => {
      await sleep(500); // start() is still installing the assignment
      return 'OK offset=0 committed=false';
    });
    // close() gives its final commit and LEAVE_GROUP min(session, 5 s): with the 1 s session of these tests
    // a LEAVE queued behind the slow FETCH_OFFSET on a loaded machine could miss it.
    const c0 = consumer([a.address], { sessionTimeoutMs: 10_000 });
    let handled = 0;
    const outcome = c0
      .run({
        eachMessage: () => {
          handled++;
        },
      })
      .then(
        () => 'resolved',
        (e: TributaryError) => `rejected ${e.code}`,
      );
    await until(() => a.count('FETCH_OFFSET') > 0, 5000, 'FETCH_OFFSET sent');
    expect(c0.state).toBe('rebalancing');
    const closing = c0.close(); // e.g. a SIGTERM handler during startup
    expect(await Promise.race([outcome, sleep(5000).then(() => 'hung')])).toBe('resolved');
    await closing;
    expect(c0.state).toBe('closed');
    expect(handled).toBe(0);
    expect(a.count('LEAVE_GROUP')).toBe(1);
    // close() after close(): run() on a closed consumer does reject
    await expect(c0.run({ eachMessage: () => {} })).rejects.toMatchObject({ code: expect.stringMatching(/^(client_closed|invalid_config)$/) });
  });

  it('for await ends (done, no throw) when the consumer is closed from elsewhere between messages', async () => {
    const a = await server();
    const g: GroupState = { member: '', generation: 0, commits: [], heartbeatErrors: [] };
    scriptAlone(a);
    a.on('LIST_OFFSETS', () => `OK topic=${TOPIC} partitions=1 offsets=P0:earliest=0:latest=5:leo=5:hwm=5`);
    a.on('CONSUME', consumeScript);
    scriptCoordinator(a, g);
    const c0 = consumer([a.address]);
    const got: number[] = [];
    let closing: Promise<void> | undefined;
    for await (const m of c0) {
      got.push(m.offset);
      if (got.length === 2) {
        closing = c0.close();
        await closing; // fully closed before the loop asks for the next message
      }
    }
    expect(got).toHaveLength(2);
    expect(c0.state).toBe('closed');
    await closing;
  });

  it('close() wins while the coordinator never answers a FETCH_OFFSET', async () => {
    const a = await server();
    const g: GroupState = { member: '', generation: 0, commits: [], heartbeatErrors: [] };
    a.on('FIND_COORDINATOR', () => `OK coordinator_id=0 host=127.0.0.1 port=${a.port} partition=0`);
    scriptCoordinator(a, g);
    a.on('FETCH_OFFSET', () => 'hang');
    // The final LEAVE_GROUP waits behind the FETCH_OFFSET on the coordinator connection; with the stall bound
    // out of reach, only close()'s own deadline (a session timeout, at most 5 s) can end it.
    const c0 = consumer([a.address], { stallTimeoutMs: 600_000 });
    const started = c0.start().then(
      () => 'started',
      (e: TributaryError) => e.code,
    );
    await until(() => a.count('FETCH_OFFSET') > 0, 5000, 'FETCH_OFFSET sent');
    expect(c0.state).toBe('rebalancing');
    await c0.close();
    expect(c0.state).toBe('closed');
    expect(await started).not.toBe('started');
    expect(a.count('LEAVE_GROUP')).toBe(0); // the coordinator never answered it
  });

  it('close() wins while a broker accepts connections but never answers NEGOTIATE', async () => {
    const a = await server();
    const leader = await server();
    const g: GroupState = { member: '', generation: 0, commits: [], heartbeatErrors: [] };
    a.on('FIND_COORDINATOR', () => `OK coordinator_id=0 host=127.0.0.1 port=${a.port} partition=0`);
    a.on('METADATA', () => `OK topic=${TOPIC} partitions=2 leaders=${leader.address},${leader.address} epochs=0,0`);
    a.on('LIST_OFFSETS', () => `OK topic=${TOPIC} partitions=1 offsets=P0:earliest=0:latest=5:leo=5:hwm=5`);
    scriptCoordinator(a, g);
    leader.on('NEGOTIATE', () => 'hang'); // like a SIGSTOPped broker: the kernel accepts, nobody answers
    // The clock stands still from here: no connect or stall timeout can end the readers' handshakes.
    useFakeTimersForIo();
    const c0 = consumer([a.address]);
    const run = c0.run({ eachMessage: () => {} });
    await untilReal(() => leader.count('NEGOTIATE') >= 2, 'readers connecting');
    const closing = track(c0.close());
    // closed with the clock not moved: close() itself ended the handshakes
    await untilReal(() => closing.settled, 'close() to finish');
    await closing.promise;
    await run;
    expect(c0.state).toBe('closed');
    await untilReal(() => leader.connections.every((x) => x.socket.destroyed), 'leader sockets closed');
  });
});
