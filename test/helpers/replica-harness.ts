/**
 * Fixtures for unit tests of cluster/replica-manager.ts that drive it without etcd or sockets: replica
 * append records, a Replica entry around a local partition, and a ReplicaManager over fake registry and
 * partition states.
 */
import { EventEmitter } from 'node:events';
import { pino } from 'pino';
import type { LogRecord } from 'tributary-protocol/record.js';
import type { PartitionState } from 'tributary-broker/cluster/partition-state.js';
import { ReplicaManager } from 'tributary-broker/cluster/replica-manager.js';
import { type Replica, newReplica } from 'tributary-broker/cluster/replica-types.js';
import type { Partition } from 'tributary-broker/partition/partition.js';
import { ATTR_END_OF_APPEND } from 'tributary-broker/storage/record-codec.js';

/** A record as a leader serves it to a follower; `end` marks the last record of an append. */
export function replicaRecord(offset: number, end: boolean): LogRecord {
  return {
    offset,
    timestamp: 1,
    key: null,
    value: Buffer.from(`v${offset}`),
    headers: [],
    producerId: '',
    epoch: 0,
    sequence: 0,
    attributes: end ? ATTR_END_OF_APPEND : 0,
  } as LogRecord;
}

/** `count` records from offset 0 as one append. */
export function replicaAppend(count: number): LogRecord[] {
  return Array.from({ length: count }, (_, i) => replicaRecord(i, i === count - 1));
}

/** A Replica entry for partition t[0] (its log in `partition`), a follower of broker 0 at epoch 1 unless `fields` say otherwise. */
export function testReplica(partition: Partition, fields: Partial<Replica> = {}): Replica {
  return { ...newReplica('t', 0, partition), role: 'follower', leaderEpoch: 1, leaderId: 0, isr: [0, 1], replicas: [0, 1], ...fields };
}

export interface TestReplicaManager {
  rm: ReplicaManager;
  /** Every ISR compare-and-set, in order (all succeed). */
  cas: PartitionState[];
  /** Lines logged at level error. */
  errors: string[];
  /** Adds `r` as the manager's entry for t[0]. */
  host(r: Replica): void;
  /** The fake registry: `settled` and `whenSettled` may be replaced (a pause of the process). */
  registry: { alive: boolean; settled: boolean; whenSettled: () => Promise<boolean> };
}

/**
 * A ReplicaManager of `brokerId`; t[0]'s stored state is `state()`, connections come from `connect()`,
 * ISR writes are answered by `compareAndSet` (default: at once, landed); a read of etcd itself (not the
 * watch's cache) finds `etcdRead()` (default: `state()`).
 */
export function testReplicaManager(
  brokerId: number,
  state: () => PartitionState | undefined = () => undefined,
  connect: () => unknown = () => null,
  compareAndSet?: (next: PartitionState) => Promise<{ ok: boolean; modRevision?: number }>,
  etcdRead: () => PartitionState | undefined = state,
): TestReplicaManager {
  const cas: PartitionState[] = [];
  const errors: string[] = [];
  const registry = {
    get: (id: number) => ({ id, host: '127.0.0.1', port: 1, advertisedAddress: '127.0.0.1:1' }),
    events: new EventEmitter(),
    alive: true,
    settled: true,
    whenSettled: async () => true,
    list: () => [],
  };
  const states = {
    events: new EventEmitter(),
    get: () => {
      const value = state();
      return value && { topic: 't', partition: 0, value, modRevision: 1 };
    },
    list: () => [],
    read: async () => {
      const value = etcdRead();
      return value && { topic: 't', partition: 0, value, modRevision: 1 };
    },
    compareAndSet: async (_t: string, _p: number, _e: unknown, next: PartitionState) => {
      cas.push(next);
      return compareAndSet ? compareAndSet(next) : { ok: true };
    },
  };
  let hosted: Replica | undefined;
  const rm = new ReplicaManager({
    brokerId,
    topics: { tryGet: (name: string) => (name === 't' && hosted ? { partitions: [hosted.partition] } : undefined) } as never,
    states: states as never,
    registry: registry as never,
    config: { replicaLagMaxMs: 60_000, fetchWaitMs: 500, fetchMaxBytes: 1 << 20, minInsyncReplicas: 2 },
    logger: pino({ level: 'error' }, { write: (line: string) => errors.push(line) }) as never,
    connect: async () => connect() as never,
  });
  const host = (r: Replica) => {
    hosted = r;
    (rm as unknown as { replicas: Map<string, Replica> }).replicas.set('t\u00000', r);
  };
  return { rm, cas, errors, host, registry };
}
