/**
 * A step of the broker's wall clock (an NTP correction) changes no wait and no rate: long polls on both
 * ports end at their wait, and the request rate limits of both ports neither throttle nor mute a
 * connection well under its budget. The broker runs with a preload that shifts Date.now() by what a file
 * says (test/helpers/wall-clock-shift.cjs); timers and performance.now() run on, as under a real step.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { TestCluster } from '../helpers/cluster.js';
import { BrokerProcess, ROOT } from '../helpers/launcher.js';
import { RawKafka } from '../helpers/raw-kafka.js';
import { freePort } from '../helpers/scripted-server.js';
import { removeDir, sleep, tempDir, until } from '../helpers/util.js';

const PRELOAD = path.join(ROOT, 'test', 'helpers', 'wall-clock-shift.cjs');
const BACK = -5 * 60_000;

/** A broker whose wall clock the test steps (`step`), with `args`. */
class ShiftedBroker {
  private constructor(
    readonly broker: BrokerProcess,
    private readonly dir: string,
    private readonly file: string,
  ) {}

  static async start(args: string[]): Promise<ShiftedBroker> {
    const dir = await tempDir('trib-clock-');
    const file = path.join(dir, 'shift');
    writeFileSync(file, '0');
    const broker = await BrokerProcess.start({
      args: ['--offsets-topic-partitions', '1', '--kafka-port', String(await freePort()), ...args],
      env: { NODE_OPTIONS: `--require ${PRELOAD}`, WALL_CLOCK_SHIFT_FILE: file },
    });
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'probe', partitions: 1 });
    await c.command('CREATE', { topic: 'idle', partitions: 1 });
    return new ShiftedBroker(broker, dir, file);
  }

  /** Steps the broker's wall clock to real time + `ms` and waits until its record timestamps show it. */
  async step(ms: number): Promise<void> {
    writeFileSync(this.file, String(ms));
    const probe = await this.broker.connect();
    await until(
      async () => {
        const reply = await probe.command('PUBLISH', { topic: 'probe', partition: 0, message: 'tick' });
        const offset = (JSON.parse(reply) as { offset: number }).offset;
        const batch = await probe.consume({ topic: 'probe', partition: 0, offset, batch: 1 });
        return Math.abs(batch.records[0]!.timestamp - (Date.now() + ms)) < 60_000;
      },
      10_000,
      'the broker to see the step',
    );
    probe.close();
  }

  async dispose(): Promise<void> {
    await this.broker.dispose();
    await removeDir(this.dir);
  }
}

describe('a wall-clock step of the broker: long polls', () => {
  let b: ShiftedBroker;
  let c: Connection;

  beforeAll(async () => {
    b = await ShiftedBroker.start([]);
    c = await b.broker.connect();
  }, 60_000);

  afterAll(async () => {
    await b?.dispose();
  });

  it('a long-poll CONSUME waiting when the clock steps back ends at its wait, not the step later', { timeout: 60_000 }, async () => {
    await b.step(0);
    const poll = c.consume({ topic: 'idle', partition: 0, offset: 0, wait_ms: 5000 });
    await b.step(BACK);
    // Answered (empty) at its 5 s wait; a deadline on the wall clock waits 5 minutes more.
    const r = await Promise.race([poll.then((x) => `answered ${x.records.length}`), sleep(30_000).then(() => 'no answer after 30 s')]);
    expect(r).toBe('answered 0');
  });

  it('a Kafka Fetch waiting when the clock steps back ends at its maxWaitMs', { timeout: 60_000 }, async () => {
    await b.step(0);
    const raw = await RawKafka.connect(b.broker.kafkaPort);
    try {
      const fetching = raw.call(1, 12, {
        maxWaitMs: 5000,
        minBytes: 1,
        maxBytes: 1 << 20,
        isolationLevel: 0,
        sessionId: 0,
        sessionEpoch: -1,
        topics: [{ topic: 'idle', partitions: [{ partition: 0, fetchOffset: 0, partitionMaxBytes: 1 << 20 }] }],
        forgottenTopicsData: [],
        rackId: '',
      });
      await b.step(BACK);
      const r = await Promise.race([fetching.then((res) => `answered ${res.errorCode}`), sleep(30_000).then(() => 'no answer after 30 s')]);
      expect(r).toBe('answered 0');
    } finally {
      raw.socket.destroy();
    }
  });
});

describe('a wall-clock step of the broker: request rate limits', () => {
  let b: ShiftedBroker;

  beforeAll(async () => {
    b = await ShiftedBroker.start(['--max-requests-per-second-per-connection', '50']);
  }, 60_000);

  afterAll(async () => {
    await b?.dispose();
  });

  it('after a step back, a connection well under its budget is neither throttled (main port) nor muted (Kafka port)', { timeout: 60_000 }, async () => {
    await b.step(0);
    const c = await b.broker.connect();
    const raw = await RawKafka.connect(b.broker.kafkaPort);
    const apiVersions = async () => ((await raw.call(18, 3, { clientSoftwareName: 't', clientSoftwareVersion: '1' })) as KafkaStruct).throttleTimeMs as number;
    try {
      // Both connections used before the step: their buckets were last refilled on the old clock.
      expect(await c.command('LIST')).toMatch(/^OK/);
      expect(await apiVersions()).toBe(0);
      await b.step(BACK);
      const replies: string[] = [];
      for (let i = 0; i < 10; i++)
        replies.push(
          await c.command('LIST').then(
            (r) => r.split(' ')[0]!,
            (e: { code: string }) => e.code,
          ),
        );
      expect(replies).toEqual(Array(10).fill('OK'));
      const throttles: number[] = [];
      for (let i = 0; i < 5; i++) throttles.push(await apiVersions());
      expect(throttles).toEqual([0, 0, 0, 0, 0]);
    } finally {
      raw.socket.destroy();
    }
  });
});

describe('a wall-clock step of every broker of a cluster', () => {
  let cluster: TestCluster;
  let dir: string;
  let file: string;

  beforeAll(async () => {
    dir = await tempDir('trib-clock-');
    file = path.join(dir, 'shift');
    writeFileSync(file, '0');
    cluster = await TestCluster.start(3, ['--min-insync-replicas', '3'], { NODE_OPTIONS: `--require ${PRELOAD}`, WALL_CLOCK_SHIFT_FILE: file });
    const c = await cluster.connect();
    await c.command('CREATE', { topic: 'steady', partitions: 1, replication_factor: 3 });
    await cluster.waitFor('steady led with a full ISR', async () => {
      const p = (await cluster.status()).partitions.find((x) => x.topic === 'steady');
      return p !== undefined && p.leader >= 0 && p.isr.length === 3;
    });
  }, 90_000);

  afterAll(async () => {
    await cluster?.dispose();
    if (dir) await removeDir(dir);
  });

  it('2 h forward under acks=all writes: no pause is seen, no follower leaves the ISR, every write is acknowledged', { timeout: 60_000 }, async () => {
    const leader = await cluster.connect((await cluster.leaderOf('steady', 0)).id);
    const write = (i: number) =>
      leader.command('PUBLISH', { topic: 'steady', partition: 0, acks: 'all', message: `w${i}` }).then(
        () => 'OK',
        (e: { code?: string; message: string }) => e.code ?? e.message,
      );
    const before = await Promise.all(Array.from({ length: 50 }, (_, i) => write(i)));
    expect(before.every((r) => r === 'OK')).toBe(true);
    writeFileSync(file, String(2 * 3600_000));
    // Writes for 3 s after the step (every broker sees it within 20 ms), 10 in flight at a time.
    const results: string[] = [];
    const end = performance.now() + 3000;
    let n = 50;
    while (performance.now() < end) results.push(...(await Promise.all(Array.from({ length: 10 }, () => write(n++)))));
    expect(results.filter((r) => r !== 'OK')).toEqual([]);
    const p = (await cluster.status()).partitions.find((x) => x.topic === 'steady')!;
    expect(p.isr.length).toBe(3);
  });
});
