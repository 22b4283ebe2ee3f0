/**
 * A coordinator that freezes and is replaced at once (a preferred-leader move, say): the new coordinator
 * gives the member one session from when it took over. The member's heartbeat hangs on the frozen one;
 * it must give it up and reach the new coordinator within that session, or it loses its partitions to a
 * full rebalance. Scripted servers stand in for both coordinators; the new one expires the member as a
 * real coordinator does.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Consumer, heartbeatStallMs } from 'tributary-client/consumer.js';
import type { ParsedLine } from 'tributary-protocol/command.js';
import { encodeBatch } from 'tributary-protocol/batch.js';
import { ScriptedServer } from '../../helpers/scripted-server.js';
import { sleep, until } from '../../helpers/util.js';

const TOPIC = 't';
const SESSION_MS = 6000;
const INTERVAL_MS = 1000;

describe('heartbeat stall bound', () => {
  it('leaves the heartbeat and its own wait inside the session, and is never below 100 ms', () => {
    expect(heartbeatStallMs(10_000, 3000)).toBe(3500);
    expect(heartbeatStallMs(3000, 1000)).toBe(1000);
    expect(heartbeatStallMs(300, 250)).toBe(100);
    for (const [session, interval] of [
      [6000, 1000],
      [45_000, 3000],
      [1000, 50],
    ]) {
      expect(interval + 2 * heartbeatStallMs(session!, interval!)).toBeLessThanOrEqual(session!);
    }
  });
});

describe('Consumer heartbeats across a coordinator that freezes and is replaced', () => {
  const servers: ScriptedServer[] = [];
  const consumers: Consumer[] = [];

  afterEach(async () => {
    await Promise.all(consumers.splice(0).map((c) => c.close()));
    await Promise.all(servers.splice(0).map((s) => s.close()));
  });

  it('keeps its member id: the heartbeat reaches the new coordinator within the session it was given', async () => {
    const [a, b] = [await ScriptedServer.start(), await ScriptedServer.start()];
    servers.push(a, b);
    let coordinator = a;
    let frozen = false;
    /** When B took the group over; it expires a member not heard from within a session of that. */
    let tookOverAt = 0;
    const group = { member: '', generation: 0 };
    const expired: string[] = [];

    for (const s of [a, b]) {
      // A frozen process answers nothing at all, pings and lookups included.
      const script = (reply: (l: ParsedLine) => string | Promise<string>) => (l: ParsedLine) => (s === a && frozen ? ('hang' as const) : reply(l));
      s.on('PROTOCOL_INFO', script(() => 'OK version=1'));
      s.on('FIND_COORDINATOR', script(() => `OK coordinator_id=0 host=127.0.0.1 port=${coordinator.port} partition=0`));
      s.on('METADATA', script(() => `OK topic=${TOPIC} partitions=1 leaders=${b.address} epochs=0`));
      s.on(
        'JOIN_GROUP',
        script(() => {
          group.member ||= `m-${group.generation + 1}`;
          group.generation++;
          return `OK generation=${group.generation} member=${group.member} leader=${group.member} assignments=[0]`;
        }),
      );
      s.on('SYNC_GROUP', script(() => `OK generation=${group.generation} member=${group.member} leader=${group.member} assignments=[0]`));
      s.on(
        'HEARTBEAT',
        script(async (l) => {
          if (s === b && Date.now() - tookOverAt > SESSION_MS) {
            expired.push(l.params.get('member')!);
            return `ERROR: member_not_found class=fencing retryable=false member=${l.params.get('member')}`;
          }
          await sleep(Math.min(Number(l.params.get('wait_ms') ?? 0), 50));
          return `OK member=${group.member} generation=${group.generation}`;
        }),
      );
      s.on('FETCH_OFFSET', script(() => 'OK offset=0 committed=true'));
      s.on('BATCH_COMMIT', script((l) => `OK batched=${l.positional[0]!.split(',').length}`));
      s.on('LEAVE_GROUP', script((l) => `OK group=${l.params.get('group')} member=${l.params.get('member')} left=true`));
    }
    b.on('CONSUME', async (l) => {
      await sleep(Math.min(Number(l.params.get('wait_ms') ?? 0), 50));
      return encodeBatch({ topic: TOPIC, partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records: [] });
    });

    const consumer = new Consumer({
      brokers: [a.address, b.address],
      groupId: 'g',
      topic: TOPIC,
      autoOffsetReset: 'earliest',
      sessionTimeoutMs: SESSION_MS,
      heartbeatIntervalMs: INTERVAL_MS,
      // The cluster-wide bound alone (10 s) would hold the heartbeat on the frozen coordinator past the session.
      stallTimeoutMs: 10_000,
      maxWaitMs: 50,
      retry: { initialDelayMs: 1, maxDelayMs: 20 },
    });
    consumers.push(consumer);
    const lost: unknown[] = [];
    consumer.on('partitions.lost', (e) => lost.push(e));
    const run = consumer.run({ eachMessage: () => {} });
    await until(() => a.count('HEARTBEAT') >= 2, 10_000, 'heartbeats on the first coordinator');
    const member = consumer.memberId;
    expect(member).toBe('m-1');

    frozen = true;
    coordinator = b;
    tookOverAt = Date.now();
    await until(() => b.count('HEARTBEAT') > 0, 20_000, 'a heartbeat on the new coordinator');
    await until(() => b.count('HEARTBEAT') > 2, 20_000, 'heartbeats going on at the new coordinator');

    expect(expired).toEqual([]);
    expect(lost).toEqual([]);
    expect(consumer.memberId).toBe(member);
    expect(b.received('HEARTBEAT')[0]!.line!.params.get('member')).toBe(member);
    expect(b.count('JOIN_GROUP')).toBe(0); // no rebalance was needed
    await consumer.close();
    await run;
  }, 40_000);
});
