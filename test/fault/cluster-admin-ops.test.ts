/**
 * Administrative operations under faults, Jepsen-style: 4 brokers and etcd (test/chaos/cluster.ts), an
 * acks=all plain and idempotent producer writing every partition of `ops` (RF 3, min ISR 2) and a
 * consumer group reading it (test/chaos/workload.ts), every send, delivery and commit in one history.
 * Meanwhile steps (the three failpoint steps and a seeded choice of 8 others, in a seeded order) each run an
 * admin operation and a fault at its worst moment:
 *
 *   kill-target      a replica move throttled mid catch-up; kill -9 of the broker it moves to
 *   kill-source      the leader moved off; kill -9 of that leader mid catch-up
 *   kill-controller  a move throttled mid catch-up; kill -9 of the controller, the throttle lifted
 *   drain-kill       DRAIN_BROKER throttled; kill -9 of the drained broker mid-drain
 *   etcd-restart     a move throttled mid catch-up; etcd killed and restarted
 *   cancel-race      REASSIGN unthrottled and REASSIGN_CANCEL right after (racing the completion)
 *   cancel-completing  REASSIGN_CANCEL once the controller decided the completion, before it is written
 *   rf-alter         ALTER_REPLICATION_FACTOR 2, then 3 throttled with an added broker killed mid-way
 *   side-topic       ADD_PARTITIONS while a replica moves, then DELETE while replicas move, re-create
 *   delete-dead-target  DELETE while the broker a move goes to is dead, re-create, move onto it: new log only
 *   etcd-outage-drain   DRAIN_BROKER throttled, etcd frozen past every lease mid-drain
 *   delete-crash     DELETE's broker killed (failpoint) before the topic's requests go; re-created: none inherited
 *   rf-crash         ALTER_REPLICATION_FACTOR's broker killed (failpoint) once it stored the change: the definition
 *                    has the new factor, the moves complete, partitions added afterwards get it
 *
 * Each step must end: no request left, replicas as requested (or, for a cancel, the original ones), every
 * replica in sync, a live leader. At the end every fault is healed and the history is checked
 * (test/chaos/checker.ts): no acknowledged write lost, no offset with two values, no idempotent
 * duplicate, no committed offset going back; and auto leader rebalance hands every partition back to
 * its preferred replica. OPS_SEED replays a run's order and choices (printed at the start and on failure);
 * OPS_STEPS=name,... runs only those steps; OPS_VERBOSE=1 prints the operations as they run.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Producer } from 'tributary-client/producer.js';
import { afterAll, describe, expect, it } from 'vitest';
import { check, safetyAnomalyCount, SAFETY_KINDS } from '../chaos/checker.js';
import { ChaosCluster } from '../chaos/cluster.js';
import { History } from '../chaos/history.js';
import { chaosSeed, Rng } from '../chaos/prng.js';
import { ConsumerGroup, Producers } from '../chaos/workload.js';
import { sleep } from '../helpers/util.js';
import { AdminDriver } from './admin-ops.js';

const TOPIC = 'ops';
const SIDE = 'side';
/** Every completion or cancel of its reassignments is held 2.5 s once the controller decided it (a failpoint). */
const RACE = 'race';
const PHOENIX = 'phoenix';
/** DELETE of it crashes the broker answering, between removing the definition and its requests (a failpoint). */
const ZOMBIE = 'zombie';
/** ALTER_REPLICATION_FACTOR of it crashes the broker answering once the change is stored (a failpoint). */
const SHRINK = 'shrink';
const GROUP = 'ops-group';
const PARTITIONS = 4;
/** Far below the produce rate: a throttled new replica stays mid catch-up until the throttle is lifted. */
const SLOW = 500;
const seed = chaosSeed(process.env.OPS_SEED);

/**
 * A move unthrottled and its cancel right after: at once, once it is catching up, or (on RACE, whose
 * completions the controller holds for a while after deciding them) once it is completing. Either may
 * win, but not both.
 */
async function cancelRace(d: AdminDriver, topic: string, partitions: number, phase: 'now' | 'catching_up' | 'completing'): Promise<void> {
  const p = d.pick([...Array(partitions).keys()]);
  const before = await d.part(topic, p);
  const { target } = d.moveOne(before, { leader: d.rng.chance(0.5) });
  await d.admin('REASSIGN', { topic, assignments: `${p}:${target.join(',')}` });
  if (phase !== 'now') {
    await d.c.waitFor(`${topic}[${p}] ${phase} or done`, 15_000, async () => {
      const r = (await d.reassignments(topic)).reassignments.find((x) => x.partition === p);
      return r === undefined || r.phase === phase;
    });
  }
  const cancelled = await d.admin('REASSIGN_CANCEL', { topic: topic, partition: p }).then(
    () => true,
    () => false,
  );
  const ended = await d.untilSettled(topic, p, [target, before.replicas]);
  // A cancel that was answered OK must have taken effect: a completed reassignment cannot be cancelled.
  if (cancelled && ended.join() !== before.replicas.join()) {
    throw new Error(
      `REASSIGN_CANCEL of ${topic}[${p}] answered OK, yet the partition ended on the target ${ended.join(',')} (was ${before.replicas.join(',')})`,
    );
  }
}

type Step = (d: AdminDriver) => Promise<void>;

/** Steps every run takes (each drives a failpoint to its fault deterministically). */
const ALWAYS = ['cancel-completing', 'delete-crash', 'rf-crash'];
const RANDOM_STEPS = 8;

const steps: Record<string, Step> = {
  'kill-target': async (d) => {
    const p = d.pick([...Array(PARTITIONS).keys()]);
    const { target, into } = d.moveOne(await d.part(TOPIC, p));
    await d.admin('REASSIGN', { topic: TOPIC, assignments: `${p}:${target.join(',')}`, throttle: SLOW });
    await d.untilCatchingUp(TOPIC, p);
    await d.kill(into);
    await d.restart(into);
    await d.admin('REASSIGN_THROTTLE', { throttle: 0, topic: TOPIC, partition: p });
    await d.untilSettled(TOPIC, p, [target]);
  },
  'kill-source': async (d) => {
    const p = d.pick([...Array(PARTITIONS).keys()]);
    const { target, out } = d.moveOne(await d.part(TOPIC, p), { leader: true });
    await d.admin('REASSIGN', { topic: TOPIC, assignments: `${p}:${target.join(',')}`, throttle: SLOW });
    await d.untilCatchingUp(TOPIC, p);
    await d.kill(out);
    await d.admin('REASSIGN_THROTTLE', { throttle: 0, topic: TOPIC, partition: p });
    await d.untilSettled(TOPIC, p, [target]);
    await d.restart(out);
  },
  'kill-controller': async (d) => {
    const p = d.pick([...Array(PARTITIONS).keys()]);
    const { target } = d.moveOne(await d.part(TOPIC, p), { leader: d.rng.chance(0.5) });
    await d.admin('REASSIGN', { topic: TOPIC, assignments: `${p}:${target.join(',')}`, throttle: SLOW });
    await d.untilCatchingUp(TOPIC, p);
    const controller = await d.controller();
    // the controller dies before the throttle is lifted, or right after (as the completion is written)
    const lift = () => d.admin('REASSIGN_THROTTLE', { throttle: 0, topic: TOPIC, partition: p });
    const liftFirst = d.rng.chance(0.5);
    if (liftFirst) await lift();
    d.log(`${d.step}: kill -9 controller ${controller}`);
    await d.c.kill(controller);
    if (!liftFirst) await lift();
    // a reassignment waits while a target replica is down (docs/operations.md "Limits")
    if (target.includes(controller)) await d.restart(controller);
    await d.untilSettled(TOPIC, p, [target]);
    if (!target.includes(controller)) await d.restart(controller);
  },
  'kill-target-cancel': async (d) => {
    const p = d.pick([...Array(PARTITIONS).keys()]);
    const before = await d.part(TOPIC, p);
    const { target, into } = d.moveOne(before, { leader: d.rng.chance(0.5) });
    await d.admin('REASSIGN', { topic: TOPIC, assignments: `${p}:${target.join(',')}`, throttle: SLOW });
    await d.untilCatchingUp(TOPIC, p);
    await d.kill(into);
    // the broker being added is dead: the cancel must still take the partition back
    await d.admin('REASSIGN_CANCEL', { topic: TOPIC, partition: p });
    await d.untilSettled(TOPIC, p, [before.replicas]);
    await d.restart(into);
  },
  'drain-dead': async (d) => {
    const hosting = new Set((await d.status()).partitions.filter((p) => p.topic === TOPIC).flatMap((p) => p.replicas));
    const victim = d.pick(d.c.ids.filter((id) => hosting.has(id)));
    await d.kill(victim);
    await d.admin('DRAIN_BROKER', { broker: victim });
    await d.untilAllSettled([TOPIC, '__consumer_offsets', '__transaction_state'], 40_000, (p) => !p.replicas.includes(victim));
    await d.restart(victim);
  },
  'drain-kill': async (d) => {
    const hosting = new Set((await d.status()).partitions.filter((p) => p.topic === TOPIC).flatMap((p) => p.replicas));
    const victim = d.pick(d.c.ids.filter((id) => hosting.has(id)));
    await d.admin('DRAIN_BROKER', { broker: victim, throttle: SLOW });
    await d.c.waitFor('a drain move catching up', 15_000, async () => (await d.reassignments()).reassignments.some((r) => r.phase === 'catching_up'));
    await d.kill(victim);
    await d.admin('REASSIGN_THROTTLE', { throttle: 0 });
    await d.untilAllSettled([TOPIC, '__consumer_offsets', '__transaction_state'], 40_000, (p) => !p.replicas.includes(victim));
    await d.restart(victim);
  },
  'etcd-restart': async (d) => {
    const p = d.pick([...Array(PARTITIONS).keys()]);
    const { target } = d.moveOne(await d.part(TOPIC, p), { leader: d.rng.chance(0.5) });
    await d.admin('REASSIGN', { topic: TOPIC, assignments: `${p}:${target.join(',')}`, throttle: SLOW });
    await d.untilCatchingUp(TOPIC, p);
    await d.c.etcd.kill('SIGKILL');
    await d.c.etcd.restart();
    await d.c.waitFor('etcd answering through the brokers again', 20_000, async () => (await d.reassignments(TOPIC)).count >= 0);
    await d.admin('REASSIGN_THROTTLE', { throttle: 0, topic: TOPIC, partition: p });
    await d.untilSettled(TOPIC, p, [target]);
  },
  'cancel-race': async (d) => {
    for (const phase of ['now', 'catching_up', 'now'] as const) await cancelRace(d, TOPIC, PARTITIONS, phase);
  },
  'cancel-completing': async (d) => {
    await cancelRace(d, RACE, 1, 'completing');
  },
  'rf-alter': async (d) => {
    await d.admin('ALTER_REPLICATION_FACTOR', { topic: TOPIC, replication_factor: 2 });
    await d.untilAllSettled([TOPIC], 30_000, (p) => p.replicas.length === 2);
    await d.admin('ALTER_REPLICATION_FACTOR', { topic: TOPIC, replication_factor: 3, throttle: SLOW });
    const moving = await d.c.waitFor('an added replica catching up', 15_000, async () =>
      (await d.reassignments(TOPIC)).reassignments.find((r) => r.phase === 'catching_up'),
    );
    const added = d.pick(moving.target.filter((id) => !moving.replicas.slice(0, 2).includes(id)));
    await d.kill(added);
    await d.restart(added);
    await d.admin('REASSIGN_THROTTLE', { throttle: 0 });
    await d.untilAllSettled([TOPIC], 40_000, (p) => p.replicas.length === 3);
  },
  'delete-dead-target': async (d) => {
    // A topic deleted while the broker it was moving to is dead, re-created under the name, then moved
    // onto that broker once it is back: it must start from the new topic's log, not its old copy.
    const producer = new Producer({ brokers: d.c.bootstrap, clientId: 'ops-phoenix', acks: 'all', idempotent: true });
    try {
      await d.admin('CREATE', { topic: PHOENIX, partitions: 1, replication_factor: 3 });
      await d.untilAllSettled([PHOENIX], 20_000);
      for (let i = 0; i < 6; i++)
        await producer.send({ topic: PHOENIX, messages: Array.from({ length: 50 }, (_, k) => ({ value: `old-${i * 50 + k}`, partition: 0 })) });
      const { target, into } = d.moveOne(await d.part(PHOENIX, 0));
      await d.admin('REASSIGN', { topic: PHOENIX, assignments: `0:${target.join(',')}`, throttle: SLOW });
      await d.untilCatchingUp(PHOENIX, 0);
      await d.kill(into);
      await d.admin('DELETE', { topic: PHOENIX });
      await d.c.waitFor(`${PHOENIX} gone`, 20_000, async () => !(await d.status()).partitions.some((x) => x.topic === PHOENIX));
      await d.c.waitFor(
        `${PHOENIX} re-created`,
        20_000,
        async () => (await d.admin('CREATE', { topic: PHOENIX, partitions: 1, replication_factor: 3 })) !== '',
      );
      await d.untilAllSettled([PHOENIX], 20_000);
      const fresh = Array.from({ length: 5 }, (_, i) => `fresh-${i}`);
      for (const value of fresh) await producer.send({ topic: PHOENIX, messages: [{ value, partition: 0 }] });
      await d.restart(into);
      const now = await d.part(PHOENIX, 0);
      const back = [into, ...now.replicas.slice(0, 2)];
      await d.admin('REASSIGN', { topic: PHOENIX, assignments: `0:${back.join(',')}` });
      await d.untilSettled(PHOENIX, 0, [back]);
      // auto leader rebalance makes the returning broker, now the preferred replica, the leader
      await d.c.waitFor(`broker ${into} leading ${PHOENIX}[0]`, 20_000, async () => (await d.part(PHOENIX, 0)).leader === into);
      // (it may still be taking over: NOT_LEADER until then)
      const log = (
        await d.c.waitFor(`a read of ${PHOENIX}[0] on broker ${into}`, 15_000, () => d.c.readAll(into, PHOENIX, 0, 'read_uncommitted').catch(() => undefined))
      ).filter((r) => !r.control);
      const got = log.map((r) => `${r.offset}:${r.value}`).join(' ');
      if (got !== fresh.map((v, i) => `${i}:${v}`).join(' ')) throw new Error(`${PHOENIX}[0] led by broker ${into} after the re-create: ${got.slice(0, 300)}`);
      await d.admin('DELETE', { topic: PHOENIX });
    } finally {
      await producer.close().catch(() => {});
    }
  },
  'delete-crash': async (d) => {
    // The broker answering DELETE dies once the definition is gone, before the topic's reassignment
    // requests are (a failpoint): a topic re-created under the name must not inherit them.
    await d.admin('CREATE', { topic: ZOMBIE, partitions: 1, replication_factor: 3 });
    await d.untilAllSettled([ZOMBIE], 20_000);
    const created = (await d.part(ZOMBIE, 0)).replicas;
    const { target } = d.moveOne(await d.part(ZOMBIE, 0));
    await d.admin('REASSIGN', { topic: ZOMBIE, assignments: `0:${target.join(',')}`, throttle: SLOW });
    const victim = d.pick(d.c.ids.filter((id) => d.c.state[id] === 'up'));
    d.log(`${d.step}: DELETE ${ZOMBIE} on broker ${victim}, which crashes before removing its requests`);
    await d.c
      .ask(victim, (conn) => conn.command('DELETE', { topic: ZOMBIE }), 5000)
      .then(
        (reply) => {
          throw new Error(`DELETE on broker ${victim} answered ${reply}: the failpoint did not crash it`);
        },
        () => {},
      );
    await d.c.kill(victim);
    await d.restart(victim);
    await d.c.waitFor(`${ZOMBIE} gone`, 20_000, async () => !(await d.status()).partitions.some((x) => x.topic === ZOMBIE));
    await d.admin('CREATE', { topic: ZOMBIE, partitions: 1, replication_factor: 3 });
    await d.untilAllSettled([ZOMBIE], 20_000);
    const now = await d.part(ZOMBIE, 0);
    if (now.replicas.join() !== created.join()) {
      throw new Error(`${ZOMBIE} re-created on ${created.join(',')} was moved to ${now.replicas.join(',')} by a reassignment of the deleted topic`);
    }
    const again = d.moveOne(now);
    await d.admin('REASSIGN', { topic: ZOMBIE, assignments: `0:${again.target.join(',')}` });
    await d.untilSettled(ZOMBIE, 0, [again.target]);
  },
  'rf-crash': async (d) => {
    // The broker answering ALTER_REPLICATION_FACTOR dies right after storing it (a failpoint): the
    // topic's definition must have the new factor as its moves do, never the moves alone.
    await d.admin('CREATE', { topic: SHRINK, partitions: 2, replication_factor: 3 });
    await d.untilAllSettled([SHRINK], 20_000);
    const victim = d.pick(d.c.ids.filter((id) => d.c.state[id] === 'up'));
    d.log(`${d.step}: ALTER_REPLICATION_FACTOR ${SHRINK} 2 on broker ${victim}, which crashes once it is stored`);
    await d.c
      .ask(victim, (conn) => conn.command('ALTER_REPLICATION_FACTOR', { topic: SHRINK, replication_factor: 2 }), 5000)
      .then(
        (reply) => {
          throw new Error(`ALTER_REPLICATION_FACTOR on broker ${victim} answered ${reply}: the failpoint did not crash it`);
        },
        () => {},
      );
    await d.c.kill(victim);
    await d.restart(victim);
    await d.untilAllSettled([SHRINK], 30_000, (p) => p.replicas.length === 2);
    const described = JSON.parse(await d.admin('DESCRIBE', { topic: SHRINK })) as { replication_factor: number };
    if (described.replication_factor !== 2) throw new Error(`${SHRINK}'s partitions moved to 2 replicas, yet its definition has replication_factor ${described.replication_factor}`);
    await d.admin('ADD_PARTITIONS', { topic: SHRINK, partitions: 3 });
    await d.c.waitFor(`${SHRINK}[2] led`, 20_000, async () => (await d.part(SHRINK, 2)).leader >= 0);
    const added = await d.part(SHRINK, 2);
    if (added.replicas.length !== 2) throw new Error(`${SHRINK}[2], added after the factor became 2, got replicas ${added.replicas.join(',')}`);
    await d.admin('DELETE', { topic: SHRINK });
  },
  'etcd-outage-drain': async (d) => {
    const hosting = new Set((await d.status()).partitions.filter((p) => p.topic === TOPIC).flatMap((p) => p.replicas));
    const victim = d.pick(d.c.ids.filter((id) => hosting.has(id)));
    await d.admin('DRAIN_BROKER', { broker: victim, throttle: SLOW });
    await d.c.waitFor('a drain move catching up', 15_000, async () => (await d.reassignments()).reassignments.some((r) => r.phase === 'catching_up'));
    // etcd frozen past every lease (2 s): when it resumes it expires them all while every broker runs
    d.log(`${d.step}: etcd frozen`);
    await d.c.pauseEtcd();
    await sleep(5000);
    await d.c.resumeEtcd();
    d.log(`${d.step}: etcd resumed`);
    await d.c.waitFor('the throttle lifted', 20_000, async () => (await d.admin('REASSIGN_THROTTLE', { throttle: 0 }).catch(() => '')) !== '');
    await d.untilAllSettled([TOPIC, '__consumer_offsets', '__transaction_state'], 40_000, (p) => !p.replicas.includes(victim));
  },
  'side-topic': async (d) => {
    await d.admin('CREATE', { topic: SIDE, partitions: 2, replication_factor: 3 });
    const producer = new Producer({ brokers: d.c.bootstrap, clientId: 'ops-side', acks: 'all', idempotent: true });
    try {
      for (let i = 0; i < 50; i++) await producer.send({ topic: SIDE, messages: [{ value: `old-${i}`, partition: i % 2 }] });
      const p0 = await d.part(SIDE, 0);
      const move = d.moveOne(p0);
      await d.admin('REASSIGN', { topic: SIDE, assignments: `0:${move.target.join(',')}`, throttle: SLOW });
      await d.untilCatchingUp(SIDE, 0);
      await d.admin('ADD_PARTITIONS', { topic: SIDE, partitions: 3 });
      await d.c.waitFor('side[2] led', 20_000, async () => (await d.part(SIDE, 2)).leader >= 0);
      await producer.send({ topic: SIDE, messages: [{ value: 'new-2', partition: 2 }] });
      await d.admin('REASSIGN', { topic: SIDE, assignments: `2:${d.moveOne(await d.part(SIDE, 2)).target.join(',')}`, throttle: SLOW });
      await d.admin('DELETE', { topic: SIDE });
      await d.c.waitFor(`${SIDE}'s partitions and requests gone`, 20_000, async () => {
        const s = await d.status();
        return !s.partitions.some((x) => x.topic === SIDE) && (await d.reassignments()).reassignments.every((r) => r.topic !== SIDE);
      });
      // the name again: a new, empty topic, with no request of the old one
      await d.c.waitFor(`${SIDE} re-created`, 20_000, async () => {
        await d.admin('CREATE', { topic: SIDE, partitions: 3, replication_factor: 3 });
        return true;
      });
      await d.untilAllSettled([SIDE], 20_000);
      for (let p = 0; p < 3; p++) {
        const [meta] = await producer.send({ topic: SIDE, messages: [{ value: `fresh-${p}`, partition: p }] });
        if (meta!.offset !== 0) throw new Error(`${SIDE}[${p}] re-created kept the old topic's records: first write at offset ${meta!.offset}`);
      }
      await d.admin('DELETE', { topic: SIDE });
    } finally {
      await producer.close().catch(() => {});
    }
  },
};

describe('admin operations under faults', () => {
  const cleanups: Array<() => Promise<unknown>> = [];
  afterAll(async () => {
    for (const f of cleanups.reverse()) await f().catch(() => {});
  });

  it(`every reassignment ends and no acknowledged write is lost (OPS_SEED=${seed})`, { timeout: 240_000 }, async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'tributary-ops-'));
    const t0 = Date.now();
    const lines: string[] = [];
    const log = (l: string) => {
      const line = `[ops +${((Date.now() - t0) / 1000).toFixed(1)}s] ${l}`;
      lines.push(line);
      if (process.env.OPS_VERBOSE) console.log(line);
    };
    const rng = new Rng(seed);
    // Every run takes the failpoint steps and a seeded choice of RANDOM_STEPS others, in a seeded order (so
    // it stays near a minute); OPS_STEPS=a,b runs those steps instead, OPS_STEPS=all every one.
    const only = process.env.OPS_STEPS === 'all' ? Object.keys(steps) : process.env.OPS_STEPS?.split(',');
    const shuffle = (xs: string[]) => {
      for (let i = xs.length - 1; i > 0; i--) {
        const j = rng.int(0, i);
        [xs[i], xs[j]] = [xs[j]!, xs[i]!];
      }
      return xs;
    };
    const chosen = only ?? [...ALWAYS, ...shuffle(Object.keys(steps).filter((k) => !ALWAYS.includes(k))).slice(0, RANDOM_STEPS)];
    const order = shuffle(Object.keys(steps).filter((k) => chosen.includes(k)));
    log(`seed ${seed}: steps ${order.join(', ')}; files in ${dir}`);
    const history = new History(path.join(dir, 'history.jsonl'));
    const c = await ChaosCluster.start({
      brokers: 4,
      flush: 'always',
      dataRoot: path.join(dir, 'brokers'),
      args: ['--leader-rebalance-delay-ms', '1000'],
      env: { TRIBUTARY_FAILPOINTS: `reassign.finish:${RACE}@2500,topic.delete.cleanup:${ZOMBIE},topic.rf.definition:${SHRINK}` },
    });
    cleanups.push(() => c.dispose());
    await c.createTopic(TOPIC, PARTITIONS);
    await c.createTopic(RACE, 1);
    await c.waitFor('a full ISR on every partition', 60_000, () => c.healthy(TOPIC));
    const consumers = new ConsumerGroup(history, c.bootstrap, TOPIC, GROUP, 2);
    cleanups.push(() => consumers.killAll());
    consumers.start();
    await consumers.waitReady(30_000);
    const producers = new Producers({
      history,
      bootstrap: c.bootstrap,
      topic: TOPIC,
      partitions: PARTITIONS,
      seed,
      transactionalProducers: 0,
      laneDelayMs: 20,
    });
    cleanups.push(() => producers.stop(1000));
    producers.start();
    // enough in every log that a throttled new replica is still catching up seconds later
    await c.waitFor('a warm-up of 1500 acknowledged sends', 30_000, async () => history.ops.filter((o) => o.f === 'send' && o.outcome === 'ok').length >= 1500);

    const d = new AdminDriver(c, Rng.derive(seed, 'steps'), log);
    const failures: string[] = [];
    for (const name of order) {
      d.step = name;
      log(`step ${name}`);
      try {
        await steps[name]!(d);
      } catch (err) {
        failures.push(`step ${name}: ${err instanceof Error ? err.message : String(err)}`);
        log(`step ${name} FAILED: ${String(err).slice(0, 600)}`);
        await c.healAll();
        // a step that failed may leave its reassignment behind: cancel it so the next step starts clean
        await d.admin('REASSIGN_CANCEL', {}).catch(() => {});
        await d.untilAllSettled([TOPIC], 40_000).catch((e: unknown) => log(String(e)));
      }
    }

    d.step = 'final';
    await c.healAll();
    await producers.stop(20_000);
    await d.untilAllSettled([TOPIC, '__consumer_offsets', '__transaction_state'], 40_000).catch((err: unknown) => failures.push(`final: ${String(err)}`));
    // auto leader rebalance: every partition back on its preferred replica once all are in sync
    await c
      .waitFor('every partition led by its preferred replica', 30_000, async () => (await d.status()).partitions.every((p) => p.leader === p.replicas[0]))
      .catch((err: unknown) => failures.push(`final: preferred leaders: ${String(err).slice(0, 300)}`));
    // let the group catch up: until nothing was delivered for 2 s (at most 30 s), then one more auto-commit
    const delivered = () => history.counts.get('poll') ?? 0;
    let seen = delivered();
    let quietSince = Date.now();
    const drainBy = Date.now() + 30_000;
    while (Date.now() < drainBy && Date.now() - quietSince < 2000) {
      await sleep(200);
      if (delivered() !== seen) [seen, quietSince] = [delivered(), Date.now()];
    }
    await sleep(1000);
    await consumers.stop(8000);
    const { final, errors } = await c.finalRead(TOPIC, PARTITIONS, GROUP);
    await history.close();
    const report = check(history.ops, final, { partitions: PARTITIONS, endTime: Date.now(), t0 });
    for (const k of SAFETY_KINDS)
      if (report.counts[k] > 0)
        failures.push(
          `${k}: ${report.counts[k]} (${report.anomalies
            .filter((a) => a.kind === k)
            .slice(0, 3)
            .map((a) => `p${a.partition} ${a.detail}`)
            .join('; ')})`,
        );
    if (report.unverifiedPartitions.length > 0)
      failures.push(`partitions ${report.unverifiedPartitions.join(',')} unreadable at the end: ${errors.join('; ')}`);
    if (report.stats.ackedWrites === 0 || report.stats.deliveries === 0)
      failures.push(`nothing checked: ${report.stats.ackedWrites} acked writes, ${report.stats.deliveries} deliveries`);
    log(
      `acked ${report.stats.ackedWrites}, deliveries ${report.stats.deliveries}, commits ${report.stats.commits}, safety anomalies ${safetyAnomalyCount(report)}`,
    );
    await fs.writeFile(path.join(dir, 'admin-ops.jsonl'), d.ops.map((o) => JSON.stringify(o)).join('\n'));
    await fs.writeFile(path.join(dir, 'run.log'), `${lines.join('\n')}\n`);
    await fs.writeFile(path.join(dir, 'brokers.log'), c.stderrTails(400_000));
    expect(failures, `OPS_SEED=${seed} (replay with OPS_SEED=${seed}); files in ${dir}\n${lines.join('\n')}`).toEqual([]);
    // Every process of the run stopped before its files go: a broker still running wrote into a directory
    // being removed (ENOTEMPTY) after every check had passed. (afterAll stops them again, harmlessly.)
    await consumers.killAll();
    await c.dispose();
    await fs.rm(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
  });
});
