import client from 'prom-client';
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import { type OffsetEntry, outcomeUnknown } from './offset-store.js';
import { type GroupContext, validateId } from './group-context.js';
import type { GroupOffsets } from './group-offsets.js';
import type { Rebalancer } from './rebalance.js';
import type { ClassicGroup } from './classic-group.js';
import type { ChangeReason, ConsumerGroup } from './group.js';

export interface ResetRequest {
  group: string;
  topic: string;
  /** Default: every partition of the topic. */
  partition?: number;
  to: 'earliest' | 'latest' | 'offset' | 'timestamp';
  value?: number;
  /** Compute the new offsets only. */
  dryRun?: boolean;
  /** Who asked (the principal), for the group's history. */
  by?: string;
}

/**
 * The admin side of the group coordinator: listing, GROUP_STATUS, deleting a group, resetting a group's
 * offsets, and the lag and member gauges (docs/protocol.md for the commands).
 */
export class GroupAdmin {
  constructor(
    private readonly ctx: GroupContext,
    private readonly offsets: GroupOffsets,
    private readonly rebalancer: Rebalancer,
    registry: client.Registry,
  ) {
    const self = this;
    new client.Gauge({
      name: 'tributary_group_lag',
      help: 'Records between the committed offset and the last stable offset, per group partition',
      labelNames: ['group', 'topic', 'partition'],
      registers: [registry],
      async collect() {
        const rows = await self.lagRows();
        this.reset();
        for (const row of rows) this.set({ group: row.group, topic: row.topic, partition: String(row.partition) }, row.lag);
      },
    });
    new client.Gauge({
      name: 'tributary_group_members',
      help: 'Live members per group',
      labelNames: ['group'],
      registers: [registry],
      collect() {
        this.reset();
        for (const g of self.ctx.groups.values()) if (!g.deleted) this.set({ group: g.groupId }, g.members.size);
        for (const g of self.ctx.classicGroups.values()) this.set({ group: g.groupId }, g.members.size);
      },
    });
  }

  listGroups(): string[] {
    const names = new Set<string>();
    for (const g of this.ctx.groups.values()) if (!g.deleted) names.add(g.groupId);
    for (const name of this.ctx.classicGroups.keys()) names.add(name);
    for (const name of this.offsets.groupsWithOffsets()) names.add(name);
    return [...names].sort();
  }

  async deleteGroup(groupId: string): Promise<void> {
    this.ctx.checkOwner(groupId);
    validateId('group', groupId);
    await this.ctx.withOwnedGroup(groupId, async () => {
      // A commit of the group still being written (outside the lock) would land after the tombstones and
      // bring its offset back: it settles first, so the deletion covers it.
      await this.offsets.writesSettled(groupId);
      const g = this.ctx.groups.get(groupId);
      const classic = this.ctx.classicGroups.get(groupId);
      if ((!g || g.deleted) && !classic && !this.offsets.hasOffsets(groupId)) throw new TributaryError('group_not_found', { group: groupId });
      if (classic && classic.members.size > 0) throw new TributaryError('group_not_empty', { group: groupId, members: classic.members.size });
      // Pending causes without members are only departures waiting for the join window: nothing can use the
      // group's offsets any more, and GROUP_STATUS already says Empty.
      if (g && g.members.size > 0) throw new TributaryError('group_not_empty', { group: groupId, members: g.members.size });
      await this.removeEmpty(groupId);
    });
  }

  /**
   * What DELETE_GROUP does once it found the group without members, under the group's lock: its offsets
   * (the store first), its snapshot (a tombstone), its state in memory and its metric series. The offsets
   * retention (group-expiry.ts) deletes an expired group with it.
   */
  async removeEmpty(groupId: string): Promise<void> {
    const g = this.ctx.groups.get(groupId);
    try {
      await this.ctx.offsetStore.deleteGroup(groupId);
    } catch (err) {
      // Maybe deleted: the offsets are answered again only once the store is read back (cluster mode: the
      // in-sync replicas confirmed the tombstones, or a new leader's log kept the offsets).
      if (outcomeUnknown(err)) this.offsets.deletionUnknown(groupId);
      throw err;
    }
    // Gone from the store: not answered any more, even if the log refuses the snapshot's tombstone (a retry
    // writes it; the store, PostgreSQL say, has nothing left to delete).
    this.offsets.forget(groupId);
    await this.ctx.groupLog.deleteGroup(groupId);
    // Empty (checked by the caller): no member timers; a pending id handed out is simply forgotten.
    this.ctx.classicGroups.delete(groupId);
    if (g) {
      g.deleted = true;
      this.ctx.groups.delete(groupId);
    }
    this.ctx.scheduler.cancel(`window:${groupId}`);
    this.ctx.expiry.removed(groupId);
    // Its series go with it: group ids are the clients' to choose, and the registry would keep each forever.
    this.rebalancer.rebalances.remove({ group: groupId });
  }

  /**
   * RESET_OFFSETS: sets the group's committed offsets (possibly backwards). On a group with members it is a
   * coordinator operation (docs/protocol.md, RESET_OFFSETS): the reset partitions leave their owners
   * first and are persisted so, every member is told of them (`reset=` on its JOIN replies until it syncs
   * a later generation), and a new generation follows (cause `offsets_reset`). Commits for those
   * partitions are refused until the member has rejoined, so nothing read before the reset overwrites
   * it; the members resume from the new offsets. `dryRun` computes the offsets and changes nothing.
   */
  async resetOffsets(req: ResetRequest): Promise<OffsetEntry[]> {
    this.ctx.checkOwner(req.group);
    validateId('group', req.group);
    const topic = this.ctx.topics.get(req.topic);
    const parts = req.partition === undefined ? topic.partitions : [topic.partition(req.partition)];
    // From the partitions' leaders (in a cluster this broker's copy may trail, or not exist), before the
    // group's lock is taken: no group request waits on another broker's answer.
    const entries: OffsetEntry[] = await Promise.all(
      parts.map(async (p) => {
        const ends = await this.ctx.logOffsets(req.topic, p.id, req.to === 'timestamp' ? (req.value ?? 0) : undefined);
        let offset: number;
        if (req.to === 'earliest') offset = ends.earliest;
        else if (req.to === 'latest') offset = ends.latest;
        else if (req.to === 'timestamp') offset = ends.at!;
        else {
          offset = req.value ?? 0;
          if (offset < ends.earliest || offset > ends.leo) throw new TributaryError('OFFSET_OUT_OF_RANGE', { requested: offset, earliest: ends.earliest, latest: ends.leo, partition: p.id });
        }
        return { partition: p.id, offset };
      }),
    );
    return this.ctx.withOwnedGroup(req.group, async () => {
      // A commit of the group still being written (appended, not yet durable: outside the lock) would
      // complete after the reset and answer its offset over the reset's, which follows it in the log: it
      // settles first, as for DELETE_GROUP (test/unit/coordinator/reset-in-flight.test.ts).
      await this.offsets.writesSettled(req.group);
      const g = this.ctx.groups.get(req.group);
      const live = g && !g.deleted && g.members.size > 0 ? g : undefined;
      // A Kafka group's members keep their positions to themselves: only an empty one is reset (as Kafka's tools require).
      const classic = this.ctx.classicGroups.get(req.group);
      if (classic && classic.members.size > 0) throw new TributaryError('group_not_empty', { group: req.group, members: classic.members.size });
      if (live && live.topic !== req.topic) throw invalidParam('topic', `group ${req.group} consumes topic ${live.topic}`);
      if (req.dryRun) return entries;
      // A store that cannot answer now (PostgreSQL down) refuses the reset before the group is touched: a
      // refused reset changes nothing, and fencing the members is what makes them rebalance.
      await this.ctx.offsetStore.fetch(req.group, req.topic, entries[0]!.partition);
      const undo = live ? this.fence(live, entries, req.by ?? 'admin') : undefined;
      // Fenced before the offsets move: a crash between the two leaves the members fenced, never reading on
      // over a reset they were not told of.
      if (live) await this.ctx.persist(live);
      try {
        await this.ctx.offsetStore.commit(req.group, req.topic, entries, { force: true });
      } catch (err) {
        if (outcomeUnknown(err)) {
          // Maybe written: the fence stays, and a member's next commit of the offset it last committed must
          // be written, not answered from memory (which still holds the offsets from before the reset).
          this.offsets.forgetReservations(req.group, req.topic, entries.map((e) => e.partition));
        } else if (live && undo) {
          // Refused, so nothing was reset: the members keep their partitions and generation.
          await this.unfence(live, undo);
        }
        throw err;
      }
      for (const e of entries) this.offsets.setDurable(req.group, req.topic, e.partition, e.offset);
      this.ctx.expiry.committed(req.group);
      return entries;
    });
  }

  /**
   * Takes the reset partitions from their owners, marks them on every member and asks for a new generation
   * (in memory; the caller persists). Returns what undoes it, for a reset the offset store refused.
   */
  private fence(live: ConsumerGroup, entries: OffsetEntry[], by: string): () => void {
    const members = [...live.members.values()].map((m) => ({ m, owned: new Set(m.owned), reset: new Set(m.reset) }));
    const owners = new Map(live.owners);
    const cause: ChangeReason = { cause: 'offsets_reset', member: by };
    const windowOpen = this.ctx.scheduler.has(`window:${live.groupId}`);
    const startedAt = live.rebalanceStartedAt;
    const reset = entries.map((e) => e.partition);
    for (const m of live.members.values()) {
      for (const p of reset) {
        m.reset.add(p);
        if (m.owned.delete(p) && live.owners.get(p) === m.memberId) live.owners.delete(p);
      }
    }
    live.pendingCauses.push(cause);
    this.rebalancer.scheduleWindow(live);
    return () => {
      for (const { m, owned, reset: r } of members) {
        m.owned.clear();
        for (const p of owned) m.owned.add(p);
        m.reset.clear();
        for (const p of r) m.reset.add(p);
      }
      live.owners.clear();
      for (const [p, id] of owners) live.owners.set(p, id);
      live.pendingCauses = live.pendingCauses.filter((c) => c !== cause);
      if (!windowOpen) this.ctx.scheduler.cancel(`window:${live.groupId}`);
      live.rebalanceStartedAt = startedAt;
    };
  }

  /**
   * Undoes a fence (under the group's lock, nothing else ran in between) and persists that. If the log
   * refuses it, persist() reloads the group from the log, which holds the fence: a rebalance then follows,
   * as it would have before.
   */
  private async unfence(live: ConsumerGroup, undo: () => void): Promise<void> {
    undo();
    await this.ctx.persist(live).catch((err: unknown) => this.ctx.logger.warn({ err, group: live.groupId }, 'undoing the fence of a refused reset failed'));
  }

  /**
   * Every committed offset's lag behind its partition's last stable offset, as the partition's leader
   * sees it; a partition whose leader cannot be asked has no row rather than a wrong one.
   */
  private async lagRows(): Promise<Array<{ group: string; topic: string; partition: number; lag: number }>> {
    const ends = new LogEnds(this.ctx);
    const rows = [];
    for (const group of this.offsets.groupsWithOffsets()) {
      for (const { topic: topicName, partitions } of this.offsets.committedPartitions(group)) {
        for (const p of partitions) {
          // Not known after a write of unknown outcome (group-offsets.ts, `uncertain`): no row rather than a wrong one.
          const k = this.offsets.knownOffset(group, topicName, p);
          if (k.known && k.offset !== undefined) rows.push({ group, topic: topicName, partition: p, committed: k.offset, end: ends.of(topicName, p) });
        }
      }
    }
    const out = [];
    for (const row of rows) {
      const end = await row.end;
      if (end !== undefined) out.push({ group: row.group, topic: row.topic, partition: row.partition, lag: Math.max(0, end - row.committed) });
    }
    return out;
  }

  /**
   * GROUP_STATUS with each partition's log end and lag as its leader sees them (status() shows this
   * broker's copies, which in a cluster may trail or not exist); `null` where the leader cannot be asked.
   */
  async statusWithLogEnds(groupId: string): Promise<Record<string, unknown>> {
    const status = this.status(groupId);
    const ends = new LogEnds(this.ctx);
    const rows = status.offsets as Array<{ topic?: string; partition: number; committed: number | null; log_end: number | null; lag: number | null }>;
    await Promise.all(
      rows.map(async (row) => {
        row.log_end = (await ends.of(row.topic ?? (status.topic as string), row.partition)) ?? null;
        row.lag = row.committed === null || row.log_end === null ? null : Math.max(0, row.log_end - row.committed);
      }),
    );
    status.total_lag = rows.reduce((n, o) => n + (o.lag ?? 0), 0);
    return status;
  }

  status(groupId: string): Record<string, unknown> {
    this.ctx.checkOwner(groupId);
    validateId('group', groupId);
    const classic = this.ctx.classicGroups.get(groupId);
    if (classic) return this.classicStatus(classic);
    const g = this.ctx.groups.get(groupId);
    if ((!g || g.deleted) && !this.offsets.hasOffsets(groupId)) throw new TributaryError('group_not_found', { group: groupId });
    const topicName = g?.topic ?? this.offsets.committedPartitions(groupId)[0]?.topic ?? '';
    const topic = this.ctx.topics.tryGet(topicName);
    // lastHeartbeat is monotonic: the age from it, the time shown from the age.
    const now = this.ctx.clock.monotonic();
    const wall = this.ctx.clock.now();
    const offsets = (topic?.partitions ?? []).map((p) => {
      // Undefined too while the last write's outcome is unknown: the store may hold another offset.
      const k = this.offsets.knownOffset(groupId, topicName, p.id);
      const committed = k.known ? k.offset : undefined;
      return {
        partition: p.id,
        committed: committed ?? null,
        log_end: p.lastStableOffset,
        lag: committed === undefined ? null : Math.max(0, p.lastStableOffset - committed),
        owner: g?.owners.get(p.id) ?? null,
      };
    });
    return {
      status: 'OK',
      group: groupId,
      topic: topicName,
      state: g ? g.state : 'Empty',
      generation: g?.generation ?? 0,
      leader: g?.leaderId ?? null,
      assignor: g?.assignor ?? this.ctx.config.defaultAssignor,
      protocol: g?.protocol ?? 'server',
      coordinator_partition: this.ctx.partitionFor(groupId),
      members: [...(g?.members.values() ?? [])].map((m) => ({
        member_id: m.memberId,
        client_id: m.clientId,
        instance: m.instanceId ?? null,
        host: m.host,
        generation: m.generation,
        last_heartbeat: new Date(wall - (now - m.lastHeartbeat)).toISOString(),
        last_heartbeat_ms_ago: now - m.lastHeartbeat,
        session_timeout_ms: m.sessionTimeoutMs,
        assignments: [...m.owned].sort((a, b) => a - b),
        target: m.target,
        pending: m.target.filter((p) => !m.owned.has(p)),
        needs_rejoin: m.needsRejoin,
      })),
      offsets,
      total_lag: offsets.reduce((n, o) => n + (o.lag ?? 0), 0),
      history: g?.history ?? [],
    };
  }

  /**
   * GROUP_STATUS of a Kafka classic group: its members with their raw assignments (the broker layer reads
   * the consumer protocol's), and the committed offsets of every topic it has any in, with their lag.
   */
  private classicStatus(g: ClassicGroup): Record<string, unknown> {
    // lastHeartbeat is monotonic: the age from it, the time shown from the age.
    const now = this.ctx.clock.monotonic();
    const wall = this.ctx.clock.now();
    const offsets = [];
    for (const { topic: topicName, partitions } of this.offsets.committedPartitions(g.groupId)) {
      const topic = this.ctx.topics.tryGet(topicName);
      for (const p of partitions) {
        // Null while the last write's outcome is unknown (group-offsets.ts, `uncertain`).
        const k = this.offsets.knownOffset(g.groupId, topicName, p);
        const committed = k.known ? (k.offset ?? null) : null;
        const logEnd = topic?.partitions[p]?.lastStableOffset;
        offsets.push({ topic: topicName, partition: p, committed, log_end: logEnd ?? null, lag: logEnd === undefined || committed === null ? null : Math.max(0, logEnd - committed), owner: null });
      }
    }
    return {
      status: 'OK',
      kind: 'kafka',
      group: g.groupId,
      topic: [...new Set(offsets.map((o) => o.topic))].join(','),
      state: g.state,
      generation: g.generation,
      leader: g.leaderId,
      assignor: g.protocolName ?? '',
      protocol: g.protocolType ?? '',
      coordinator_partition: this.ctx.partitionFor(g.groupId),
      members: [...g.members.values()].map((m) => ({
        member_id: m.memberId,
        client_id: m.clientId,
        instance: m.instanceId,
        host: m.clientHost,
        generation: g.generation,
        last_heartbeat: new Date(wall - (now - m.lastHeartbeat)).toISOString(),
        last_heartbeat_ms_ago: now - m.lastHeartbeat,
        session_timeout_ms: m.sessionTimeoutMs,
        assignments: [],
        assignment_bytes: m.assignment.toString('base64'),
        target: [],
        pending: [],
        needs_rejoin: g.state === 'PreparingRebalance',
      })),
      offsets,
      total_lag: offsets.reduce((n, o) => n + (o.lag ?? 0), 0),
      history: [],
    };
  }
}

/** Last stable offsets asked once per partition; undefined for a topic or partition that is gone or a leader that cannot be asked. */
class LogEnds {
  private readonly asked = new Map<string, Promise<number | undefined>>();

  constructor(private readonly ctx: GroupContext) {}

  of(topic: string, partition: number): Promise<number | undefined> {
    const key = `${topic}\0${partition}`;
    let end = this.asked.get(key);
    if (!end) {
      const known = this.ctx.topics.tryGet(topic)?.partitions[partition] !== undefined;
      end = known ? this.ctx.logOffsets(topic, partition).then((o) => o.latest, () => undefined) : Promise.resolve(undefined);
      this.asked.set(key, end);
    }
    return end;
  }
}
