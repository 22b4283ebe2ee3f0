/**
 * The group and transaction coordinators over real partitions in a temporary directory, wired as the
 * standalone broker wires them (src/broker/broker.ts) but with no server and a clock the test chooses.
 */
import { type Logger, pino } from 'pino';
import client from 'prom-client';
import { afterEach, beforeEach } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { resolveConfig } from 'tributary-broker/common/config.js';
import { BrokerMetrics } from 'tributary-broker/common/metrics.js';
import { TopicManager, type TopicSpec } from 'tributary-broker/partition/topic-manager.js';
import { LocalMetadataStore } from 'tributary-broker/partition/metadata-store.js';
import { ProducerIdAllocator } from 'tributary-broker/partition/producer-ids.js';
import type { Clock } from 'tributary-broker/common/clock.js';
import type { ClassicJoinRequest } from 'tributary-broker/coordinator/classic-groups.js';
import { type CoordinatorConfig, GroupCoordinator, type JoinRequest, type MemberView } from 'tributary-broker/coordinator/group-coordinator.js';
import { GroupLog, LogOffsetStore, OFFSETS_TOPIC } from 'tributary-broker/coordinator/group-log.js';
import type { OffsetStore } from 'tributary-broker/coordinator/offset-store.js';
import type { InternalAppend } from 'tributary-broker/partition/internal-log.js';
import { TransactionCoordinator, type TxnCoordinatorConfig } from 'tributary-broker/txn/txn-coordinator.js';
import { TXN_STATE_TOPIC, TxnLog } from 'tributary-broker/txn/txn-log.js';
import { LocalTxnTargets, type TxnTargets } from 'tributary-broker/txn/txn-targets.js';
import { FakeClock } from './fake-clock.js';
import { rec, removeDir, tempDir, until } from './util.js';

export const GROUP_CONFIG: CoordinatorConfig = {
  joinWindowMs: 30,
  defaultSessionTimeoutMs: 10_000,
  minSessionTimeoutMs: 100,
  maxSessionTimeoutMs: 60_000,
  defaultRebalanceTimeoutMs: 5_000,
  defaultAssignor: 'range',
  offsetsRetentionMs: 604_800_000,
};

export const TXN_CONFIG: TxnCoordinatorConfig = { defaultTimeoutMs: 60_000, maxTimeoutMs: 900_000 };

export interface Coordinators {
  topics: TopicManager;
  groups: GroupCoordinator;
  txns: TransactionCoordinator;
  /** The group coordinator's log (a test may replace its writeGroup to refuse or hold a write). */
  groupLog: GroupLog;
  /** The group coordinator's metrics. */
  groupRegistry: client.Registry;
  /** Stops both coordinators and closes every partition. */
  close(): Promise<void>;
}

export function topicSpec(name: string, partitions: number, internal: boolean): TopicSpec {
  return {
    name,
    partitions,
    replicationFactor: 1,
    idempotent: false,
    partitioner: 'hash_key',
    retentionHours: internal ? -1 : 168,
    retentionBytes: -1,
    cleanupPolicy: internal ? 'compact' : 'delete',
  };
}

/**
 * Opens the topics in `dataDir` (creating the internal ones and `topics`, name → partitions), then starts
 * the group coordinator and the transaction coordinator on `clock`, as the standalone broker does.
 */
export async function openCoordinators(
  dataDir: string,
  clock: Clock,
  opts: {
    topics?: Record<string, number>;
    group?: Partial<CoordinatorConfig>;
    txn?: Partial<TxnCoordinatorConfig>;
    /** Wraps the transaction coordinator's targets (to inject their failures). */
    targets?: (local: TxnTargets) => TxnTargets;
    /** How the group log appends (default: to the local partition, as a standalone broker does). */
    groupAppend?: InternalAppend;
    /** How the transaction state log appends (the same default). */
    txnAppend?: InternalAppend;
    /** The offset store (default: the log store on the group log). */
    offsetStore?: (log: GroupLog) => OffsetStore;
    /** The coordinators' logger (default: silent), for a test that checks what they log. */
    logger?: Logger;
  } = {},
): Promise<Coordinators> {
  const config = resolveConfig({ dataDir, flush: 'os', offsetsTopicPartitions: 2, transactionStatePartitions: 2 });
  const logger = opts.logger ?? pino({ level: 'silent' });
  const store = new LocalMetadataStore(dataDir);
  await store.open();
  const topics = new TopicManager(store, config, logger, new BrokerMetrics());
  await topics.open();
  if (!topics.tryGet(OFFSETS_TOPIC)) await topics.create(topicSpec(OFFSETS_TOPIC, config.offsetsTopicPartitions, true), { allowInternal: true });
  if (!topics.tryGet(TXN_STATE_TOPIC)) await topics.create(topicSpec(TXN_STATE_TOPIC, config.transactionStatePartitions, true), { allowInternal: true });
  for (const [name, partitions] of Object.entries(opts.topics ?? {})) if (!topics.tryGet(name)) await topics.create(topicSpec(name, partitions, false));

  const groupLog = new GroupLog(() => topics.get(OFFSETS_TOPIC).partitions, opts.groupAppend);
  const groupRegistry = new client.Registry();
  const groups = new GroupCoordinator({
    topics,
    groupLog,
    offsetStore: opts.offsetStore?.(groupLog) ?? new LogOffsetStore(groupLog, clock),
    logger,
    registry: groupRegistry,
    config: { ...GROUP_CONFIG, ...opts.group },
    clock,
  });
  const txns = new TransactionCoordinator({
    topics,
    producerIds: new ProducerIdAllocator(store),
    log: new TxnLog(() => topics.get(TXN_STATE_TOPIC).partitions, opts.txnAppend),
    targets: (opts.targets ?? ((t) => t))(new LocalTxnTargets(topics, groups)),
    logger,
    registry: new client.Registry(),
    config: { ...TXN_CONFIG, ...opts.txn },
    clock,
  });
  await groups.start();
  await txns.start();
  return {
    topics,
    groups,
    txns,
    groupLog,
    groupRegistry,
    async close() {
      await txns.stop();
      await groups.stop();
      await topics.close();
    },
  };
}

/** A Kafka classic group's JoinGroup (group `g`, one range protocol), with `extra` over the defaults. */
export function classicJoinRequest(memberId: string, extra: Partial<ClassicJoinRequest> = {}): ClassicJoinRequest {
  return {
    group: 'g',
    memberId,
    instanceId: null,
    clientId: 'cli',
    clientHost: '/127.0.0.1',
    sessionTimeoutMs: 1000,
    rebalanceTimeoutMs: 3000,
    protocolType: 'consumer',
    protocols: [{ name: 'range', metadata: Buffer.from('m') }],
    requireKnownMemberId: false,
    ...extra,
  };
}

/**
 * The faults a test injects into the log offset store (faultyLogStore), as a PostgreSQL store shows them.
 * `commit`: 'written' writes, then answers storage_error outcome=unknown (COMMIT's answer lost); 'lost'
 * answers the same without writing; 'refused' answers storage_error, nothing written. `reads`: fetches
 * fail with storage_error (the store unreachable).
 */
export interface StoreFaults {
  commit: 'none' | 'written' | 'lost' | 'refused';
  reads: boolean;
}

/** The log offset store on `log`, failing as `faults` says when the call is made. */
export function faultyLogStore(log: GroupLog, clock: Clock, faults: StoreFaults): LogOffsetStore {
  const store = new LogOffsetStore(log, clock);
  const commit = store.commit.bind(store);
  const fetch = store.fetch.bind(store);
  store.fetch = async (...args) => {
    if (faults.reads) throw new TributaryError('storage_error', { op: 'fetch', reason: 'injected: connection refused' });
    return fetch(...args);
  };
  store.commit = async (...args) => {
    if (faults.commit === 'refused') throw new TributaryError('storage_error', { op: 'commit', reason: 'injected: refused' });
    if (faults.commit === 'none') return commit(...args);
    if (faults.commit === 'written') await commit(...args);
    throw new TributaryError('storage_error', { op: 'commit', reason: 'injected: answer lost', outcome: 'unknown' });
  };
  return store;
}

/** A test's coordinators (useCoordinators): replaced by reopen(), so read them from here, not a copy. */
export interface CoordinatorsFixture {
  dir: string;
  clock: FakeClock;
  c: Coordinators;
  /** c.groups. */
  gc: GroupCoordinator;
  /** The offset store, failing as `faults` says (set its fields; reset to none before each test). */
  store: LogOffsetStore;
  faults: StoreFaults;
  /** A restart: closes the coordinators and opens them again on the same directory, on a store without faults. */
  reopen(): Promise<void>;
}

/**
 * Coordinators on a fake clock in a temporary directory, opened before each test of the file (or block)
 * and closed, their directory removed, after it, also when it fails. `topics` (name → partitions) are
 * created with `records` records in each partition; the offset store is faultyLogStore.
 */
export function useCoordinators(prefix: string, topics: Record<string, number>, opts: { records?: number; groupAppend?: InternalAppend } = {}): CoordinatorsFixture {
  const f = { faults: { commit: 'none', reads: false } } as CoordinatorsFixture;
  const open = async (faults: StoreFaults) => {
    f.c = await openCoordinators(f.dir, f.clock, {
      topics,
      groupAppend: opts.groupAppend,
      offsetStore: (log) => (f.store = faultyLogStore(log, f.clock, faults)),
    });
    f.gc = f.c.groups;
  };
  beforeEach(async () => {
    f.dir = await tempDir(prefix);
    f.clock = new FakeClock();
    f.faults = { commit: 'none', reads: false };
    await open(f.faults);
    for (const name of Object.keys(topics)) {
      for (const p of f.c.topics.get(name).partitions) await p.append(Array.from({ length: opts.records ?? 10 }, (_, i) => rec(`r${i}`)));
    }
  });
  afterEach(async () => {
    await f.c.close();
    await removeDir(f.dir);
  });
  f.reopen = async () => {
    await f.c.close();
    await open({ commit: 'none', reads: false });
  };
  return f;
}

/** A JOIN that closes its own join window (on the fake clock), then its SYNC: the member as synced. */
export async function joinAlone(f: Pick<CoordinatorsFixture, 'gc' | 'clock'>, req: JoinRequest): Promise<MemberView> {
  const joined = f.gc.join(req);
  await until(() => f.gc.scheduler.has(`window:${req.group}`), 5000, 'the join window');
  await f.clock.advance(GROUP_CONFIG.joinWindowMs);
  const j = await joined;
  return f.gc.sync({ topic: req.topic, group: req.group, member: j.memberId, generation: j.generation });
}

/**
 * Group `g` on partition 0 of `topic` in a fixture: a member that joins alone, its commit, and FETCH_OFFSET's
 * answer or the error code it refuses with.
 */
export function groupOnPartition0(f: Pick<CoordinatorsFixture, 'gc' | 'clock'>, topic: string) {
  return {
    member: (id: string) => joinAlone(f, { topic, group: 'g', member: id, host: '127.0.0.1' }),
    commit: (v: MemberView, offset: number) => f.gc.commit({ topic, group: 'g', member: v.memberId, generation: v.generation, entries: [{ partition: 0, offset }] }),
    fetched(): number | string {
      try {
        return f.gc.fetchOffset('g', topic, 0).offset;
      } catch (err) {
        return (err as TributaryError).code;
      }
    },
  };
}

/**
 * Before each test: coordinators on a fresh directory and a fake clock, handed to `use` (with `opts` as
 * openCoordinators takes them, `topics` included); after each: closed and the directory removed.
 */
export function eachWithCoordinators(prefix: string, opts: Parameters<typeof openCoordinators>[2], use: (c: Coordinators) => void): void {
  let dir: string | undefined;
  let c: Coordinators | undefined;
  beforeEach(async () => {
    dir = await tempDir(prefix);
    c = await openCoordinators(dir, new FakeClock(), opts);
    use(c);
  });
  afterEach(async () => {
    await c?.close();
    if (dir) await removeDir(dir);
    c = undefined;
    dir = undefined;
  });
}

/** The group's member ids (GROUP_STATUS); none before the group exists. */
export function memberIdsOf(gc: GroupCoordinator, group: string): string[] {
  try {
    return (gc.status(group) as unknown as { members: Array<{ member_id: string }> }).members.map((m) => m.member_id);
  } catch (err) {
    if ((err as { code?: string }).code === 'group_not_found') return [];
    throw err;
  }
}
