/**
 * kill -9 of a group's coordinator in a 3-broker cluster (real etcd, real broker processes). The group's
 * coordinator is the leader of its `__consumer_offsets` partition; when that broker dies another replica
 * takes the partition over, replays it, and gives every restored member a full session timeout before
 * expiring it, while they rediscover it (docs/architecture.md, "Cluster mode", coordinators). The members resume with the same member id and generation, no committed
 * offset is lost or regresses, and the group works again without a rebalance. How long that takes is
 * printed, not asserted (the waits allow WAIT_MS; the chaos suite measures failover times).
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { Consumer } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { TestCluster } from '../helpers/cluster.js';
import { GroupMember, fetchOffset, groupStatus, kv, settle } from '../integration/groups/helpers.js';
import { expectError, sleep } from '../helpers/util.js';

const SESSION_MS = 6000;
/** How long a step may take before the test gives up: far above the session, so a slow machine cannot fail it. */
const WAIT_MS = 30_000;
const PARTITIONS = 4;

let cluster: TestCluster | undefined;
const cleanups: Array<() => Promise<unknown>> = [];

afterEach(async () => {
  for (const f of cleanups.splice(0).reverse()) await f().catch(() => {});
  await cluster?.dispose();
  cluster = undefined;
});

function live(c: TestCluster, id: number): boolean {
  const p = c.broker(id).proc;
  return p !== undefined && p.exitCode === null && p.signalCode === null;
}

/** FIND_COORDINATOR from broker `via`: the coordinator's id and address. */
async function findCoordinator(c: TestCluster, group: string, via: number): Promise<{ id: number; host: string; port: number; partition: number }> {
  const conn = await c.connect(via);
  try {
    const r = kv(await conn.command('FIND_COORDINATOR', { group }));
    return { id: Number(r.get('coordinator_id')), host: r.get('host')!, port: Number(r.get('port')), partition: Number(r.get('partition')) };
  } finally {
    await conn.close().catch(() => {});
  }
}

/** Creates a replicated topic and waits until every partition has a leader and a full ISR. */
async function createTopic(c: TestCluster, topic: string, partitions: number): Promise<void> {
  const conn = await c.connect(0);
  await conn.command('CREATE', { topic, partitions, replication_factor: 3 });
  await c.waitFor(`${topic}: leaders and full ISRs`, async () => {
    const ps = (await c.status()).partitions.filter((p) => p.topic === topic);
    return ps.length === partitions && ps.every((p) => p.leader >= 0 && p.isr.length === 3);
  });
}

/** acks=all PUBLISH of `n` records to each partition, each sent to the partition's leader. */
async function fillReplicated(c: TestCluster, topic: string, partitions: number, n: number): Promise<void> {
  for (let p = 0; p < partitions; p++) {
    const { id } = await c.leaderOf(topic, p);
    const conn = await c.connect(id);
    await Promise.all(Array.from({ length: n }, (_, i) => conn.json('PUBLISH', { topic, partition: p, acks: 'all', message: `p${p}-r${i}` })));
    await conn.close();
  }
}

function retriableRouting(err: unknown): boolean {
  return err instanceof TributaryError && ['COORDINATOR_LOADING', 'NOT_COORDINATOR', 'connection_lost', 'NOT_LEADER', 'request_timeout'].includes(err.code);
}

describe('kill -9 of a group coordinator in a 3-broker cluster', () => {
  it('members resume on the new coordinator with their member ids and generation; no commit is lost or regresses', async () => {
    cluster = await TestCluster.start(3);
    const c = cluster;
    const TOPIC = 'cf';
    const GROUP = 'g-failover';
    await createTopic(c, TOPIC, PARTITIONS);
    await fillReplicated(c, TOPIC, PARTITIONS, 30);

    // Every broker names the same coordinator.
    const views = await Promise.all([0, 1, 2].map((id) => findCoordinator(c, GROUP, id)));
    const coord = views[0]!;
    expect(views.map((v) => v.id)).toEqual([coord.id, coord.id, coord.id]);
    expect(coord.port).toBe(c.broker(coord.id).port);
    expect((await c.leaderOf('__consumer_offsets', coord.partition)).id).toBe(coord.id);

    const connA = await c.connect(coord.id);
    const connB = await c.connect(coord.id);
    const admin = await c.connect(coord.id);
    const a = new GroupMember(connA, TOPIC, GROUP, 'a');
    const b = new GroupMember(connB, TOPIC, GROUP, 'b');
    await Promise.all([a.join({ session_timeout_ms: SESSION_MS }), b.join({ session_timeout_ms: SESSION_MS })]);
    const stable = await settle(admin, [a, b]);
    expect(stable.members).toHaveLength(2);
    expect([...a.owned, ...b.owned].sort()).toEqual([0, 1, 2, 3]);
    expect(a.generation).toBe(b.generation);
    const generation = a.generation;

    // Before the failover, a broker that is not the coordinator redirects every group command to it.
    const other = [0, 1, 2].find((id) => id !== coord.id)!;
    const oc = await c.connect(other);
    const redirect = { host: coord.host, port: String(coord.port) };
    const p0 = a.owned[0]!;
    await expectError(oc.command('JOIN_GROUP', { topic: TOPIC, group: GROUP, member: 'x' }), 'NOT_COORDINATOR', redirect);
    await expectError(oc.command('SYNC_GROUP', { topic: TOPIC, group: GROUP, member: a.id, generation }), 'NOT_COORDINATOR', redirect);
    await expectError(oc.command('HEARTBEAT', { topic: TOPIC, group: GROUP, member: a.id, generation }), 'NOT_COORDINATOR', redirect);
    await expectError(
      oc.command('COMMIT_OFFSET', { topic: TOPIC, group: GROUP, partition: p0, offset: 1, member: a.id, generation }),
      'NOT_COORDINATOR',
      redirect,
    );
    await expectError(oc.command('FETCH_OFFSET', { topic: TOPIC, group: GROUP, partition: p0 }), 'NOT_COORDINATOR', redirect);
    const notCoord = await expectError(oc.command('GROUP_STATUS', { group: GROUP }), 'NOT_COORDINATOR', redirect);
    expect(notCoord.retriable).toBe(true);

    // Commits, several per partition; each acknowledged one is replicated.
    const last = new Map<number, number>();
    for (const step of [5, 12, 20]) {
      for (const m of [a, b]) {
        for (const p of m.owned) {
          await m.commit(p, step + p);
          last.set(p, step + p);
        }
      }
    }
    for (let p = 0; p < PARTITIONS; p++) expect(await fetchOffset(admin, TOPIC, GROUP, p)).toEqual({ offset: last.get(p), committed: true });
    await Promise.all([a.heartbeat(), b.heartbeat()]);
    const membersBefore = stable.members.map((m) => m.member_id).sort();
    const historyBefore = (await groupStatus(admin, GROUP)).history.length;

    await c.broker(coord.id).kill('SIGKILL');
    const killedAt = Date.now();
    const survivors = [0, 1, 2].filter((id) => id !== coord.id);

    // FIND_COORDINATOR from a live broker eventually names another (live) broker.
    const next = await c.waitFor(
      'FIND_COORDINATOR to name a new coordinator',
      async () => {
        const v = await findCoordinator(c, GROUP, survivors[0]!);
        return v.id !== coord.id && live(c, v.id) ? v : false;
      },
      WAIT_MS,
    );
    const foundMs = Date.now() - killedAt;
    expect(survivors).toContain(next.id);
    expect(next.port).toBe(c.broker(next.id).port);

    // The members reconnect there and heartbeat with the SAME member id and generation.
    const resumed: GroupMember[] = [];
    for (const m of [a, b]) {
      const r = new GroupMember(await c.connect(next.id), TOPIC, GROUP, m.clientId);
      r.id = m.id;
      r.generation = m.generation;
      r.owned = m.owned;
      resumed.push(r);
    }
    const heartbeatReplies = await Promise.all(
      resumed.map((m) =>
        c.waitFor(
          `a heartbeat of ${m.id} on the new coordinator`,
          async () => {
            try {
              return kv(await m.heartbeat());
            } catch (err) {
              if (retriableRouting(err)) return false;
              throw err; // member_not_found, REBALANCE_IN_PROGRESS, GEN_MISMATCH: the resume failed
            }
          },
          WAIT_MS,
        ),
      ),
    );
    const heartbeatMs = Date.now() - killedAt;
    for (const [i, r] of heartbeatReplies.entries())
      expect({ member: r.get('member'), generation: Number(r.get('generation')) }).toEqual({ member: resumed[i]!.id, generation });

    // Consuming again: CONSUME with the group on each partition's (possibly new) leader starts at the
    // committed offset even when asked for offset 0.
    const consumeStarts = new Map<number, number>();
    await c.waitFor(
      'CONSUME with the group on every partition',
      async () => {
        for (let p = 0; p < PARTITIONS; p++) {
          if (consumeStarts.has(p)) continue;
          const l = await c.leaderOf(TOPIC, p);
          if (l.id < 0 || !live(c, l.id)) return false;
          const owner = resumed.find((m) => m.owned.includes(p))!;
          const conn = await c.connect(l.id);
          try {
            const batch = await conn.consume({ topic: TOPIC, partition: p, offset: 0, group: GROUP, member: owner.id, generation, batch: 1 });
            // Empty: a new leader whose high-water mark has not caught up yet.
            if (batch.records.length === 0) return false;
            consumeStarts.set(p, batch.records[0]!.offset);
          } catch (err) {
            if (retriableRouting(err)) return false;
            throw err;
          } finally {
            await conn.close().catch(() => {});
          }
        }
        return true;
      },
      WAIT_MS,
    );
    const consumingMs = Date.now() - killedAt;
    expect(Object.fromEntries(consumeStarts)).toEqual(Object.fromEntries(last));
    console.log(
      `coordinator failover: broker ${coord.id} -> ${next.id}; FIND_COORDINATOR after ${foundMs} ms, heartbeats after ${heartbeatMs} ms, consuming after ${consumingMs} ms`,
    );

    // No commit lost, none regressed.
    const newAdmin = await c.connect(next.id);
    for (let p = 0; p < PARTITIONS; p++) expect(await fetchOffset(newAdmin, TOPIC, GROUP, p)).toEqual({ offset: last.get(p), committed: true });
    // The same group: same members, same generation, no rebalance recorded by the move.
    const after = await groupStatus(newAdmin, GROUP);
    expect(after.generation).toBe(generation);
    expect(after.members.map((m) => m.member_id).sort()).toEqual(membersBefore);
    expect(after.history.length).toBe(historyBefore);
    // Offsets stay monotonic on the new coordinator: lower is refused, equal is idempotent, higher moves.
    for (const m of resumed) {
      for (const p of m.owned) {
        await expectError(m.commit(p, last.get(p)! - 1), 'offset_regression', { current: String(last.get(p)), requested: String(last.get(p)! - 1) });
        await m.commit(p, last.get(p)!);
        await m.commit(p, last.get(p)! + 3);
        last.set(p, last.get(p)! + 3);
      }
    }
    for (let p = 0; p < PARTITIONS; p++) expect(await fetchOffset(newAdmin, TOPIC, GROUP, p)).toEqual({ offset: last.get(p), committed: true });
    // The remaining non-coordinator now redirects to the new coordinator.
    const stillOther = survivors.find((id) => id !== next.id)!;
    await expectError((await c.connect(stillOther)).command('HEARTBEAT', { topic: TOPIC, group: GROUP, member: a.id, generation }), 'NOT_COORDINATOR', {
      host: next.host,
      port: String(next.port),
    });
    // Still the same generation a while later (the new owner did not expire anyone).
    await sleep(500);
    for (const m of resumed) expect(kv(await m.heartbeat()).get('generation')).toBe(String(generation));
  }, 60_000);

  it('a running SDK consumer keeps its member id and generation, keeps consuming and committing, and no commit regresses', async () => {
    cluster = await TestCluster.start(3);
    const c = cluster;
    const TOPIC = 'live';
    const GROUP = 'g-sdk-failover';
    await createTopic(c, TOPIC, PARTITIONS);

    const producer = new Producer({
      brokers: c.addresses,
      acks: 'all',
      lingerMs: 2,
      retry: { retries: 100, initialDelayMs: 50, maxDelayMs: 500, maxElapsedMs: 30_000 },
    });
    cleanups.push(() => producer.close());
    const acked: string[] = [];
    let sendFailures = 0;
    const sendErrors = new Map<string, number>();
    const sendMessages = new Set<string>();
    let produced = 0;
    let stopProducing = false;
    const producing = (async () => {
      while (!stopProducing) {
        const value = `v${produced}`;
        const partition = produced % PARTITIONS;
        produced++;
        producer.send({ topic: TOPIC, messages: [{ value, partition }] }).then(
          () => acked.push(value),
          (err: unknown) => {
            sendFailures++;
            const code = err instanceof TributaryError ? err.code : String(err);
            sendErrors.set(code, (sendErrors.get(code) ?? 0) + 1);
            sendMessages.add(err instanceof Error ? err.message : String(err));
          },
        );
        await sleep(5);
      }
      await producer.flush();
    })();

    const consumer = new Consumer({
      brokers: c.addresses,
      groupId: GROUP,
      topic: TOPIC,
      clientId: 'survivor',
      autoOffsetReset: 'earliest',
      sessionTimeoutMs: SESSION_MS,
      heartbeatIntervalMs: 500,
      maxWaitMs: 200,
      autoCommit: true,
      autoCommitIntervalMs: 200,
      retry: { retries: 100, initialDelayMs: 20, maxDelayMs: 500, maxElapsedMs: 30_000 },
    });
    cleanups.push(() => consumer.close());
    const consumed = new Map<string, number>();
    const joins: Array<{ memberId: string; generation: number; at: number }> = [];
    const commits: Array<{ at: number }> = [];
    const crashes: Array<{ error: Error; fatal: boolean }> = [];
    consumer.on('group.join', (e) => joins.push({ memberId: e.memberId, generation: e.generation, at: Date.now() }));
    consumer.on('commit', () => commits.push({ at: Date.now() }));
    consumer.on('crash', (e) => crashes.push(e));
    const running = consumer.run({
      eachMessage: ({ message }) => {
        const v = message.value.toString();
        if (!consumed.has(v)) consumed.set(v, Date.now());
      },
    });

    // Committed offsets, sampled all along from whoever coordinates the group: never lower than before.
    const samples: Array<Array<number | undefined>> = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        try {
          const alive = [0, 1, 2].filter((id) => live(c, id));
          const co = await findCoordinator(c, GROUP, alive[0]!);
          if (live(c, co.id)) {
            const conn = await c.connect(co.id);
            try {
              const row: Array<number | undefined> = [];
              for (let p = 0; p < PARTITIONS; p++) {
                const o = await fetchOffset(conn, TOPIC, GROUP, p);
                row.push(o.committed ? o.offset : undefined);
              }
              samples.push(row);
            } finally {
              await conn.close().catch(() => {});
            }
          }
        } catch {
          // the coordinator is moving
        }
        await sleep(150);
      }
    })();

    // A failing assertion must not leave the loops running (cleanups run last-in first).
    cleanups.push(async () => {
      stopProducing = true;
      sampling = false;
    });

    await c.waitFor('the consumer to own every partition and commit each', async () => {
      if (consumer.assignment().length !== PARTITIONS || consumed.size < 200) return false;
      const row = samples.at(-1);
      return row?.every((o) => o !== undefined && o > 0) === true;
    });
    const memberId = consumer.memberId;
    const generation = consumer.generation;
    expect(memberId).toMatch(/^survivor-/);
    const coord = await findCoordinator(c, GROUP, 0);
    const before: number[] = [];
    {
      const conn = await c.connect(coord.id);
      for (let p = 0; p < PARTITIONS; p++) before.push((await fetchOffset(conn, TOPIC, GROUP, p)).offset);
      await conn.close();
    }
    const producedAtKill = produced;
    const joinsBefore = joins.length;

    await c.broker(coord.id).kill('SIGKILL');
    const killedAt = Date.now();
    const survivors = [0, 1, 2].filter((id) => id !== coord.id);

    const next = await c.waitFor(
      'a new coordinator',
      async () => {
        const v = await findCoordinator(c, GROUP, survivors[0]!);
        return v.id !== coord.id && live(c, v.id) ? v : false;
      },
      WAIT_MS,
    );
    // Committing again: the new coordinator accepts the consumer's commits (an offset moves past its value
    // at the kill).
    await c.waitFor(
      'a commit past the pre-kill offsets',
      async () => {
        const conn = await c.connect(next.id);
        try {
          for (let p = 0; p < PARTITIONS; p++) if ((await fetchOffset(conn, TOPIC, GROUP, p)).offset > before[p]!) return true;
          return false;
        } finally {
          await conn.close().catch(() => {});
        }
      },
      WAIT_MS,
    );
    const committingMs = Date.now() - killedAt;
    // Consuming again everywhere: on every partition, a record produced after the kill is consumed.
    const postKill = (p: number) =>
      [...consumed].filter(([v]) => Number(v.slice(1)) >= producedAtKill && Number(v.slice(1)) % PARTITIONS === p).map(([, t]) => t);
    const diag = async () => {
      const perPartition = [0, 1, 2, 3].map((p) => ({
        partition: p,
        ackedAfterKill: acked.filter((v) => Number(v.slice(1)) >= producedAtKill && Number(v.slice(1)) % PARTITIONS === p).length,
        consumedAfterKill: postKill(p).length,
        lastAcked: acked.filter((v) => Number(v.slice(1)) % PARTITIONS === p).at(-1),
      }));
      const st = await c.status(next.id).catch((e: unknown) => String(e));
      return `\nper partition: ${JSON.stringify(perPartition)}\nsend errors: ${JSON.stringify(Object.fromEntries(sendErrors))} ${JSON.stringify([...sendMessages])}, produced ${produced}, acked ${acked.length}\nconsumer: state=${consumer.state} assignment=${consumer.assignment()} crashes=${crashes.length} ${JSON.stringify([...new Set(crashes.map((x) => `${x.fatal ? 'fatal' : 'non-fatal'}: ${x.error.message}`))])}\nstatus: ${JSON.stringify(st)}`;
    };
    const stalled = await c
      .waitFor('a record produced after the kill consumed on every partition', async () => [0, 1, 2, 3].every((p) => postKill(p).length > 0), WAIT_MS)
      .then(
        () => '',
        async (err: Error) => `${err.message.split('\n')[0]}${await diag()}`,
      );
    const consumingMs = stalled ? Number.POSITIVE_INFINITY : Math.max(...[0, 1, 2, 3].map((p) => Math.min(...postKill(p)))) - killedAt;
    const firstCommitMs = commits.find((x) => x.at > killedAt)?.at;

    // Everything acknowledged is consumed in the end.
    stopProducing = true;
    await producing;
    const missing = () => acked.filter((v) => !consumed.has(v));
    await c.waitFor('every acknowledged record consumed', async () => missing().length === 0, stalled ? 1000 : 15_000).catch(() => undefined);
    sampling = false;
    await sampler;

    console.log(
      `SDK consumer across coordinator kill (broker ${coord.id} -> ${next.id}): records produced after the kill consumed on every partition after ${consumingMs} ms, ` +
        `first commit after ${firstCommitMs ? firstCommitMs - killedAt : '-'} ms, a commit past the pre-kill offsets after ${committingMs} ms; ` +
        `${acked.length} acknowledged, ${sendFailures} failed sends (${JSON.stringify(Object.fromEntries(sendErrors))}), ${consumed.size} distinct consumed, ${joins.length - joinsBefore} JOINs after the kill`,
    );
    // The same member, the same generation: no new member and no new generation after the move.
    expect(consumer.memberId).toBe(memberId);
    expect(consumer.generation).toBe(generation);
    expect(joins.slice(joinsBefore).filter((j) => j.memberId !== memberId || j.generation !== generation)).toEqual([]);
    expect(crashes.filter((x) => x.fatal)).toEqual([]);
    expect(consumer.state).toBe('running');
    // Consuming again on every partition, everything acknowledged consumed, no send() failed and nothing
    // surfaced that a retry cannot fix (a failover only produces retriable errors). Soft: the commit
    // checks below run too.
    expect.soft(stalled, 'consumption after the kill').toBe('');
    expect.soft(missing().length, 'acknowledged records never consumed').toBe(0);
    expect.soft(sendFailures, `send() rejected: ${[...sendMessages].join('; ')}`).toBe(0);
    expect
      .soft(
        crashes.filter((x) => !(x.error instanceof TributaryError && x.error.retriable)).map((x) => x.error.message),
        'consumer errors',
      )
      .toEqual([]);
    // No committed offset ever went backwards, and none is below its value at the kill.
    for (let p = 0; p < PARTITIONS; p++) {
      const seq = samples.map((r) => r[p]).filter((o): o is number => o !== undefined);
      for (let i = 1; i < seq.length; i++) expect(seq[i]!, `partition ${p}: committed ${seq[i - 1]} then ${seq[i]}`).toBeGreaterThanOrEqual(seq[i - 1]!);
    }
    const conn: Connection = await c.connect(next.id);
    for (let p = 0; p < PARTITIONS; p++) expect((await fetchOffset(conn, TOPIC, GROUP, p)).offset).toBeGreaterThanOrEqual(before[p]!);

    await consumer.close();
    await running;
  }, 60_000);
});
