/**
 * Reassignment on a real cluster (etcd + broker processes; 3 brokers, a 4th joining later): replicas
 * moved under an acks=all producer and a consumer group lose nothing acknowledged and the group sees
 * every record; the leader moves off a removed replica; a drain leaves a broker with nothing; replication
 * factor 1→3 and 3→2; cancel restores the original replicas; a controller killed mid-way; the throttle;
 * bad requests refused with nothing changed.
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Consumer } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import { parseLine } from 'tributary-protocol/command.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type ClusterStatus, TestCluster } from '../../helpers/cluster.js';
import type { ReassignmentView } from 'tributary-broker/cli/reassign-command.js';
import { envWithoutTributary, runCli } from '../../helpers/cli.js';
import { sleep, tempDir } from '../../helpers/util.js';

/** A REASSIGNMENTS entry, as the CLI reads it. */
type Progress = ReassignmentView;

describe('partition reassignment', () => {
  let cluster: TestCluster;
  let admin: Connection;

  beforeAll(async () => {
    cluster = await TestCluster.start(3, ['--min-insync-replicas', '2', '--leader-rebalance-delay-ms', '1000']);
    await cluster.addBroker();
    admin = await cluster.connect(0);
  }, 120_000);

  afterAll(async () => {
    await admin?.close().catch(() => {});
    await cluster?.dispose();
  });

  const partitionOf = (s: ClusterStatus, topic: string, partition: number) => s.partitions.find((p) => p.topic === topic && p.partition === partition)!;

  async function progress(topic?: string): Promise<Progress[]> {
    const c = await cluster.connect();
    try {
      return (await c.json<{ reassignments: Progress[] }>('REASSIGNMENTS', topic ? { topic } : {})).reassignments;
    } finally {
      await c.close().catch(() => {});
    }
  }

  /** Waits until no reassignment of `topic` is left and partition `partition` has exactly `replicas`. */
  async function settled(topic: string, partition: number, replicas: number[], timeoutMs = 60_000) {
    return cluster.waitFor(
      `${topic}[${partition}] on ${replicas.join(',')}`,
      async () => {
        if ((await progress(topic)).length > 0) return false;
        const p = partitionOf(await cluster.status(), topic, partition);
        return p.replicas.join() === replicas.join() && p.isr.length === replicas.length && p.leader >= 0 ? p : false;
      },
      timeoutMs,
    );
  }

  /** A broker's own copy of a partition: its log end offset (DESCRIBE answers with the local log). */
  async function localLeo(id: number, topic: string, partition: number): Promise<number> {
    const c = await cluster.connect(id);
    try {
      const d = await c.json<{ partitions: Array<{ id: number; leo: number }> }>('DESCRIBE', { topic });
      return d.partitions.find((p) => p.id === partition)!.leo;
    } finally {
      await c.close().catch(() => {});
    }
  }

  async function create(topic: string, partitions: number, rf: number): Promise<void> {
    await admin.command('CREATE', { topic, partitions, replication_factor: rf });
    await cluster.waitFor(`${topic} led with full ISRs`, async () => {
      const ps = (await cluster.status()).partitions.filter((p) => p.topic === topic);
      return ps.length === partitions && ps.every((p) => p.leader >= 0 && p.isr.length === rf);
    });
  }

  /** acks=all (or 1) text publishes of `n` records of `size` bytes to one partition, through its leader. */
  async function fill(topic: string, partition: number, n: number, size: number, acks: 'all' | 1 = 'all'): Promise<void> {
    const leader = partitionOf(await cluster.status(), topic, partition).leader;
    const c = await cluster.connect(leader);
    try {
      const body = 'x'.repeat(size);
      // A replica named leader answers NOT_LEADER reason=taking_over, before any append, until it has
      // taken the lead: sent again, so exactly `n` records are written.
      const publish = async (): Promise<void> => {
        for (;;) {
          try {
            await c.command('PUBLISH', { topic, partition, acks, message: body });
            return;
          } catch (err) {
            if (!(err instanceof TributaryError && err.code === 'NOT_LEADER' && err.fields.reason === 'taking_over')) throw err;
            await sleep(50);
          }
        }
      };
      for (let i = 0; i < n; i += 100) await Promise.all(Array.from({ length: Math.min(100, n - i) }, publish));
    } finally {
      await c.close().catch(() => {});
    }
  }

  /**
   * An acks=all SDK producer and a two-member consumer group on `topic` while `during` runs; then every
   * acknowledged record must have been consumed, at its acknowledged partition and offset.
   */
  async function underLoad(topic: string, partitions: number, during: () => Promise<void>): Promise<{ acked: number; retried: number }> {
    const group = `g-${topic}`;
    const seen = new Map<string, string>();
    const crashes: string[] = [];
    const consumers = ['a', 'b'].map(
      (name) =>
        new Consumer({
          brokers: cluster.addresses,
          groupId: group,
          topic,
          clientId: name,
          autoOffsetReset: 'earliest',
          autoCommitIntervalMs: 200,
          sessionTimeoutMs: 6000,
          heartbeatIntervalMs: 500,
          maxWaitMs: 200,
          retry: { retries: 1000, initialDelayMs: 20, maxDelayMs: 500, maxElapsedMs: 60_000 },
        }),
    );
    const runs = consumers.map((c) => {
      c.on('crash', (e) => crashes.push(e.error.message));
      return c.run({ eachMessage: ({ message }) => void seen.set(`${message.partition}:${message.offset}`, message.value.toString()) });
    });
    const producer = new Producer({ brokers: cluster.addresses, acks: 'all', lingerMs: 2, retry: { retries: 1000, initialDelayMs: 20, maxDelayMs: 500, maxElapsedMs: 60_000 } });
    let retried = 0;
    producer.on('retry', () => retried++);
    const acked = new Map<string, string>();
    let stop = false;
    const errors: string[] = [];
    try {
      const producing = (async () => {
        for (let i = 0; !stop; i++) {
          const value = `r${i}`;
          await producer
            .send({ topic, messages: [{ key: `k${i % 64}`, value }] })
            .then(([m]) => {
              // An offset acknowledged twice with different records would be a lost write.
              const at = `${m!.partition}:${m!.offset}`;
              expect(acked.get(at) ?? value).toBe(value);
              acked.set(at, value);
            })
            .catch((err: unknown) => errors.push(String(err)));
          if (i % 20 === 0) await sleep(5);
        }
      })();
      // Records before, during and after the change.
      await cluster.waitFor('records acknowledged before the change', async () => acked.size >= 100);
      await during();
      const after = acked.size;
      await cluster.waitFor('records acknowledged after the change', async () => acked.size >= after + 100);
      stop = true;
      await producing;
      expect(errors).toEqual([]);
      expect(new Set([...acked.keys()].map((k) => k.split(':')[0])).size).toBe(partitions);
      await cluster.waitFor('every acknowledged record consumed', async () => [...acked.keys()].every((k) => seen.has(k)), 30_000);
      const wrong = [...acked].filter(([k, v]) => seen.get(k) !== v);
      expect(wrong).toEqual([]);
      expect(crashes).toEqual([]);
      return { acked: acked.size, retried };
    } finally {
      stop = true;
      await producer.close().catch(() => {});
      await Promise.all(consumers.map((c) => c.close().catch(() => {})));
      await Promise.allSettled(runs);
    }
  }

  it('moves replicas under an acks=all producer and a consumer group: nothing acknowledged lost, the leader leaves a removed broker, its copy is dropped', async () => {
    await create('moving', 2, 3);
    await fill('moving', 0, 2000, 1000);
    const before = partitionOf(await cluster.status(), 'moving', 0);
    const removed = before.leader;
    // The leader's replica goes to broker 3 (the one that joined later): leadership must move.
    const target = [3, ...before.replicas.filter((id) => id !== removed)];
    let requestedAt = 0;
    const { acked, retried } = await underLoad('moving', 2, async () => {
      requestedAt = Date.now();
      expect(await admin.command('REASSIGN', { topic: 'moving', assignments: `0:${target.join(',')}` })).toBe('OK topic=moving partitions=0 throttle=0');
      await settled('moving', 0, target);
    });
    const after = partitionOf(await cluster.status(), 'moving', 0);
    expect(after.leader).not.toBe(removed);
    expect(target).toContain(after.leader);
    expect(after.leader_epoch).toBeGreaterThan(before.leader_epoch);
    // The removed broker holds no copy any more; the new one holds the whole log.
    await cluster.waitFor('the removed replica to drop its data', async () => (await localLeo(removed, 'moving', 0)) === 0);
    const leaderLeo = await localLeo(after.leader, 'moving', 0);
    await cluster.waitFor('broker 3 to hold the whole log', async () => (await localLeo(3, 'moving', 0)) === leaderLeo || (await localLeo(3, 'moving', 0)) >= leaderLeo);
    console.log(`reassign under load: ${acked} acknowledged, ${retried} producer retries, moved in ${Date.now() - requestedAt} ms`);
  }, 120_000);

  /**
   * A one-partition topic of 50 records whose leader is about to be moved off: the leader, its log end and
   * the replicas to move to (broker 3 in its place); `moveOff` then moves it and waits until the old
   * leader dropped its copy.
   */
  async function leaderToMoveOff(topic: string) {
    await create(topic, 1, 3);
    await fill(topic, 0, 50, 50);
    const before = partitionOf(await cluster.status(), topic, 0);
    const removed = before.leader;
    const target = [3, ...before.replicas.filter((id) => id !== removed)];
    const moveOff = async () => {
      await admin.command('REASSIGN', { topic, assignments: `0:${target.join(',')}` });
      await settled(topic, 0, target);
      await cluster.waitFor('the removed replica to drop its data', async () => (await localLeo(removed, topic, 0)) === 0);
    };
    return { removed, leo: await localLeo(removed, topic, 0), moveOff };
  }

  it('a long poll on the leader that is moved off and drops its copy ends NOT_LEADER, never OFFSET_OUT_OF_RANGE', async () => {
    const { removed, leo, moveOff } = await leaderToMoveOff('polled');
    const reader = await cluster.connect(removed);
    try {
      // Waits at the end of the log, past the move and the drop of the old leader's copy.
      const waitMs = 30_000;
      const sentAt = Date.now();
      let endedAt = 0;
      const poll = reader.consume({ topic: 'polled', partition: 0, offset: leo, wait_ms: waitMs }).then(
        (b) => ({ records: b.records.length }),
        (e: unknown) => ({ code: (e as TributaryError).code }),
      );
      void poll.then(() => {
        endedAt = Date.now();
      });
      await moveOff();
      // A consumer resets its position on OFFSET_OUT_OF_RANGE; NOT_LEADER sends it to the new leader.
      expect(await poll).toEqual({ code: 'NOT_LEADER' });
      // Ended by the move (the leadership change wakes parked reads), not by its wait running out.
      expect(endedAt - sentAt).toBeLessThan(waitMs);
    } finally {
      await reader.close().catch(() => {});
    }
  }, 120_000);

  it('a STREAM on the leader that is moved off ends with NOT_LEADER, and serves nothing from the dropped copy', async () => {
    const { removed, leo, moveOff } = await leaderToMoveOff('streamed');
    const reader = await cluster.connect(removed);
    const stop = new AbortController();
    try {
      const it = reader.stream({ topic: 'streamed', partition: 0, offset: leo, keepalive_ms: 200 }, stop.signal);
      const ended = (async () => {
        let batches = 0;
        for (;;) {
          const n = await it.next();
          if (n.done) return { batches, reason: n.value?.reason, code: n.value?.code };
          batches++;
        }
      })();
      await moveOff();
      // A consumer re-routes on NOT_LEADER; a stream left open on a broker with no copy would wait forever.
      expect(await ended).toEqual({ batches: 0, reason: 'error', code: 'NOT_LEADER' });
    } finally {
      stop.abort();
      await reader.close().catch(() => {});
    }
  }, 120_000);

  it('refuses bad requests with an ERROR and changes nothing', async () => {
    const s = partitionOf(await cluster.status(), 'moving', 1);
    const bad: Array<[Record<string, string | number>, string, RegExp]> = [
      [{ topic: 'moving', assignments: '1:0,1,9' }, 'invalid_parameter', /not registered/],
      [{ topic: 'moving', assignments: '1:0,1,1' }, 'invalid_parameter', /listed twice/],
      [{ topic: 'moving', assignments: '1:0;1:1,2' }, 'invalid_parameter', /given twice|min_insync/],
      [{ topic: 'moving', assignments: '7:0,1' }, 'partition_not_found', /./],
      [{ topic: 'moving', assignments: 'one:0,1' }, 'invalid_parameter', /expected/],
      [{ topic: 'moving', assignments: '1:0' }, 'invalid_parameter', /min_insync_replicas/],
      [{ topic: 'nope', assignments: '0:0,1' }, 'topic_not_found', /./],
      [{ topic: 'moving', assignments: '1:0,1', throttle: -5 }, 'invalid_parameter', /./],
      [{ topic: 'moving', assignments: '1:0,1', bogus: 1 }, 'invalid_parameter', /./],
    ];
    for (const [params, code, reason] of bad) {
      const err = await admin.command('REASSIGN', params).catch((e: unknown) => e);
      expect(err, JSON.stringify(params)).toBeInstanceOf(TributaryError);
      expect((err as TributaryError).code, JSON.stringify(params)).toBe(code);
      expect((err as TributaryError).message, JSON.stringify(params)).toMatch(reason);
    }
    await expect(admin.command('ALTER_REPLICATION_FACTOR', { topic: 'moving', replication_factor: 5 })).rejects.toMatchObject({ code: 'NOT_ENOUGH_REPLICAS' });
    await expect(admin.command('DRAIN_BROKER', { broker: 42 })).rejects.toMatchObject({ code: 'invalid_parameter' });
    await expect(admin.command('REASSIGN_CANCEL', { topic: 'moving' })).rejects.toMatchObject({ code: 'no_reassignment' });
    // One in progress (held back by a tiny throttle on a partition with data): a second is refused.
    await fill('moving', 1, 200, 1000);
    const other = [0, 1, 2, 3].find((id) => !s.replicas.includes(id))!;
    const target = [...s.replicas.slice(0, 2), other];
    await admin.command('REASSIGN', { topic: 'moving', assignments: `1:${target.join(',')}`, throttle: 1000 });
    await expect(admin.command('REASSIGN', { topic: 'moving', assignments: `1:${s.replicas.join(',')}` })).rejects.toMatchObject({ code: 'reassignment_in_progress' });
    await expect(admin.command('ALTER_REPLICATION_FACTOR', { topic: 'moving', replication_factor: 2 })).rejects.toMatchObject({ code: 'reassignment_in_progress' });
    await admin.command('REASSIGN_CANCEL', { topic: 'moving', partition: 1 });
    await settled('moving', 1, s.replicas);
    expect(partitionOf(await cluster.status(), 'moving', 1).replicas).toEqual(s.replicas);
  }, 60_000);

  it('cancel mid-way restores the original replicas with nothing lost; the replica being added drops its copy', async () => {
    await create('cancelled', 1, 3);
    await fill('cancelled', 0, 400, 1000);
    const before = partitionOf(await cluster.status(), 'cancelled', 0);
    const spare = [0, 1, 2, 3].find((id) => !before.replicas.includes(id))!;
    // Replace the leader by the spare broker, slowly (2 KB/s for ~400 KB): cancel while it catches up.
    const target = [spare, ...before.replicas.filter((id) => id !== before.leader)];
    await underLoad('cancelled', 1, async () => {
      await admin.command('REASSIGN', { topic: 'cancelled', assignments: `0:${target.join(',')}`, throttle: 2000 });
      const p = await cluster.waitFor('the spare broker to have fetched something', async () => {
        const [x] = await progress('cancelled');
        return x && x.phase === 'catching_up' && (x.behind[0]?.offset ?? 0) > 0 ? x : false;
      });
      expect(p.adding).toEqual([spare]);
      expect(p.removing).toEqual([before.leader]);
      expect(p.replicas).toEqual([...before.replicas, spare]);
      expect(await admin.command('REASSIGN_CANCEL', { topic: 'cancelled' })).toBe('OK cancelled=cancelled[0] count=1');
      await settled('cancelled', 0, before.replicas);
    });
    await cluster.waitFor('the spare broker to drop its partial copy', async () => (await localLeo(spare, 'cancelled', 0)) === 0);
  }, 120_000);

  it('replication factor 1 -> 3 -> 2: new replicas get the whole log; the topic definition follows', async () => {
    await create('rf', 2, 1);
    for (const p of [0, 1]) await fill('rf', p, 300, 200, 1);
    expect(await admin.command('ALTER_REPLICATION_FACTOR', { topic: 'rf', replication_factor: 3 })).toBe('OK topic=rf replication_factor=3 partitions=0,1 throttle=0');
    for (const p of [0, 1]) {
      const s = await cluster.waitFor(`rf[${p}] at 3 replicas`, async () => {
        const x = partitionOf(await cluster.status(), 'rf', p);
        return (await progress('rf')).length === 0 && x.replicas.length === 3 && x.isr.length === 3 ? x : false;
      });
      for (const id of s.replicas) await cluster.waitFor(`broker ${id} holds rf[${p}]`, async () => (await localLeo(id, 'rf', p)) === 300);
    }
    expect((await admin.json<{ replication_factor: number }>('DESCRIBE', { topic: 'rf' })).replication_factor).toBe(3);
    const three = partitionOf(await cluster.status(), 'rf', 0).replicas;
    await admin.command('ALTER_REPLICATION_FACTOR', { topic: 'rf', replication_factor: 2 });
    await settled('rf', 0, three.slice(0, 2));
    await cluster.waitFor('the dropped replica without data', async () => (await localLeo(three[2]!, 'rf', 0)) === 0);
    const c = await cluster.connect(partitionOf(await cluster.status(), 'rf', 0).leader);
    try {
      const b = await c.consume({ topic: 'rf', partition: 0, offset: 0, batch: 1000 });
      expect(b.records).toHaveLength(300);
    } finally {
      await c.close().catch(() => {});
    }
    // Partitions added later get the new factor.
    await admin.command('ADD_PARTITIONS', { topic: 'rf', partitions: 3 });
    expect(partitionOf(await cluster.status(), 'rf', 2).replicas).toHaveLength(2);
  }, 120_000);

  it('the throttle holds a catching-up replica to its rate, then it completes', async () => {
    await create('throttled', 1, 2);
    const size = 10_000;
    const n = 400; // ~4 MB: an unthrottled copy takes well under a second here
    await fill('throttled', 0, n, size);
    const s = partitionOf(await cluster.status(), 'throttled', 0);
    const spare = [0, 1, 2, 3].find((id) => !s.replicas.includes(id))!;
    const rate = 1_000_000;
    const t0 = Date.now();
    await admin.command('REASSIGN', { topic: 'throttled', assignments: `0:${[...s.replicas, spare].join(',')}`, throttle: rate });
    // Samples of the new replica's position while it catches up.
    const samples: Array<{ t: number; offset: number }> = [];
    let done = false;
    while (!done && Date.now() - t0 < 60_000) {
      const [x] = await progress('throttled');
      if (!x) done = true;
      else if (x.behind[0]?.offset !== null && x.behind[0]?.offset !== undefined) samples.push({ t: Date.now(), offset: x.behind[0].offset });
      await sleep(250);
    }
    const elapsed = Date.now() - t0;
    await settled('throttled', 0, [...s.replicas, spare]);
    // At 1 MB/s, 4 MB takes ~4 s: still behind after 2 s (an unthrottled copy is done by then).
    const at2s = samples.filter((x) => x.t - t0 <= 2000).at(-1);
    expect(at2s, JSON.stringify(samples)).toBeDefined();
    expect(at2s!.offset).toBeLessThan(n);
    // Bytes over time within the rate plus one fetch of slack.
    for (const x of samples) expect(x.offset * size, JSON.stringify(x)).toBeLessThanOrEqual(rate * ((x.t - t0) / 1000) + 2 * rate);
    expect(elapsed).toBeGreaterThanOrEqual(((n * size) / rate) * 1000 * 0.6);
    console.log(`throttle ${rate} B/s: ${n * size} bytes copied in ${elapsed} ms (${Math.round((n * size) / (elapsed / 1000))} B/s)`);
  }, 90_000);

  it('the CLI: partitions reassign from a plan, --status, topic alter --replication-factor, bad input', async () => {
    await create('cli', 1, 2);
    const s = partitionOf(await cluster.status(), 'cli', 0);
    const spare = [0, 1, 2, 3].find((id) => !s.replicas.includes(id))!;
    const dir = await tempDir();
    const plan = path.join(dir, 'plan.json');
    await writeFile(plan, JSON.stringify({ version: 1, partitions: [{ topic: 'cli', partition: 0, replicas: [spare, s.replicas[1]] }] }));
    const env = envWithoutTributary();
    const boot = ['--bootstrap', cluster.addresses.join(',')];
    const run = async (...args: string[]) => runCli([...args, ...boot], { env });
    const started = await run('partitions', 'reassign', '--plan', plan, '--wait');
    expect(started.stderr).toBe('');
    expect(started.code).toBe(0);
    expect(started.stdout).toContain('reassignment started for cli[0]');
    expect(started.stdout).toContain('done: no reassignment in progress');
    expect(partitionOf(await cluster.status(), 'cli', 0).replicas).toEqual([spare, s.replicas[1]]);
    expect((await run('partitions', 'reassign', '--status')).stdout.trim()).toBe('no reassignment in progress');
    const altered = await run('topic', 'alter', 'cli', '--replication-factor', '3', '--wait');
    expect(altered.code).toBe(0);
    expect(partitionOf(await cluster.status(), 'cli', 0).replicas).toHaveLength(3);
    // Bad input: the broker's refusal (exit 1) or a usage error (exit 2), and nothing started.
    const dup = await run('partitions', 'reassign', '--topic', 'cli', '--partition', '0', '--replicas', '1,1');
    expect(dup.code).toBe(1);
    expect(dup.stderr).toMatch(/^error: invalid_parameter .*listed twice/);
    await writeFile(plan, JSON.stringify({ partitions: [{ topic: 'cli', partition: 0, replicas: [1, 2], extra: true }] }));
    expect((await run('partitions', 'reassign', '--plan', plan)).code).toBe(2);
    expect((await run('broker', 'drain', 'x')).code).toBe(2);
    expect((await run('topic', 'alter', 'cli', '--replication-factor', '9')).stderr).toMatch(/NOT_ENOUGH_REPLICAS/);
    expect(await progress()).toEqual([]);
  }, 90_000);

  it('moving the __consumer_offsets partitions (their leaders replaced) while a group consumes: coordinators move, nothing is lost', async () => {
    await create('coordinated', 2, 3);
    const offsets = (await cluster.status()).partitions.filter((p) => p.topic === '__consumer_offsets');
    expect(offsets.length).toBeGreaterThan(0);
    const targets = offsets.map((p) => ({ partition: p.partition, target: [3, ...p.replicas.filter((id) => id !== p.leader)] }));
    await underLoad('coordinated', 2, async () => {
      await admin.command('REASSIGN', { topic: '__consumer_offsets', assignments: targets.map((t) => `${t.partition}:${t.target.join(',')}`).join(';') });
      for (const t of targets) await settled('__consumer_offsets', t.partition, t.target);
    });
    const s = await cluster.status();
    for (const t of targets) expect(partitionOf(s, '__consumer_offsets', t.partition).replicas).toEqual(t.target);
    // The group's committed offsets survived the move of its coordinator's partition.
    const coord = Number(parseLine(await admin.command('FIND_COORDINATOR', { group: 'g-coordinated' })).params.get('coordinator_id'));
    const c = await cluster.connect(coord);
    try {
      const committed = await Promise.all([0, 1].map(async (p) => Number(parseLine(await c.command('FETCH_OFFSET', { topic: 'coordinated', group: 'g-coordinated', partition: p })).params.get('offset'))));
      expect(committed.every((o) => o > 0)).toBe(true);
    } finally {
      await c.close().catch(() => {});
    }
  }, 120_000);

  it('drain moves every replica and every leadership off a broker, onto the others', async () => {
    // Broker 3 hosts replicas by now (moving[0], rf, throttled...) and leads some.
    const before = await cluster.status();
    const hosted = before.partitions.filter((p) => p.replicas.includes(3));
    expect(hosted.length).toBeGreaterThan(0);
    const reply = parseLine(await admin.command('DRAIN_BROKER', { broker: 3 })).params;
    expect(Number(reply.get('partitions'))).toBe(hosted.length);
    const after = await cluster.waitFor(
      'broker 3 to hold no replica and lead nothing',
      async () => {
        if ((await progress()).length > 0) return false;
        const s = await cluster.status();
        return s.partitions.every((p) => !p.replicas.includes(3) && p.leader !== 3 && p.isr.length === p.replicas.length) ? s : false;
      },
      90_000,
    );
    // Each moved partition kept its replication factor.
    for (const p of hosted) expect(partitionOf(after, p.topic, p.partition).replicas).toHaveLength(p.replicas.length);
    for (const p of hosted) await cluster.waitFor(`broker 3 to drop ${p.topic}[${p.partition}]`, async () => p.topic.startsWith('__') || (await localLeo(3, p.topic, p.partition)) === 0);
  }, 120_000);

  it('drain of a dead broker: its replicas move to live brokers from the leaders, nothing is lost, and it drops its copies when it returns', async () => {
    await create('dead', 2, 2);
    // Both partitions get a replica on broker 3, one of them led there (the first replica is preferred).
    for (const [partition, replicas] of [[0, '3,0'], [1, '1,3']] as const) {
      await admin.command('REASSIGN', { topic: 'dead', assignments: `${partition}:${replicas}` });
      const [preferred] = replicas.split(',').map(Number);
      await settled('dead', partition, replicas.split(',').map(Number));
      // The controller then moves the lead to the first replica (--leader-rebalance-delay-ms): fill once it
      // has, so that no PUBLISH meets the move (a refused one could not be told from one the old leader took).
      await cluster.waitFor(`dead[${partition}] led by broker ${preferred}`, async () => partitionOf(await cluster.status(), 'dead', partition).leader === preferred);
      await fill('dead', partition, 200, 100);
    }
    const victim = cluster.broker(3);
    await victim.kill('SIGKILL');
    try {
      // The leaders stay on (or move to) live replicas; DRAIN names broker 3 even though it is gone.
      const reply = parseLine(await admin.command('DRAIN_BROKER', { broker: 3 })).params;
      expect(Number(reply.get('partitions'))).toBeGreaterThanOrEqual(2);
      const after = await cluster.waitFor(
        'dead[0] and dead[1] off broker 3, with full ISRs',
        async () => {
          if ((await progress('dead')).length > 0) return false;
          const ps = (await cluster.status()).partitions.filter((p) => p.topic === 'dead');
          return ps.every((p) => !p.replicas.includes(3) && p.replicas.length === 2 && p.isr.length === 2 && p.leader >= 0) ? ps : false;
        },
        90_000,
      );
      // The new replicas caught up from the surviving ones: every record is on both.
      for (const p of after) for (const id of p.replicas) expect(await localLeo(id, 'dead', p.partition)).toBe(200);
    } finally {
      await victim.relaunch();
    }
    // Back, broker 3 is a replica of neither: it drops what it had.
    for (const partition of [0, 1]) await cluster.waitFor(`broker 3 to drop dead[${partition}]`, async () => (await localLeo(3, 'dead', partition)) === 0);
  }, 180_000);

  it('a controller killed mid-reassignment: the next one completes it from the state in etcd', async () => {
    await create('ctl', 1, 3);
    await fill('ctl', 0, 300, 1000);
    const s = partitionOf(await cluster.status(), 'ctl', 0);
    const spare = [0, 1, 2, 3].find((id) => !s.replicas.includes(id))!;
    const target = [spare, ...s.replicas.slice(1)];
    await admin.command('REASSIGN', { topic: 'ctl', assignments: `0:${target.join(',')}`, throttle: 20_000 });
    await cluster.waitFor('the reassignment started', async () => (await progress('ctl'))[0]?.phase === 'catching_up');
    const controller = (await cluster.status()).controller!;
    await cluster.broker(controller).kill('SIGKILL');
    try {
      await cluster.waitFor('another controller', async () => {
        const st = await cluster.status();
        return st.controller !== null && st.controller !== controller;
      });
      // Unthrottled from here, so it completes quickly under the new controller.
      const c = await cluster.connect();
      try {
        await c.command('REASSIGN_THROTTLE', { throttle: 0 });
      } finally {
        await c.close().catch(() => {});
      }
      if (target.includes(controller)) {
        // The killed broker is a target replica: it must come back before the partition can complete.
        await cluster.broker(controller).relaunch();
      }
      await settled('ctl', 0, target, 60_000);
    } finally {
      if (cluster.broker(controller).proc?.exitCode !== null || cluster.broker(controller).proc?.signalCode !== null) await cluster.broker(controller).relaunch().catch(() => {});
    }
  }, 120_000);
});
