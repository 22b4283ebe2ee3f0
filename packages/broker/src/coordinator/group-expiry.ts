import client from 'prom-client';
import type { ClassicGroup, ClassicSnapshot } from './classic-group.js';
import type { ConsumerGroup } from './group.js';
import type { GroupContext } from './group-context.js';
import type { GroupSnapshot } from './group-log.js';
import type { GroupOffsets } from './group-offsets.js';
import type { StoredOffset } from './offset-store.js';

/** How long a failed or undecidable expiry waits before it is tried again (at most the retention). */
const RETRY_MS = 30_000;
/** How soon an expiry that found this broker's lease in doubt, or its group not confirmed yet, looks again. */
const LEASE_RETRY_MS = 250;

/**
 * Offsets retention (docs/protocol.md, "Group expiry"): a group without members is deleted, offsets and
 * all, exactly as DELETE_GROUP does, `offsetsRetentionMs` after it became empty or last had an offset
 * committed, whichever is later (Kafka's offsets.retention.minutes with KIP-211). Tributary groups, Kafka
 * classic groups and groups known only by their offsets (standalone consumers) alike.
 *
 * In memory the wait is counted on the monotonic clock from the group's last activity (`idleSince`); one
 * scheduler entry per empty group, armed when it empties or first commits while empty and moved on only
 * when it falls due (a commit does not push a new entry, so a busy standalone consumer costs no heap).
 * Across a restart or a coordinator move it goes on from persisted wall times: the time the group became
 * empty, written with its snapshot (`emptiedAt`), and its offsets' commit timestamps, the later of the two.
 */
export class GroupExpiry {
  /** Groups without members this coordinator serves: their last activity, a `clock.monotonic()` reading. */
  private readonly idleSince = new Map<string, number>();
  private readonly expired: client.Counter;

  constructor(
    private readonly ctx: GroupContext,
    private readonly offsets: GroupOffsets,
    /** Deletes an empty group under its lock, as DELETE_GROUP does (GroupAdmin.removeEmpty). */
    private readonly remove: (groupId: string) => Promise<void>,
    registry: client.Registry,
  ) {
    this.expired = new client.Counter({
      name: 'tributary_groups_expired_total',
      help: 'Groups deleted with their committed offsets after the offsets retention without members',
      registers: [registry],
    });
  }

  private get retentionMs(): number {
    return this.ctx.config.offsetsRetentionMs;
  }

  private static key(group: string): string {
    return `offsets-expiry:${group}`;
  }

  /**
   * Before a group's snapshot is written (every change to it): one with members waits for nothing; one
   * that just became empty records when, in the snapshot too, and starts its wait.
   */
  persisting(g: ConsumerGroup | ClassicGroup): void {
    if (g.members.size > 0) {
      g.emptiedAt = undefined;
      this.forget(g.groupId);
      return;
    }
    if (g.emptiedAt !== undefined) {
      this.arm(g.groupId);
      return;
    }
    g.emptiedAt = this.ctx.clock.now();
    this.restart(g.groupId);
  }

  /** An offset commit (or reset) of the group was accepted: without members, its wait starts over. */
  committed(group: string): void {
    if (!this.hasMembers(group)) this.restart(group);
  }

  /** The group's wait starts now (its timer, if armed, moves itself on when it falls due). */
  private restart(group: string): void {
    if (this.retentionMs <= 0) return;
    this.idleSince.set(group, this.ctx.clock.monotonic());
    this.arm(group);
  }

  /** The group was deleted, or is no longer served here (its partition moved): no wait. */
  forget(group: string): void {
    this.idleSince.delete(group);
    this.ctx.scheduler.cancel(GroupExpiry.key(group));
  }

  /** The groups `drop` picks are no longer served here (their `__consumer_offsets` partition was given up or is reloading). */
  forgetWhere(drop: (group: string) => boolean): void {
    for (const group of [...this.idleSince.keys()]) if (drop(group)) this.forget(group);
  }

  /**
   * Groups and offsets just loaded (a start, a partition taken over or reloaded): each group without
   * members waits from its persisted last activity, the later of the time it became empty and its last
   * commit. An empty group with neither (a snapshot older than this support, without offsets) waits from
   * now, and its snapshot's next write keeps that time.
   */
  load(snapshots: Iterable<GroupSnapshot | ClassicSnapshot | null>, offsets: readonly StoredOffset[]): void {
    // -Infinity: an empty group's snapshot without a time.
    const last = new Map<string, number>();
    const later = (group: string, at: number) => last.set(group, Math.max(last.get(group) ?? Number.NEGATIVE_INFINITY, at));
    for (const s of snapshots) if (s && s.members.length === 0) later(s.group, s.emptiedAt ?? Number.NEGATIVE_INFINITY);
    for (const o of offsets) later(o.group, o.commitTimestamp);
    const wall = this.ctx.clock.now();
    const mono = this.ctx.clock.monotonic();
    for (const [group, at] of last) {
      if (this.hasMembers(group)) continue;
      const base = Number.isFinite(at) ? at : wall;
      const g = this.ctx.groups.get(group) ?? this.ctx.classicGroups.get(group);
      if (g && g.emptiedAt === undefined) g.emptiedAt = base;
      // A persisted time ahead of the wall clock (stepped back since) counts as now, never as later.
      this.idleSince.set(group, mono - Math.max(0, wall - base));
      this.ctx.scheduler.cancel(GroupExpiry.key(group));
      this.arm(group);
    }
  }

  private hasMembers(group: string): boolean {
    const g = this.ctx.groups.get(group);
    return (g !== undefined && !g.deleted && g.members.size > 0) || (this.ctx.classicGroups.get(group)?.members.size ?? 0) > 0;
  }

  private known(group: string): boolean {
    const g = this.ctx.groups.get(group);
    return (g !== undefined && !g.deleted) || this.ctx.classicGroups.has(group) || this.offsets.hasOffsets(group);
  }

  /** Arms the group's timer at the end of its wait, unless armed (it then moves itself on when due). */
  private arm(group: string, at?: number): void {
    if (this.retentionMs <= 0 || this.ctx.stopped()) return;
    const key = GroupExpiry.key(group);
    if (at === undefined && this.ctx.scheduler.has(key)) return;
    let since = this.idleSince.get(group);
    if (since === undefined) this.idleSince.set(group, (since = this.ctx.clock.monotonic()));
    this.ctx.scheduler.schedule(key, at ?? since + this.retentionMs, () => this.due(group));
  }

  private due(group: string): void {
    const key = GroupExpiry.key(group);
    if (!this.ctx.canAct()) {
      // Not sure this broker still coordinates the group: decide once its lease is confirmed.
      this.arm(group, this.ctx.clock.monotonic() + LEASE_RETRY_MS);
      return;
    }
    this.ctx
      .withGroup(group, async () => {
        try {
          // Only the group's coordinator acts: a partition that moved or is reloading forgot (or re-arms) it.
          this.ctx.checkOwner(group);
        } catch {
          // Replayed from past the HWM: decided once the in-sync replicas have the group (GroupLog.checkConfirmed).
          if (this.ctx.groupLog.groupUnconfirmed(group)) this.arm(group, this.ctx.clock.monotonic() + LEASE_RETRY_MS);
          return;
        }
        // A timer armed again while this one waited for the lock decides by itself.
        if (this.ctx.scheduler.has(key)) return;
        const since = this.idleSince.get(group);
        if (since === undefined) return;
        if (this.hasMembers(group) || !this.known(group)) {
          this.idleSince.delete(group);
          return;
        }
        const now = this.ctx.clock.monotonic();
        const classic = this.ctx.classicGroups.get(group);
        if ((classic?.pendingMembers.size ?? 0) > 0 || this.offsets.busy(group)) {
          // A member about to join, a commit being written, a transaction holding offsets: activity.
          this.idleSince.set(group, now);
        }
        if (now < this.idleSince.get(group)! + this.retentionMs) {
          this.arm(group, this.idleSince.get(group)! + this.retentionMs);
          return;
        }
        if (this.ctx.offsetStore.kind !== 'log') this.ctx.checkStoreWrite();
        await this.remove(group);
        this.expired.inc();
        this.ctx.logger.info(
          { group, idleMs: now - since, retentionMs: this.retentionMs },
          'group expired: no members for the offsets retention; its offsets and state were deleted',
        );
      })
      .catch((err: unknown) => {
        if (this.ctx.stopped()) return;
        this.ctx.logger.warn({ err, group }, 'expiring a group failed; trying again later');
        if (this.idleSince.has(group)) this.arm(group, this.ctx.clock.monotonic() + Math.min(RETRY_MS, this.retentionMs));
      });
  }
}
