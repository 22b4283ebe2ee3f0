/**
 * Shared helpers of the consumer-group integration and fault tests: a member driven over its own
 * connection (long-poll heartbeats block the replies behind them) and GROUP_STATUS access. Waiting and
 * error checks are in test/helpers/util.ts.
 */
import { expect } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { BrokerProcess } from '../../helpers/launcher.js';

export type Fields = Record<string, string | number | boolean | undefined>;

/** Broker flags that keep group tests fast: a short join window and a small offsets topic. */
export const FAST_GROUP_ARGS = ['--group-join-window-ms', '20', '--offsets-topic-partitions', '4'];

export function startBroker(extra: string[] = [], dataDir?: string): Promise<BrokerProcess> {
  return BrokerProcess.start({ args: [...FAST_GROUP_ARGS, ...extra], dataDir });
}

export function kv(reply: string): Map<string, string> {
  return parseLine(reply).params;
}

/** `[0,1,3]` → [0, 1, 3]. */
export function list(v: string | undefined): number[] {
  expect(v).toMatch(/^\[(\d+(,\d+)*)?\]$/);
  const inner = v!.slice(1, -1);
  return inner.length === 0 ? [] : inner.split(',').map(Number);
}

export interface StatusMember {
  member_id: string;
  client_id: string;
  instance: string | null;
  generation: number;
  session_timeout_ms: number;
  last_heartbeat: string;
  last_heartbeat_ms_ago: number;
  assignments: number[];
  target: number[];
  pending: number[];
  needs_rejoin: boolean;
}

export interface GroupStatus {
  status: string;
  group: string;
  topic: string;
  state: string;
  generation: number;
  leader: string | null;
  assignor: string;
  protocol: string;
  members: StatusMember[];
  offsets: Array<{ partition: number; committed: number | null; log_end: number; lag: number | null; owner: string | null }>;
  total_lag: number;
  history: Array<{ generation: number; reasons: Array<{ cause: string; member: string; missedByMs?: number }>; at: number; rebalanceMs?: number }>;
}

export function groupStatus(c: Connection, group: string): Promise<GroupStatus> {
  return c.json<GroupStatus>('GROUP_STATUS', { group });
}

/** GROUP_STATUS without the fields that move with the clock (heartbeat times). */
export async function stableStatus(c: Connection, group: string): Promise<unknown> {
  const s = await groupStatus(c, group);
  return { ...s, members: s.members.map(({ last_heartbeat: _a, last_heartbeat_ms_ago: _b, ...m }) => m) };
}

/** Every partition listed by at most one member, and the status's owner column agrees. */
export function expectExclusiveOwnership(s: GroupStatus): void {
  const seen = new Map<number, string>();
  for (const m of s.members) {
    for (const p of m.assignments) {
      expect(seen.get(p), `partition ${p} owned by ${seen.get(p)} and ${m.member_id}`).toBeUndefined();
      seen.set(p, m.member_id);
    }
  }
  for (const o of s.offsets) expect(o.owner ?? undefined).toBe(seen.get(o.partition));
}

export async function fetchOffset(c: Connection, topic: string, group: string, partition: number): Promise<{ offset: number; committed: boolean }> {
  const r = kv(await c.command('FETCH_OFFSET', { topic, group, partition }));
  return { offset: Number(r.get('offset')), committed: r.get('committed') === 'true' };
}

export async function fetchAll(c: Connection, topic: string, group: string, partitions: number): Promise<Array<{ offset: number; committed: boolean }>> {
  const out = [];
  for (let p = 0; p < partitions; p++) out.push(await fetchOffset(c, topic, group, p));
  return out;
}

/** Publishes `n` records to each of the partitions. */
export async function fill(c: Connection, topic: string, partitions: number, n: number): Promise<void> {
  const acks: Promise<string>[] = [];
  for (let p = 0; p < partitions; p++) for (let i = 0; i < n; i++) acks.push(c.command('PUBLISH', { topic, partition: p, message: `p${p}-r${i}` }));
  await Promise.all(acks);
}

/**
 * One group member on its own connection. `id`/`generation` follow the last JOIN/SYNC reply;
 * `owned` is the last SYNC reply's assignments.
 */
export class GroupMember {
  id = '';
  generation = 0;
  leader = '';
  joinAssignments: number[] = [];
  owned: number[] = [];
  lastJoin: Map<string, string> = new Map();
  /** Joined since the last successful SYNC. */
  needsSync = false;

  constructor(
    readonly conn: Connection,
    readonly topic: string,
    readonly group: string,
    readonly clientId: string,
  ) {}

  static async connect(broker: BrokerProcess, topic: string, group: string, clientId: string): Promise<GroupMember> {
    return new GroupMember(await broker.connect(), topic, group, clientId);
  }

  private apply(reply: string): Map<string, string> {
    const r = kv(reply);
    this.id = r.get('member')!;
    this.generation = Number(r.get('generation'));
    if (r.has('leader')) this.leader = r.get('leader')!;
    return r;
  }

  /** A fresh JOIN under the client id. */
  async join(extra: Fields = {}): Promise<Map<string, string>> {
    const r = this.apply(await this.conn.command('JOIN_GROUP', { topic: this.topic, group: this.group, member: this.clientId, ...extra }));
    this.joinAssignments = list(r.get('assignments'));
    this.lastJoin = r;
    this.needsSync = true;
    return r;
  }

  /** Rejoin with the member id and the generation last seen. */
  async rejoin(extra: Fields = {}): Promise<Map<string, string>> {
    const r = this.apply(await this.conn.command('JOIN_GROUP', { topic: this.topic, group: this.group, member: this.id, generation: this.generation, ...extra }));
    this.joinAssignments = list(r.get('assignments'));
    this.lastJoin = r;
    this.needsSync = true;
    return r;
  }

  async sync(extra: Fields = {}): Promise<number[]> {
    const r = this.apply(await this.conn.command('SYNC_GROUP', { topic: this.topic, group: this.group, member: this.id, generation: this.generation, ...extra }));
    this.owned = list(r.get('assignments'));
    this.needsSync = false;
    return this.owned;
  }

  heartbeat(waitMs?: number): Promise<string> {
    return this.conn.command('HEARTBEAT', { topic: this.topic, group: this.group, member: this.id, generation: this.generation, wait_ms: waitMs });
  }

  commit(partition: number, offset: number, extra: Fields = {}): Promise<string> {
    return this.conn.command('COMMIT_OFFSET', { topic: this.topic, group: this.group, partition, offset, member: this.id, generation: this.generation, ...extra });
  }

  batchCommit(entries: string, extra: Fields = {}): Promise<string> {
    return this.conn.command('BATCH_COMMIT', { topic: this.topic, group: this.group, member: this.id, generation: this.generation, ...extra }, [entries]);
  }

  leave(): Promise<string> {
    return this.conn.command('LEAVE_GROUP', { topic: this.topic, group: this.group, member: this.id });
  }

  /**
   * One step of a well-behaved client: heartbeat (short long-poll); on REBALANCE_IN_PROGRESS rejoin and
   * sync. Returns true when it had to rejoin.
   */
  async poll(waitMs = 50): Promise<boolean> {
    try {
      if (this.needsSync) await this.sync();
      else await this.heartbeat(waitMs);
      return false;
    } catch (err) {
      if (!(err instanceof TributaryError) || err.code !== 'REBALANCE_IN_PROGRESS') throw err;
      await this.rejoin();
      try {
        await this.sync();
      } catch (e) {
        if (!(e instanceof TributaryError) || e.code !== 'REBALANCE_IN_PROGRESS') throw e;
      }
      return true;
    }
  }
}

/**
 * Drives the members (heartbeat → rejoin/sync) until GROUP_STATUS says Stable, checking after every
 * step that no partition is owned twice and no two members' last SYNC replies overlap.
 */
export async function settle(admin: Connection, members: GroupMember[], timeoutMs = 5000): Promise<GroupStatus> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const s = await groupStatus(admin, members[0]!.group);
    expectExclusiveOwnership(s);
    expectDisjointSyncReplies(members);
    if (s.state === 'Stable') return s;
    if (Date.now() > deadline) throw new Error(`group did not settle: ${JSON.stringify(s)}`);
    for (const m of members) {
      await m.poll(20);
      expectDisjointSyncReplies(members);
    }
  }
}

export function expectDisjointSyncReplies(members: GroupMember[]): void {
  const seen = new Map<number, string>();
  for (const m of members) {
    for (const p of m.owned) {
      expect(seen.get(p), `partition ${p} in the SYNC replies of ${seen.get(p)} and ${m.id}`).toBeUndefined();
      seen.set(p, m.id);
    }
  }
}
