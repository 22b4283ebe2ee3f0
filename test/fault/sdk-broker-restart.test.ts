/**
 * A running SDK consumer while its broker is kill -9ed and relaunched on the same data directory and the
 * same port: the consumer reconnects by itself, keeps its member (same member id: the restarted
 * coordinator gives every member a full session timeout), resumes from the committed offsets, and no
 * committed record is lost or delivered again.
 */
import { afterAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { Consumer } from 'tributary-client/consumer.js';
import { parseLine } from 'tributary-protocol/command.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { freePort } from '../helpers/scripted-server.js';
import { sleep, until } from '../helpers/util.js';

const TOPIC = 'restart';
const GROUP = 'g-restart';
const PARTITIONS = 4;

describe('SDK consumer across a broker kill -9 and restart', () => {
  let broker: BrokerProcess | undefined;
  let consumer: Consumer | undefined;
  const cleanup: Array<() => Promise<unknown>> = [];

  afterAll(async () => {
    await consumer?.close();
    await broker?.dispose();
    for (const f of cleanup.reverse()) await f();
  });

  it('reconnects, keeps its member, continues from the committed offsets, loses no committed record', async () => {
    const port = await freePort();
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '4', '--group-join-window-ms', '20', '--port', String(port)] });
    expect(broker.port).toBe(port);
    let admin: Connection = await broker.connect();
    await admin.command('CREATE', { topic: TOPIC, partitions: PARTITIONS });

    const produce = async (conn: Connection, tag: string, perPartition: number) => {
      const acks: Array<Promise<{ partition: number; offset: number }>> = [];
      for (let p = 0; p < PARTITIONS; p++) for (let i = 0; i < perPartition; i++) acks.push(conn.json('PUBLISH', { topic: TOPIC, partition: p, message: `${tag}-${p}-${i}` }));
      return Promise.all(acks);
    };
    const committed = async (conn: Connection) => {
      const out: number[] = [];
      for (let p = 0; p < PARTITIONS; p++) {
        const r = parseLine(await conn.command('FETCH_OFFSET', { topic: TOPIC, group: GROUP, partition: p })).params;
        out.push(r.get('committed') === 'true' ? Number(r.get('offset')) : -1);
      }
      return out;
    };

    const unhandled: unknown[] = [];
    const onUnhandled = (r: unknown) => unhandled.push(r);
    process.on('unhandledRejection', onUnhandled);
    try {
      const phase1 = await produce(admin, 'one', 50);
      expect(phase1).toHaveLength(200);

      consumer = new Consumer({
        brokers: [broker.address],
        groupId: GROUP,
        topic: TOPIC,
        clientId: 'survivor',
        autoOffsetReset: 'earliest',
        sessionTimeoutMs: 10_000,
        heartbeatIntervalMs: 300,
        maxWaitMs: 200,
        autoCommitIntervalMs: 200,
        retry: { initialDelayMs: 20, maxDelayMs: 500, maxElapsedMs: 60_000, retries: 100 },
      });
      const c = consumer;
      const seen: Array<{ value: string; partition: number; offset: number; at: number }> = [];
      const crashes: Array<{ code: string; fatal: boolean }> = [];
      const joins: string[] = [];
      c.on('crash', ({ error, fatal }) => crashes.push({ code: (error as { code?: string }).code ?? error.message, fatal }));
      c.on('group.join', (j) => joins.push(j.memberId));
      let heartbeats = 0;
      c.on('heartbeat', () => heartbeats++);
      const run = c.run({ eachMessage: ({ message }) => void seen.push({ value: message.value.toString(), partition: message.partition, offset: message.offset, at: Date.now() }) });

      await until(() => seen.length === 200, 15_000, 'phase 1 consumed', 20);
      await until(async () => (await committed(admin)).every((o) => o === 50), 10_000, 'phase 1 committed', 20);
      const member = c.memberId!;
      const generation = c.generation;
      expect(member).toMatch(/^survivor-/);

      // ---- kill -9 and relaunch on the same port and data directory
      await admin.close();
      await broker.kill('SIGKILL');
      const killedAt = Date.now();
      await sleep(800); // the consumer notices: reads and heartbeats fail and retry
      expect(c.state).not.toBe('closed');
      await broker.relaunch();
      expect(broker.port).toBe(port);
      admin = await broker.connect();

      // committed offsets survived the crash
      expect(await committed(admin)).toEqual([50, 50, 50, 50]);

      // the consumer resumes by itself: heartbeats succeed again as the same member
      const beatsAtRestart = heartbeats;
      await until(() => heartbeats > beatsAtRestart, 15_000, 'heartbeats after restart', 20);
      const s = await admin.json<{ members: Array<{ member_id: string }>; generation: number }>('GROUP_STATUS', { group: GROUP });
      expect(s.members.map((m) => m.member_id)).toEqual([member]);
      expect(c.memberId).toBe(member);

      // ---- phase 2: new records after the restart are read from the committed offsets on
      const phase2 = await produce(admin, 'two', 25);
      expect(phase2.every((a, i) => a.offset === 50 + (i % 25))).toBe(true);
      await until(() => seen.length === 300, 20_000, 'phase 2 consumed', 20);
      await until(async () => (await committed(admin)).every((o) => o === 75), 10_000, 'phase 2 committed', 20);

      // nothing delivered twice, nothing skipped, in order per partition
      const values = seen.map((x) => x.value);
      expect(new Set(values).size).toBe(300);
      for (let p = 0; p < PARTITIONS; p++) {
        expect(seen.filter((x) => x.partition === p).map((x) => x.offset)).toEqual(Array.from({ length: 75 }, (_, i) => i));
      }
      // after the restart the consumer went on exactly at the committed offset
      const after = seen.filter((x) => x.at > killedAt);
      for (let p = 0; p < PARTITIONS; p++) expect(after.find((x) => x.partition === p)?.offset).toBe(50);

      // the member kept its id (resume, no fresh join) and no failure was fatal
      expect(new Set(joins)).toEqual(new Set([member]));
      expect(c.generation).toBeGreaterThanOrEqual(generation);
      expect(crashes.filter((x) => x.fatal)).toEqual([]);
      expect(c.state).toBe('running');

      await c.close();
      await run;
      expect(c.state).toBe('closed');
      const end = await admin.json<{ members: unknown[] }>('GROUP_STATUS', { group: GROUP });
      expect(end.members).toEqual([]);
      await sleep(20);
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('kill -9 in the middle of consumption: every record processed, anything processed twice lies past the durable commit', async () => {
    const port = await freePort();
    const b = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '4', '--group-join-window-ms', '20', '--port', String(port)] });
    cleanup.push(() => b.dispose());
    let admin = await b.connect();
    await admin.command('CREATE', { topic: TOPIC, partitions: PARTITIONS });
    const PER = 300;
    const acks: Array<Promise<unknown>> = [];
    for (let p = 0; p < PARTITIONS; p++) for (let i = 0; i < PER; i++) acks.push(admin.command('PUBLISH', { topic: TOPIC, partition: p, message: `${p}-${i}` }));
    await Promise.all(acks);

    const c = new Consumer({
      brokers: [b.address],
      groupId: 'g-midway',
      topic: TOPIC,
      clientId: 'midway',
      autoOffsetReset: 'earliest',
      sessionTimeoutMs: 10_000,
      heartbeatIntervalMs: 300,
      maxWaitMs: 200,
      maxBatchRecords: 50,
      autoCommitIntervalMs: 150,
      partitionsConsumedConcurrently: PARTITIONS,
      retry: { initialDelayMs: 20, maxDelayMs: 500, maxElapsedMs: 60_000, retries: 100 },
    });
    cleanup.push(() => c.close());
    const seen: Array<{ partition: number; offset: number; at: number }> = [];
    const log: string[] = [];
    c.on('group.join', (j) => log.push(`join ${j.memberId} gen=${j.generation}`));
    c.on('rebalance.start', (r) => log.push(`rebalance ${r.reason}`));
    c.on('crash', ({ error, fatal }) => log.push(`crash ${(error as { code?: string }).code} fatal=${fatal} ${error.message}`));
    const run = c.run({
      eachMessage: async ({ message }) => {
        await sleep(2); // about 1-2 s for the whole log: the kill lands mid-way
        seen.push({ partition: message.partition, offset: message.offset, at: Date.now() });
      },
    });
    await until(() => seen.length >= (PARTITIONS * PER) / 4, 15_000, 'a quarter consumed', 20);
    const member = c.memberId;
    await admin.close();
    await b.kill('SIGKILL');
    const killedAt = Date.now();
    const seenAtKill = seen.length;
    expect(seenAtKill).toBeLessThan(PARTITIONS * PER);
    await sleep(500);
    await b.relaunch();
    admin = await b.connect();
    // what survived: the commits that were durable when the broker died
    const durable: number[] = [];
    for (let p = 0; p < PARTITIONS; p++) {
      const r = parseLine(await admin.command('FETCH_OFFSET', { topic: TOPIC, group: 'g-midway', partition: p })).params;
      durable.push(Number(r.get('offset')));
    }
    await until(() => new Set(seen.map((x) => `${x.partition}:${x.offset}`)).size === PARTITIONS * PER, 30_000, 'everything consumed after the restart', 20).catch((err: Error) => {
      const per = Array.from({ length: PARTITIONS }, (_, p) => new Set(seen.filter((x) => x.partition === p).map((x) => x.offset)).size);
      throw new Error(`${err.message}: per partition ${per}, state ${c.state}, assignment ${c.assignment()}\n${log.join('\n')}`);
    });
    await until(async () => {
      for (let p = 0; p < PARTITIONS; p++) {
        const r = parseLine(await admin.command('FETCH_OFFSET', { topic: TOPIC, group: 'g-midway', partition: p })).params;
        if (Number(r.get('offset')) !== PER) return false;
      }
      return true;
    }, 10_000, 'everything committed', 20);
    await c.close();
    await run;
    await admin.close();

    expect(c.memberId, log.join('\n')).toBe(member); // resumed, not re-joined fresh
    for (let p = 0; p < PARTITIONS; p++) {
      const mine = seen.filter((x) => x.partition === p);
      const counts = new Map<number, number>();
      for (const x of mine) counts.set(x.offset, (counts.get(x.offset) ?? 0) + 1);
      // at least once
      expect([...counts.keys()].sort((x, y) => x - y)).toEqual(Array.from({ length: PER }, (_, i) => i));
      for (const [o, n] of counts) {
        // at most twice, and a second delivery only for a record the durable commit did not cover
        expect(n, `partition ${p} offset ${o}\n${log.join('\n')}`).toBeLessThanOrEqual(2);
        if (n === 2) expect(o, `partition ${p} offset ${o} redelivered below the durable commit ${durable[p]}\n${log.join('\n')}`).toBeGreaterThanOrEqual(durable[p]!);
      }
      // before the kill, nothing twice
      const before = mine.filter((x) => x.at <= killedAt).map((x) => x.offset);
      expect(new Set(before).size, log.join('\n')).toBe(before.length);
    }
  });
});
