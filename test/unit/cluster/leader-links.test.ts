/**
 * The follower side of parked replication (leader-links.ts): a mark for a partition that is not parked
 * is kept until it parks, and dropped when its loop lets go of the link, so partitions no longer followed
 * leave nothing behind.
 */
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { BrokerRegistry } from 'tributary-broker/cluster/broker-registry.js';
import { CONNECT_RETRY_MS, LeaderLinks } from 'tributary-broker/cluster/leader-links.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { eventually } from '../../helpers/util.js';

/** A leader that marks the given partitions on the first REPLICA_WAIT, then holds every later one until closed. */
function fakeLeader(marked: string) {
  let waits = 0;
  const conn = {
    closed: false,
    command: async (cmd: string) => {
      if (cmd !== 'REPLICA_WAIT') throw new Error(`unexpected ${cmd}`);
      if (waits++ === 0) return `OK partitions=${marked}`;
      return new Promise<string>((_resolve, reject) => {
        const t = setInterval(() => {
          if (conn.closed) {
            clearInterval(t);
            reject(new Error('closed'));
          }
        }, 5);
      });
    },
    close: async () => {
      conn.closed = true;
    },
  };
  return conn;
}

describe('LeaderLink', () => {
  it('wakes a parked partition, keeps a mark for one on its way, and forgets it when that loop releases the link', async () => {
    const conn = fakeLeader('t:0,t:1');
    const links = new LeaderLinks({
      brokerId: 2,
      registry: { get: () => ({ advertisedAddress: '127.0.0.1:1' }) } as unknown as BrokerRegistry,
      logger: pino({ level: 'silent' }),
      waitMs: 1000,
      connect: async () => conn as unknown as Connection,
    });
    const link = links.acquire(1, 't', 0);
    links.acquire(1, 't', 1); // the loop of t:1, which never parks
    links.acquire(1, 't', 1); // and its successor, started before it ended
    // t:0 parks: that starts the link's REPLICA_WAIT connection, whose opening wakes every parked partition
    // (marks on a lost connection may be gone); its answer then marks t:0 and t:1, neither parked now.
    await link.park('t', 0, new AbortController().signal);
    await eventually('the marks kept', () => link.pendingMarks === 2);
    // The first loop of t:1 ends: its successor may still park on the mark, which stays.
    link.release('t', 1);
    expect(link.pendingMarks).toBe(2);
    // The last loop of t:1 ends: the mark goes with it.
    link.release('t', 1);
    expect(link.pendingMarks).toBe(1);
    // t:0 parks again with its mark waiting: it goes on at once and takes the mark.
    await link.park('t', 0, new AbortController().signal);
    expect(link.pendingMarks).toBe(0);
    link.release('t', 0);
    expect(conn.closed).toBe(true);
  });
});

describe('LeaderLink.fetchFailed', () => {
  it('warns once per leader every 10 s, only for partitions that keep failing, counting the failures between', () => {
    const warnings: Array<Record<string, unknown>> = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => warnings.push(JSON.parse(line) as Record<string, unknown>) });
    let now = 1_000_000;
    const links = new LeaderLinks({
      brokerId: 2,
      registry: { get: () => undefined } as unknown as BrokerRegistry,
      logger,
      waitMs: 1000,
      connect: async () => {
        throw new Error('not used');
      },
      now: () => now,
    });
    const partitions = 3000;
    const link = links.acquire(1, 't', 0);
    const other = links.acquire(3, 't', 1);
    const refused = new Error('connect ECONNREFUSED');
    // Every partition following leader 1 fails nine times: routine, nothing said.
    for (let f = 1; f <= 9; f++) for (let p = 0; p < partitions; p++) link.fetchFailed(refused, 't', p, f);
    expect(warnings).toEqual([]);
    // All of them reach the tenth failure together: one warning, with the count.
    for (let p = 0; p < partitions; p++) link.fetchFailed(refused, 't', p, 10);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ msg: 'replica fetch failed; retrying', leader: 1, topic: 't', partition: 0, failures: 10, fetch_failures: 9 * partitions + 1 });
    // Still failing 9.9 s later: nothing more.
    now += 9_900;
    for (let p = 0; p < partitions; p++) link.fetchFailed(refused, 't', p, 11);
    expect(warnings).toHaveLength(1);
    // Another leader's link warns on its own.
    other.fetchFailed(refused, 't', 1, 10);
    expect(warnings).toHaveLength(2);
    expect(warnings[1]).toMatchObject({ leader: 3, fetch_failures: 1 });
    // 10 s after its last warning, leader 1's link warns again, counting every failure since.
    now += 100;
    link.fetchFailed(refused, 't', 7, 12);
    expect(warnings).toHaveLength(3);
    expect(warnings[2]).toMatchObject({ leader: 1, partition: 7, failures: 12, fetch_failures: 2 * partitions - 1 + 1 });
    link.release('t', 0);
    other.release('t', 1);
  });
});

describe('LeaderLink.connection', () => {
  it('answers every fetch loop with the last failed connect for CONNECT_RETRY_MS, then tries again, and forgets the failure once connected', async () => {
    let now = 5_000_000;
    let registered = false;
    let connects = 0;
    let refuse = true;
    const lookups: number[] = [];
    const conn = { closed: false, close: async () => {}, command: async () => new Promise<string>(() => {}) };
    const links = new LeaderLinks({
      brokerId: 2,
      registry: {
        get: (id: number) => {
          lookups.push(id);
          return registered ? { advertisedAddress: '127.0.0.1:1' } : undefined;
        },
      } as unknown as BrokerRegistry,
      logger: pino({ level: 'silent' }),
      waitMs: 1000,
      connect: async () => {
        connects++;
        if (refuse) throw new Error('connect ECONNREFUSED');
        return conn as unknown as Connection;
      },
      now: () => now,
    });
    const link = links.acquire(1, 't', 0);
    const settle = (p: Promise<Connection>) => p.then(() => 'ok' as const, (err: Error) => err);
    // The leader is not registered: the first loop's attempt fails with NOT_LEADER...
    const first = await settle(link.connection());
    expect(first).toMatchObject({ code: 'NOT_LEADER' });
    expect(lookups).toHaveLength(1);
    // ...and 3,000 loops asking within CONNECT_RETRY_MS get that same error, with no new attempt.
    const again = await Promise.all(Array.from({ length: 3000 }, () => settle(link.connection())));
    expect(new Set(again)).toEqual(new Set([first]));
    expect(lookups).toHaveLength(1);
    // Past the window: one new attempt; registered now, but the connect is refused, which is shared in turn.
    registered = true;
    now += CONNECT_RETRY_MS;
    const refused = await settle(link.connection());
    expect(refused).toMatchObject({ message: 'connect ECONNREFUSED' });
    expect(await settle(link.connection())).toBe(refused);
    expect(connects).toBe(1);
    // The leader is back: the next attempt after the window connects, and later calls use that connection.
    refuse = false;
    now += CONNECT_RETRY_MS;
    expect(await settle(link.connection())).toBe('ok');
    expect(await settle(link.connection())).toBe('ok');
    expect(await settle(link.connection())).toBe('ok');
    // Two shared connections, each connected once.
    expect(connects).toBe(3);
    link.release('t', 0);
  });
});
