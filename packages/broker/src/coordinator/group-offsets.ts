import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import { type OffsetEntry, type StoredOffset, outcomeUnknown } from './offset-store.js';
import { type GroupContext, requireGroup, requireMember, validateId } from './group-context.js';
import { checkGeneration, checkPartition, standingOf } from './member-fencing.js';

/**
 * The offsets side of the group coordinator (docs/architecture.md, "Group coordinator"): committed and
 * reserved offsets in memory, fenced and monotonic commits made durable by the offset store, and the
 * offsets a transaction holds as pending until it ends (staged, then applied or cleared by src/txn).
 */

/** group → topic → partition → offset. */
export type OffsetMap = Map<string, Map<string, Map<number, number>>>;

export function getOffset(m: OffsetMap, group: string, topic: string, partition: number): number | undefined {
  return m.get(group)?.get(topic)?.get(partition);
}

export function setOffset(m: OffsetMap, group: string, topic: string, partition: number, offset: number): void {
  let byTopic = m.get(group);
  if (!byTopic) m.set(group, (byTopic = new Map()));
  let byPart = byTopic.get(topic);
  if (!byPart) byTopic.set(topic, (byPart = new Map()));
  byPart.set(partition, offset);
}

function pendingKey(group: string, topic: string, partition: number | string): string {
  return `${group}\u0000${topic}\u0000${partition}`;
}

type CommitRequest = { topic: string; group: string; member: string; generation: number; entries: OffsetEntry[] };

/**
 * What the coordinator knows of a partition's committed offset: `offset` (undefined: none committed), or
 * not known while the outcome of its last write is (see GroupOffsets `uncertain`).
 */
export type KnownOffset = { known: true; offset: number | undefined } | { known: false };

type PartitionKey = { group: string; topic: string; partition: number };


export class GroupOffsets {
  /**
   * Durable committed offsets: what FETCH_OFFSET and CONSUME see. Private: an offset here may not be the
   * store's (`uncertain`), so readers go through knownOffset().
   */
  private readonly committed: OffsetMap = new Map();
  /** Highest offset accepted per partition, durable or in flight: what monotonicity is checked against. */
  readonly reserved: OffsetMap = new Map();
  /** Partitions (pendingKey) with offsets sent to transactions that have not ended: the transactional ids. */
  private readonly pending = new Map<string, Set<string>>();
  /**
   * Transactions (pendingKey of txn, group, topic) whose pending offsets of a topic were dropped with the
   * topic (forgetTopic): their commit does not apply them, as Kafka drops a deleted partition's pending ones.
   */
  private readonly droppedTxnOffsets = new Set<string>();
  /** Commits being made durable outside the group's lock: a topic deleted meanwhile voids them (forgetTopic). */
  private readonly writing = new Set<{ group: string; topic: string; voided: boolean }>();
  /**
   * Per partition (pendingKey), the last commit that reserved an offset and is not settled yet: settles
   * once its offsets are committed or its reservation given back. A commit of an offset only reserved
   * waits for it, as do a transaction's offsets: answered OK at once, a repeat would stay acknowledged
   * after the write it counted on failed.
   */
  private readonly unsettled = new Map<string, Promise<void>>();
  /**
   * Partitions (pendingKey) whose last write's outcome the store could not tell (outcomeUnknown): the store
   * may hold the offset from before it or the new one, so `committed` is not known until the store is read
   * again (resolveUncertain) or accepts or refuses a later commit.
   */
  private readonly uncertain = new Map<string, PartitionKey>();
  /** Groups whose uncertain offsets are being read back from the store now. */
  private readonly resolving = new Set<string>();

  constructor(private readonly ctx: GroupContext) {}

  /** An offset the store holds durably (loaded, or written by an admin reset): committed and reserved. */
  setDurable(group: string, topic: string, partition: number, offset: number): void {
    this.uncertain.delete(pendingKey(group, topic, partition));
    setOffset(this.committed, group, topic, partition, offset);
    setOffset(this.reserved, group, topic, partition, offset);
  }

  /**
   * A partition's offsets as a replay found them: `unsure` are those whose last record the in-sync replicas
   * may not have yet (LogOffsetStore.unconfirmedIn), taken as a write of unknown outcome (not answered, not
   * reserved) until the store confirms them.
   */
  loaded(offsets: Iterable<StoredOffset>, unsure: Iterable<PartitionKey>): void {
    for (const x of offsets) this.setDurable(x.group, x.topic, x.partition, x.offset);
    for (const u of unsure) this.forgetReservations(u.group, u.topic, [u.partition]);
  }

  /**
   * A write of these partitions' offsets may or may not have reached the store (outcomeUnknown): none of
   * them is taken as reserved, so the next commit of each is written whatever offset it names, even one
   * equal to what the coordinator last knew.
   */
  forgetReservations(group: string, topic: string, partitions: readonly number[]): void {
    const byPart = this.reserved.get(group)?.get(topic);
    if (byPart) for (const p of partitions) byPart.delete(p);
    // Nor is what `committed` holds known any more: FETCH_OFFSET answered the offset from before the write
    // while the store held the new one (or after a reset, the one from before the reset forever once a
    // lower commit had been accepted). They are read back from the store before they are answered again.
    for (const partition of partitions) this.uncertain.set(pendingKey(group, topic, partition), { group, topic, partition });
    this.resolveUncertain(group);
  }

  /**
   * A deletion of the group's offsets (of `topic` only, when given) whose outcome the store could not tell
   * (outcomeUnknown): the commits being written are void (the deletion follows them in the store), and
   * every partition is uncertain (forgetReservations) until the store, read again, answers the offset it
   * kept or none (docs/architecture.md, "Cluster mode", Coordinators).
   */
  deletionUnknown(group: string, topic?: string): void {
    const picked = (t: string) => topic === undefined || t === topic;
    for (const w of this.writing) if (w.group === group && picked(w.topic)) w.voided = true;
    const parts = new Map<string, Set<number>>();
    for (const m of [this.committed, this.reserved]) {
      for (const [t, byPart] of m.get(group) ?? []) {
        if (!picked(t)) continue;
        const set = parts.get(t) ?? new Set<number>();
        parts.set(t, set);
        for (const p of byPart.keys()) set.add(p);
      }
    }
    for (const [t, set] of parts) this.forgetReservations(group, t, [...set]);
  }

  /** Deletes the group's offsets of a deleted topic, from the store first (a deletion of unknown outcome: deletionUnknown). */
  async deleteTopic(group: string, topic: string): Promise<void> {
    try {
      await this.ctx.offsetStore.deleteTopic(topic, [group]);
    } catch (err) {
      if (outcomeUnknown(err)) this.deletionUnknown(group, topic);
      throw err;
    }
    this.forgetTopic(group, topic);
  }

  /**
   * Reads the group's uncertain offsets back from the store, under the group's lock once the commits being
   * written have settled (none starts meanwhile), and takes what it holds as committed. A store that cannot
   * answer leaves them uncertain: the next FETCH_OFFSET of one tries again.
   */
  private resolveUncertain(group: string): void {
    if (this.resolving.has(group)) return;
    this.resolving.add(group);
    void this.ctx
      .withOwnedGroup(group, async () => {
        await this.writesSettled(group);
        await this.readBack(group);
      })
      .catch(() => {})
      .finally(() => this.resolving.delete(group));
  }

  /** Under the group's lock: the group's uncertain offsets (of `topic` only, when given), read from the store. */
  private async readBack(group: string, topic?: string): Promise<void> {
    for (const [k, at] of [...this.uncertain]) {
      if (at.group !== group || (topic !== undefined && at.topic !== topic)) continue;
      const { partition } = at;
      const stored = await this.ctx.offsetStore.fetch(group, at.topic, partition);
      if (!this.uncertain.has(k)) continue;
      if (stored !== undefined) this.setDurable(group, at.topic, partition, stored);
      else {
        this.uncertain.delete(k);
        this.committed.get(group)?.get(at.topic)?.delete(partition);
        this.reserved.get(group)?.get(at.topic)?.delete(partition);
      }
    }
  }

  /** A write the store accepted or refused told what it holds of an uncertain partition. */
  private learnt(group: string, topic: string, partition: number, stored: number): void {
    if (!this.uncertain.has(pendingKey(group, topic, partition))) return;
    this.setDurable(group, topic, partition, stored);
  }

  /** Forgets a group's offsets (deleted, or its partition given up). */
  forget(group: string): void {
    this.committed.delete(group);
    this.reserved.delete(group);
    for (const [k, at] of [...this.uncertain]) if (at.group === group) this.uncertain.delete(k);
  }

  /** The groups holding offsets of `topic`: committed, reserved, being written, or sent to a transaction. */
  groupsWithTopic(topic: string): Set<string> {
    const out = new Set<string>();
    for (const m of [this.committed, this.reserved]) for (const [group, byTopic] of m) if (byTopic.has(topic)) out.add(group);
    for (const w of this.writing) if (w.topic === topic) out.add(w.group);
    for (const k of this.pending.keys()) {
      const [group, t] = k.split('\u0000');
      if (t === topic) out.add(group!);
    }
    return out;
  }

  /**
   * Forgets a group's offsets of a deleted topic (the store's are deleted first): a commit still being
   * written then neither sets its offsets nor, if it fails, gives its reservation back.
   */
  forgetTopic(group: string, topic: string): void {
    for (const m of [this.committed, this.reserved]) {
      const byTopic = m.get(group);
      byTopic?.delete(topic);
      // A group known only by its offsets is no longer listed (LIST_GROUPS, ListGroups) once they are gone.
      if (byTopic?.size === 0) m.delete(group);
    }
    for (const w of this.writing) if (w.group === group && w.topic === topic) w.voided = true;
    for (const [k, at] of [...this.uncertain]) if (at.group === group && at.topic === topic) this.uncertain.delete(k);
    // Offsets transactions sent for the topic: stable at once (the re-created topic has none), not applied.
    const prefix = pendingKey(group, topic, '');
    for (const [k, txns] of [...this.pending]) {
      if (!k.startsWith(prefix)) continue;
      for (const txn of txns) this.droppedTxnOffsets.add(pendingKey(txn, group, topic));
      this.pending.delete(k);
    }
  }

  /**
   * Forgets the pending transaction offsets of the groups `drop` picks (their partition was given up):
   * those transactions end at the new coordinator, which this broker never hears of, so a hint kept here
   * would answer UNSTABLE_OFFSET_COMMIT forever once the partition comes back.
   */
  forgetPending(drop: (group: string) => boolean): void {
    for (const k of [...this.pending.keys()]) if (drop(k.slice(0, k.indexOf('\u0000')))) this.pending.delete(k);
  }

  fetchOffset(group: string, topic: string, partition: number): { offset: number; committed: boolean } {
    this.ctx.checkOwner(group);
    validateId('group', group);
    this.ctx.topics.get(topic).partition(partition);
    const txns = this.pending.get(pendingKey(group, topic, partition));
    if (txns && txns.size > 0) throw new TributaryError('UNSTABLE_OFFSET_COMMIT', { partition, transactions: txns.size });
    const k = this.knownOffset(group, topic, partition);
    // Either offset may be the store's (see `uncertain`): refused (retriable) rather than answered.
    if (!k.known) throw new TributaryError('storage_error', { op: 'fetch', partition, reason: 'the outcome of the last write of this offset is not known yet; try again' });
    return k.offset === undefined ? { offset: 0, committed: false } : { offset: k.offset, committed: true };
  }

  /**
   * The partition's committed offset as far as it is known: every reader's way to it (FETCH_OFFSET, Kafka
   * OffsetFetch, CONSUME, GROUP_STATUS, the lag gauge), so none answers the offset from before a write of
   * unknown outcome. Not known, it is being read back from the store (resolveUncertain).
   */
  knownOffset(group: string, topic: string, partition: number): KnownOffset {
    if (this.uncertain.has(pendingKey(group, topic, partition))) {
      this.resolveUncertain(group);
      return { known: false };
    }
    return { known: true, offset: getOffset(this.committed, group, topic, partition) };
  }

  /** The groups with committed offsets here (known or not). */
  groupsWithOffsets(): string[] {
    return [...this.committed.keys()];
  }

  hasOffsets(group: string): boolean {
    return this.committed.has(group);
  }

  /** The group's topics with committed offsets here and their partitions (ascending); the offsets through knownOffset(). */
  committedPartitions(group: string): Array<{ topic: string; partitions: number[] }> {
    return [...(this.committed.get(group) ?? [])].map(([topic, byPart]) => ({ topic, partitions: [...byPart.keys()].sort((a, b) => a - b) }));
  }

  commit(req: CommitRequest): Promise<number> {
    this.ctx.checkOwner(req.group);
    validateId('group', req.group);
    validateId('member', req.member);
    return this.commitEntries(req, () => this.checkCommit(req));
  }

  /**
   * A commit whose member is checked by `checkMember` (a Kafka classic group's generation fence,
   * classic-offsets.ts), under the group's lock; the entries are checked as every commit's are.
   */
  commitChecked(req: { group: string; topic: string; entries: OffsetEntry[] }, checkMember: () => void): Promise<number> {
    this.ctx.checkOwner(req.group);
    validateId('group', req.group);
    return this.commitEntries(req, () => {
      checkMember();
      this.checkEntries(req);
    });
  }

  /**
   * Whether a commit of the group's offsets is being written or a transaction holds some it has not
   * ended: the offsets retention does not delete the group then (group-expiry.ts).
   */
  busy(group: string): boolean {
    for (const w of this.writing) if (w.group === group) return true;
    const prefix = `${group}\u0000`;
    for (const k of this.pending.keys()) if (k.startsWith(prefix)) return true;
    return false;
  }

  /** Settles once every commit of the group being written now is settled (durable, or failed). */
  async writesSettled(group: string): Promise<void> {
    const prefix = `${group}\u0000`;
    await Promise.all([...this.unsettled].filter(([k]) => k.startsWith(prefix)).map(([, settled]) => settled));
  }

  /** Whether a transaction holds offsets of the partition that it has not ended (UNSTABLE_OFFSET_COMMIT). */
  hasPending(group: string, topic: string, partition: number): boolean {
    return (this.pending.get(pendingKey(group, topic, partition))?.size ?? 0) > 0;
  }

  /** The unsettled commits of these partitions (see `unsettled`). */
  private unsettledOf(group: string, topic: string, partitions: readonly number[]): Promise<void>[] {
    const out: Promise<void>[] = [];
    for (const p of partitions) {
      const u = this.unsettled.get(pendingKey(group, topic, p));
      if (u) out.push(u);
    }
    return out;
  }

  /** All entries or none: every check runs before anything is written, and one append holds them all. */
  private async commitEntries(req: { group: string; topic: string; entries: OffsetEntry[] }, check: () => void, again = false): Promise<number> {
    if (req.entries.length === 0) throw invalidParam('entries', 'no offsets to commit');
    const store = this.ctx.offsetStore;
    let previous: Array<number | undefined> = [];
    let changed: OffsetEntry[] = [];
    let waits: Promise<void>[] = [];
    const token = { group: req.group, topic: req.topic, voided: false };
    let settle = () => {};
    let issued = false;
    const run = async () => {
      check();
      // Activity of the group, written or not (an unchanged offset too): its offsets retention starts over.
      this.ctx.expiry.committed(req.group);
      changed = req.entries.filter((e) => getOffset(this.reserved, req.group, req.topic, e.partition) !== e.offset);
      // Reserved, not committed: a commit of the same offset is still being written.
      const repeated = req.entries.filter(
        (e) => getOffset(this.reserved, req.group, req.topic, e.partition) === e.offset && getOffset(this.committed, req.group, req.topic, e.partition) !== e.offset,
      );
      waits = this.unsettledOf(req.group, req.topic, repeated.map((e) => e.partition));
      previous = changed.map((e) => getOffset(this.reserved, req.group, req.topic, e.partition));
      for (const e of changed) setOffset(this.reserved, req.group, req.topic, e.partition, e.offset);
      if (changed.length === 0) return { write: undefined };
      if (store.kind !== 'log') this.ctx.checkStoreWrite();
      const settled = new Promise<void>((resolve) => {
        settle = resolve;
      });
      const keys = changed.map((e) => pendingKey(req.group, req.topic, e.partition));
      for (const k of keys) this.unsettled.set(k, settled);
      void settled.then(() => {
        for (const k of keys) if (this.unsettled.get(k) === settled) this.unsettled.delete(k);
      });
      this.writing.add(token);
      issued = true;
      // Wrapped so the lock is released before durability: the log keeps appends in order, so the next
      // commit may start while this one is being fsynced (and share its fsync).
      return { write: store.commit(req.group, req.topic, changed) };
    };
    try {
      const { write } = await this.ctx.withOwnedGroup(req.group, async () => {
        const out = await run();
        // Other stores (PostgreSQL) may finish transactions out of order: keep them serialized per group.
        if (store.kind !== 'log') await out.write;
        return out;
      });
      await write;
    } catch (err) {
      // A store that fails (PostgreSQL stopped, a full disk) is logged, rate-limited: clients only see storage_error.
      if (err instanceof TributaryError && err.code === 'storage_error') this.ctx.logFailure(err, { store: store.kind, group: req.group, topic: req.topic }, 'an offset commit failed in the offset store');
      this.settleFailed(req, token, changed, previous, outcomeUnknown(err));
      // The store's own refusal names what it holds.
      const refusal = err instanceof TributaryError && err.code === 'offset_regression' ? err.fields : undefined;
      const current = Number(refusal?.current);
      if (refusal && issued && !token.voided && Number.isSafeInteger(current) && current >= 0) this.learnt(req.group, req.topic, Number(refusal.partition), current);
      settle();
      throw err;
    }
    this.writing.delete(token);
    if (!token.voided) {
      for (const e of changed) {
        // Accepted by the store, which therefore holds it now, whatever `committed` held before.
        this.learnt(req.group, req.topic, e.partition, e.offset);
        const cur = getOffset(this.committed, req.group, req.topic, e.partition);
        if (cur === undefined || e.offset > cur) setOffset(this.committed, req.group, req.topic, e.partition, e.offset);
        // Durable now, so never reserved below it (a reload may have set the reservation back meanwhile).
        const res = getOffset(this.reserved, req.group, req.topic, e.partition);
        if (res === undefined || e.offset > res) setOffset(this.reserved, req.group, req.topic, e.partition, e.offset);
      }
    }
    settle();
    if (waits.length > 0) {
      await Promise.all(waits);
      // The write this commit's repeated offsets counted on failed: write them itself (once).
      const lost = req.entries.some((e) => (getOffset(this.committed, req.group, req.topic, e.partition) ?? -1) < e.offset);
      if (lost && !token.voided) {
        if (again) throw new TributaryError('storage_error', { reason: 'an earlier commit of these offsets was not made durable; try again' });
        return this.commitEntries(req, check, true);
      }
    }
    return req.entries.length;
  }

  /**
   * A commit that failed: not durable, so its reservations go back and a retry writes again. When the store
   * cannot tell whether the write happened (`unknown`), the partitions keep no reservation at all: the next
   * commit of any offset is written, and the store itself refuses one below what it holds.
   */
  private settleFailed(
    req: { group: string; topic: string },
    token: { group: string; topic: string; voided: boolean },
    changed: OffsetEntry[],
    previous: Array<number | undefined>,
    unknown = false,
  ): void {
    this.writing.delete(token);
    // The topic was deleted meanwhile: its offsets, this reservation's included, are gone already.
    if (token.voided) return;
    if (unknown) {
      this.forgetReservations(req.group, req.topic, changed.map((e) => e.partition));
      return;
    }
    changed.forEach((e, i) => {
      if (getOffset(this.reserved, req.group, req.topic, e.partition) === e.offset) {
        const prev = previous[i];
        if (prev === undefined) this.reserved.get(req.group)?.get(req.topic)?.delete(e.partition);
        else setOffset(this.reserved, req.group, req.topic, e.partition, prev);
      }
    });
  }


  /** Fencing, ownership and monotonicity of a commit (or of offsets sent to a transaction); throws. */
  private checkCommit(req: CommitRequest): void {
    const g = requireGroup(this.ctx.groups, req.group);
    if (g.topic !== req.topic) throw invalidParam('topic', `group ${req.group} consumes topic ${g.topic}`);
    const m = requireMember(g, req.member);
    const standing = standingOf(g, m, this.ctx.topics.tryGet(req.topic)?.def.topicId);
    checkGeneration(standing, req.generation);
    this.checkEntries(req, (p) => checkPartition(standing, p));
  }

  /** The entries of a commit: known partitions, each once, within the log, never behind the last commit. */
  private checkEntries(req: { group: string; topic: string; entries: OffsetEntry[] }, member?: (partition: number) => void): void {
    const topic = this.ctx.topics.get(req.topic);
    const seen = new Set<number>();
    for (const e of req.entries) {
      if (seen.has(e.partition)) throw invalidParam('entries', `partition ${e.partition} given twice`);
      seen.add(e.partition);
      const part = topic.partition(e.partition);
      member?.(e.partition);
      // Only a standalone broker's copy is the log: in a cluster this one may be a lagging follower's, or
      // none at all (the coordinator need not replicate the partition; docs/architecture.md "Reassignment").
      if (!part.isReplicated && e.offset > part.logEndOffset) throw invalidParam('offset', `partition ${e.partition}: ${e.offset} is beyond the log end ${part.logEndOffset}`);
      const cur = getOffset(this.reserved, req.group, req.topic, e.partition);
      if (cur !== undefined && e.offset < cur) {
        throw new TributaryError('offset_regression', { partition: e.partition, current: cur, requested: e.offset });
      }
    }
  }

  // ---- offsets of transactions (src/txn) ----

  /**
   * SEND_OFFSETS_TO_TXN: checked exactly as a commit (member, generation, ownership, monotonicity), then
   * held as pending under the transaction. Until it ends, FETCH_OFFSET of those partitions answers
   * UNSTABLE_OFFSET_COMMIT, so a member that takes a partition over waits for the transaction instead of
   * starting from an offset the commit is about to move.
   */
  async stageTxnOffsets(txn: string, req: CommitRequest): Promise<void> {
    this.ctx.checkOwner(req.group);
    validateId('group', req.group);
    validateId('member', req.member);
    if (req.entries.length === 0) throw invalidParam('entries', 'no offsets to send');
    await this.ctx.withOwnedGroup(req.group, () => {
      this.checkCommit(req);
      this.markPending(txn, req.group, req.topic, req.entries.map((e) => e.partition));
    });
  }

  /**
   * TxnOffsetCommit (the Kafka port): offsets a transaction sends for a Kafka classic group, whose member
   * `checkMember` checks (ClassicGroups.memberCheck, the same check as that group's commits), under the
   * group's lock; the entries are checked as a commit's are, then held as pending under the transaction.
   */
  async stageChecked(txn: string, req: { group: string; topic: string; entries: OffsetEntry[] }, checkMember: () => void): Promise<void> {
    this.ctx.checkOwner(req.group);
    validateId('group', req.group);
    if (req.entries.length === 0) throw invalidParam('entries', 'no offsets to send');
    await this.ctx.withOwnedGroup(req.group, () => {
      checkMember();
      this.checkEntries(req);
      this.markPending(txn, req.group, req.topic, req.entries.map((e) => e.partition));
    });
  }

  /** Pending transaction offsets restored at start (the transaction was open before a restart). */
  markPending(txn: string, group: string, topic: string, partitions: number[]): void {
    for (const p of partitions) {
      const k = pendingKey(group, topic, p);
      let set = this.pending.get(k);
      if (!set) this.pending.set(k, (set = new Set()));
      set.add(txn);
    }
  }

  /** The transaction ended (aborted, or its offsets applied): the partitions are stable again. */
  clearPending(txn: string, group: string, topic: string, partitions: number[]): void {
    this.droppedTxnOffsets.delete(pendingKey(txn, group, topic));
    for (const p of partitions) {
      const k = pendingKey(group, topic, p);
      const set = this.pending.get(k);
      if (!set) continue;
      set.delete(txn);
      if (set.size === 0) this.pending.delete(k);
    }
  }

  /**
   * A committed transaction's offsets: applied without fencing (the commit decision is already durable;
   * the checks ran when they were sent), never moving an offset back, durable when resolved. Applying the
   * same offsets again (recovery finishing a commit) changes nothing.
   */
  async applyTxnOffsets(txn: string, group: string, topic: string, entries: OffsetEntry[]): Promise<void> {
    await this.ctx.withGroup(group, async () => {
      this.ctx.expiry.committed(group);
      // A plain commit still being written may fail: compare with what is durable once it settled.
      await Promise.all(this.unsettledOf(group, topic, entries.map((e) => e.partition)));
      // Compared with `committed` below, which after a write of unknown outcome may be behind the store:
      // the store would then refuse these as a regression at every retry. Read back first (a store that
      // cannot answer fails this attempt, retried by the transaction coordinator).
      await this.readBack(group, topic);
      // The topic was deleted after they were sent: they went with its offsets.
      const dropped = this.droppedTxnOffsets.has(pendingKey(txn, group, topic));
      const forward = entries.filter((e) => {
        if (dropped) return false;
        const cur = getOffset(this.committed, group, topic, e.partition);
        return cur === undefined || e.offset > cur;
      });
      if (forward.length > 0) {
        if (this.ctx.offsetStore.kind !== 'log') this.ctx.checkStoreWrite();
        await this.ctx.offsetStore.commit(group, topic, forward);
        for (const e of forward) {
          if ((getOffset(this.reserved, group, topic, e.partition) ?? -1) < e.offset) setOffset(this.reserved, group, topic, e.partition, e.offset);
          setOffset(this.committed, group, topic, e.partition, e.offset);
        }
      }
      this.clearPending(txn, group, topic, entries.map((e) => e.partition));
    });
  }
}
