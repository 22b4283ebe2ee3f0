/**
 * A follower below its leader's tombstone horizon (docs/architecture.md, "Compaction"; cluster/
 * tombstone-horizon.ts): the leader compacted away a tombstone the follower never read, so the follower,
 * which holds the key's older value, empties its log and fetches it again rather than keep the deleted key.
 * The follower's fetch loop runs against the leader's real LEADER_EPOCHS and REPLICA_FETCH handlers.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { decodeBatch } from 'tributary-protocol/batch.js';
import { Params, parseLine } from 'tributary-protocol/command.js';
import type { LogRecord } from 'tributary-protocol/record.js';
import { REPLICA_COMMANDS } from 'tributary-broker/broker/replica-commands.js';
import type { Replica } from 'tributary-broker/cluster/replica-types.js';
import { Partition } from 'tributary-broker/partition/partition.js';
import { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { ATTR_END_OF_APPEND } from 'tributary-broker/storage/record-codec.js';
import { testReplica, testReplicaManager } from '../../helpers/replica-harness.js';
import { removeDir, tempDir } from '../../helpers/util.js';
import { readAll } from '../storage/compacted-logs.js';

let dir: string;
const cleanup: Array<() => Promise<unknown>> = [];
beforeEach(async () => {
  dir = await tempDir('trib-horizon-follower-');
}, 15_000);
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f().catch(() => {});
  await removeDir(dir);
}, 15_000);

const T0 = 1_700_000_000_000;

/** One record as a leader stores it, a whole append of its own. */
function rec(offset: number, key: string, value: string): LogRecord {
  return { offset, timestamp: T0, key: Buffer.from(key), value: Buffer.from(value), headers: [], producerId: '', epoch: 0, sequence: 0, attributes: ATTR_END_OF_APPEND } as LogRecord;
}

async function replicatedPartition(name: string): Promise<Partition> {
  const log = await PartitionLog.open(join(dir, name), { flush: 'os', segmentBytes: 600, indexIntervalBytes: 64 });
  const part = new Partition('t', 0, log, { replicated: true });
  cleanup.push(() => part.close());
  return part;
}

/**
 * Leader broker 0 and follower broker 1 of t[0]. The follower's fetch loop talks to the leader through a
 * fake connection that runs the leader's REPLICA_COMMANDS handlers; `lines` are the follower's fetches.
 * `beforeFetch(n)` runs before the leader answers fetch n (from 0); an error it throws fails that fetch.
 * `maxBytes` caps each fetch's answer. fetchAll() runs one fetch loop until an answer has no records.
 */
async function pair(opts: { beforeFetch?: (n: number) => Promise<void> | void; maxBytes?: number; oldLeader?: boolean; previousLeader?: boolean } = {}) {
  const leaderPart = await replicatedPartition('leader');
  const leader = testReplicaManager(0);
  const lr = testReplica(leaderPart, { role: 'leader' });
  lr.followers.set(1, { offset: 0, caughtUpMs: performance.now(), parked: false, sentEnd: 0, sentHwm: 0 });
  leader.host(lr);
  leaderPart.enableReplication(() => {});
  cleanup.push(() => leader.rm.close());
  const followerPart = await replicatedPartition('follower');
  followerPart.enableReplication(() => {});
  const fr = testReplica(followerPart);
  // Both at leader epoch 1 from offset 0: the follower's epoch truncation keeps what it holds.
  lr.epochs.assign(1, 0);
  fr.epochs.assign(1, 0);
  const b = { cluster: { replicas: leader.rm }, config: { maxFrameBytes: 64 << 20, maxWaitMs: 1000 } } as never;
  const run = async (name: string, fields: Record<string, unknown>) => {
    const spec = REPLICA_COMMANDS[name]!;
    return spec.handler(b, {} as never, new Params(parseLine(`${name} ${Object.entries(fields).map(([k, v]) => `${k}=${String(v)}`).join(' ')}`), new Set(spec.params)));
  };
  const lines: string[] = [];
  let ac = new AbortController();
  const fetch = async (line: string) => {
    const n = lines.push(line) - 1;
    await opts.beforeFetch?.(n);
    const fields = Object.fromEntries(parseLine(line).params);
    if (opts.maxBytes !== undefined) fields.max_bytes = String(opts.maxBytes);
    return run('REPLICA_FETCH', fields);
  };
  const conn = {
    closed: false,
    close: async () => {},
    // An older leader's LEADER_EPOCHS has no tombstone_horizon and offers no REPLICA_FETCH format; the
    // previous version's offers format=stored but not blocks=true (it would refuse the parameter).
    command: async (name: string, fields: Record<string, unknown>) => {
      const reply = String(await run(name, fields));
      if (opts.previousLeader) return reply.replace(/ blocks=\S+/, ''); // offers format=stored, takes no blocks=true
      return opts.oldLeader ? reply.replace(/ tombstone_horizon=\d+/, '').replace(/ formats=\S+/, '') : reply;
    },
    // The batch frame: a follower of a leader that offers no other format.
    request: async (line: string) => {
      const answer = await fetch(line);
      if (typeof answer === 'string') return { kind: 'text', text: answer };
      // A body in pieces (Reply) is written one piece after another.
      const reply = Buffer.isBuffer(answer) ? answer : Buffer.concat(answer);
      const batch = decodeBatch(reply, { extensions: true });
      if (batch.records.length === 0) queueMicrotask(() => ac.abort());
      return { kind: 'batch', batch };
    },
    // format=stored: the records' count is the answer header's last field (cluster/replica-wire.ts).
    requestBytes: async (line: string) => {
      const answer = await fetch(line);
      if (typeof answer === 'string') return Buffer.from(answer);
      const reply = Buffer.isBuffer(answer) ? answer : Buffer.concat(answer);
      if (reply.readUInt32BE(26) === 0) queueMicrotask(() => ac.abort());
      return reply;
    },
  };
  const follower = testReplicaManager(1, undefined, () => conn);
  cleanup.push(() => follower.rm.close());
  let truncations = 0;
  const truncate = followerPart.truncateTo.bind(followerPart);
  followerPart.truncateTo = (o) => {
    truncations++;
    return truncate(o);
  };
  const fetchAll = async () => {
    ac = new AbortController();
    await (follower.rm as unknown as { fetchLoop(r: Replica, signal: AbortSignal): Promise<void> }).fetchLoop(fr, ac.signal);
  };
  return { leaderPart, followerPart, fetchAll, lines, truncations: () => truncations, abort: () => ac.abort() };
}

/** What a reader of the whole log sees per key: its latest record's value ('' for a tombstone). */
async function latestByKey(log: PartitionLog): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const r of await readAll(log)) if (r.key) out.set(r.key.toString(), r.value.toString());
  return out;
}

/** The leader's log: k=v1 at 0, k's tombstone at 1, then 40 other records; acknowledged, then compacted with the tombstone expired. */
async function leaderDroppedTombstone(leaderPart: Partition): Promise<void> {
  await leaderPart.appendReplica([rec(0, 'k', 'v1')]);
  await appendDropped(leaderPart);
}

/** After k=v1 at 0: k's tombstone at 1 and 40 other records, acknowledged, then compacted with the tombstone expired. */
async function appendDropped(leaderPart: Partition): Promise<void> {
  await leaderPart.appendReplica([rec(1, 'k', '')]);
  for (let i = 0; i < 40; i++) await leaderPart.appendReplica([rec(2 + i, `other-${i}`, `x${i}`.padEnd(20, '.'))]);
  leaderPart.setReplicatedHighWatermark(leaderPart.logEndOffset);
  await leaderPart.log.compact({ now: T0 + 1000, tombstoneRetentionMs: 0 });
  expect((await latestByKey(leaderPart.log)).has('k')).toBe(false);
  expect(leaderPart.log.tombstoneHorizon).toBe(2);
}

/**
 * Both hold k=v1 at 0; the leader then has 59 more records, k's tombstone at 30 among them, acknowledged and
 * compacted with the tombstone expired (horizon 31): a refetch of several fetches at a small max_bytes.
 */
async function longRefetch(leaderPart: Partition, followerPart: Partition): Promise<void> {
  await followerPart.appendReplica([rec(0, 'k', 'v1')]);
  await leaderPart.appendReplica([rec(0, 'k', 'v1')]);
  for (let i = 1; i < 30; i++) await leaderPart.appendReplica([rec(i, `other-${i}`, `x${i}`.padEnd(20, '.'))]);
  await leaderPart.appendReplica([rec(30, 'k', '')]);
  for (let i = 31; i < 60; i++) await leaderPart.appendReplica([rec(i, `other-${i}`, `x${i}`.padEnd(20, '.'))]);
  leaderPart.setReplicatedHighWatermark(leaderPart.logEndOffset);
  await leaderPart.log.compact({ now: T0 + 1000, tombstoneRetentionMs: 0 });
  expect(leaderPart.log.tombstoneHorizon).toBe(31);
}

it('a follower that holds a key whose tombstone the leader dropped unread empties its log and fetches it again', async () => {
  const { leaderPart, followerPart, fetchAll, lines, truncations } = await pair();
  // The follower had k=v1, then stopped (it never read the tombstone).
  await followerPart.appendReplica([rec(0, 'k', 'v1')]);
  await leaderDroppedTombstone(leaderPart);

  await fetchAll();
  expect(followerPart.log.logEndOffset).toBe(leaderPart.logEndOffset);
  // k was deleted: it is not back on the follower, which would serve it as leader.
  expect((await latestByKey(followerPart.log)).get('k')).toBeUndefined();
  expect(await latestByKey(followerPart.log)).toEqual(await latestByKey(leaderPart.log));
  // Emptied at its LEADER_EPOCHS and fetched again from its log start, naming the horizon it heard; it keeps
  // that horizon for its own followers.
  expect(truncations()).toBe(1);
  expect(lines[0]).toMatch(/ offset=0 .*tombstone_horizon=2/);
  // This version's follower stores append blocks as they are (docs/protocol.md, REPLICA_FETCH).
  expect(lines.every((l) => / format=stored blocks=true/.test(l))).toBe(true);
  expect(followerPart.log.tombstoneHorizon).toBe(2);
});

it('a leader of the previous version takes no blocks=true: the follower asks format=stored without it', async () => {
  const { leaderPart, followerPart, fetchAll, lines } = await pair({ previousLeader: true });
  await leaderDroppedTombstone(leaderPart);
  await fetchAll();
  expect(lines.length).toBeGreaterThan(0);
  expect(lines.every((l) => l.includes(' format=stored') && !l.includes('blocks='))).toBe(true);
  expect(followerPart.log.logEndOffset).toBe(leaderPart.logEndOffset);
});

it('a horizon raised between two fetches reaches the follower before any record fetched past the tombstone', async () => {
  let leaderPart: Partition | undefined;
  const { followerPart, fetchAll, lines, truncations, ...rest } = await pair({
    // The leader drops the tombstone after the follower's LEADER_EPOCHS (horizon 0), before its first fetch.
    beforeFetch: async (n) => {
      if (n === 0) await appendDropped(leaderPart!);
    },
  });
  leaderPart = rest.leaderPart;
  await followerPart.appendReplica([rec(0, 'k', 'v1')]);
  await leaderPart.appendReplica([rec(0, 'k', 'v1')]);
  await fetchAll();
  expect(lines[0]).toMatch(/ offset=1 .*tombstone_horizon=0/);
  expect(lines[1]).toMatch(/ offset=0 .*tombstone_horizon=2/);
  expect(truncations()).toBe(1);
  expect((await latestByKey(followerPart.log)).get('k')).toBeUndefined();
  expect(followerPart.log.logEndOffset).toBe(leaderPart.logEndOffset);
});

it('one rebuild per horizon: a fetch loop that reconnects while fetching again does not empty the log again', async () => {
  let failed = false;
  const { leaderPart, followerPart, fetchAll, lines, truncations } = await pair({
    maxBytes: 200,
    // The connection fails once the rebuild has fetched some records, still below the horizon.
    beforeFetch: (n) => {
      if (n === 2 && !failed) {
        failed = true;
        throw new Error('connection reset');
      }
    },
  });
  await longRefetch(leaderPart, followerPart);
  await fetchAll();
  expect(failed).toBe(true);
  const offsets = lines.map((l) => Number(/ offset=(\d+)/.exec(l)![1]));
  // Emptied once (at its first LEADER_EPOCHS), then it resumed where it was after the reconnect.
  expect(truncations()).toBe(1);
  expect(offsets[2]).toBeGreaterThan(0);
  expect(offsets[2]).toBeLessThan(31);
  expect(offsets[3]).toBe(offsets[2]);
  expect((await latestByKey(followerPart.log)).get('k')).toBeUndefined();
  expect(followerPart.log.logEndOffset).toBe(leaderPart.logEndOffset);
});

it('a fetch loop started again part-way through a refetch (a new leader epoch, a restart) goes on from there', async () => {
  let abort: () => void = () => {};
  let stopped = false;
  const p = await pair({
    maxBytes: 200,
    // The first loop ends after two fetches of the refetch, below the horizon.
    beforeFetch: (n) => {
      if (n === 2 && !stopped) {
        stopped = true;
        abort();
      }
    },
  });
  abort = p.abort;
  const { leaderPart, followerPart, fetchAll, truncations } = p;
  await longRefetch(leaderPart, followerPart);
  await fetchAll();
  const mid = followerPart.log.logEndOffset;
  expect(truncations()).toBe(1);
  expect(mid).toBeGreaterThan(0);
  expect(mid).toBeLessThan(31);
  // A new loop hears the same horizon: what the log holds was fetched after it, so it is kept.
  await fetchAll();
  expect(truncations()).toBe(1);
  expect((await latestByKey(followerPart.log)).get('k')).toBeUndefined();
  expect(followerPart.log.logEndOffset).toBe(leaderPart.logEndOffset);
});

it('a follower whose log is empty keeps fetching from it and takes the horizon', async () => {
  const { leaderPart, followerPart, fetchAll, truncations } = await pair();
  await leaderDroppedTombstone(leaderPart);
  await fetchAll();
  expect(truncations()).toBe(0);
  expect(followerPart.log.tombstoneHorizon).toBe(2);
  expect(followerPart.log.logEndOffset).toBe(leaderPart.logEndOffset);
});

it('a follower whose log already reaches the horizon keeps its records', async () => {
  const { leaderPart, followerPart, fetchAll, truncations } = await pair();
  // It read the tombstone before the leader dropped it.
  await followerPart.appendReplica([rec(0, 'k', 'v1')]);
  await followerPart.appendReplica([rec(1, 'k', '')]);
  await leaderDroppedTombstone(leaderPart);
  await fetchAll();
  expect(truncations()).toBe(0);
  expect((await readAll(followerPart.log)).map((r) => r.offset).slice(0, 2)).toEqual([0, 1]);
  expect(followerPart.log.tombstoneHorizon).toBe(2);
  expect(followerPart.log.logEndOffset).toBe(leaderPart.logEndOffset);
});

it('a leader of an older version reports no horizon: the follower names none and fetches as before', async () => {
  const { leaderPart, followerPart, fetchAll, lines, truncations } = await pair({ oldLeader: true });
  await followerPart.appendReplica([rec(0, 'k', 'v1')]);
  await leaderDroppedTombstone(leaderPart);
  await fetchAll();
  expect(lines.some((l) => l.includes('tombstone_horizon'))).toBe(false);
  // Nor a format it does not offer: the batch frame, decoded.
  expect(lines.some((l) => l.includes('format=') || l.includes('blocks='))).toBe(false);
  expect(truncations()).toBe(0);
  expect(followerPart.log.logEndOffset).toBe(leaderPart.logEndOffset);
});
