/**
 * The leader epochs of one partition replica and the offset each started at, as in Kafka's leader epoch
 * cache: entries (epoch, startOffset), both strictly increasing. A leader assigns its epoch at its log end
 * when it takes over; a follower copies its leader's history. With them a follower finds where its log
 * stops agreeing with its new leader's (OffsetsForLeaderEpoch, KIP-101/KIP-279) and truncates there.
 *
 * Persisted in the partition directory as `leader-epoch.checkpoint`, replaced atomically:
 *
 *   tributary-leader-epoch 1
 *   <count>
 *   <epoch> <startOffset>      one line per entry, in order
 *
 * The log cannot rebuild this history (records carry producer epochs, not leader epochs), so an unreadable
 * file is an error, not an empty cache. Mutations are in memory; flush() writes them. Flush after assign()
 * before appending records of the new epoch, so the file never lacks the epoch of a record in the log.
 * After opening a log that recovery may have cut, call truncateFromEnd(logEndOffset) and
 * truncateFromStart(logStartOffset); after retention moved the log start, truncateFromStart and flush
 * (cluster/replica-types.ts).
 */
import { dirname, join } from 'node:path';
import { invalidParam, TributaryError } from 'tributary-protocol/errors.js';
import { readSmallFile, writeFileAtomic } from './atomic-file.js';
import { makeDir } from './log-fs.js';
import { SETTLED } from '../common/settled.js';

export const LEADER_EPOCH_CHECKPOINT_FILE = 'leader-epoch.checkpoint';
/** "No epoch" and "no offset" in an EpochEndOffset, as Kafka's UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET. */
export const UNDEFINED_EPOCH = -1;
export const UNDEFINED_EPOCH_OFFSET = -1;

/** One entry: the epoch and the first offset written in it. */
export type EpochEntry = [epoch: number, startOffset: number];

/** What endOffsetFor answers: an epoch this log knows and where it ended here. */
export interface EpochEndOffset {
  /** The largest epoch <= the requested one known here (the requested one itself below the first entry); -1 when undefined. */
  epoch: number;
  /** Start offset of the first entry with a higher epoch, or the log end for the latest epoch; -1 when undefined. */
  endOffset: number;
}

const HEADER = 'tributary-leader-epoch 1';
const UNDEFINED: Readonly<EpochEndOffset> = Object.freeze({ epoch: UNDEFINED_EPOCH, endOffset: UNDEFINED_EPOCH_OFFSET });

/**
 * Kafka's endOffsetFor over `entries`:
 * - the latest epoch: (epoch, logEndOffset);
 * - an older epoch: (largest known epoch <= it, start offset of the first entry with a higher epoch);
 * - an epoch below the first entry: (epoch, start offset of the first entry). Its records, if any, are not
 *   in this log (retention removed them, or they never were): the asker keeps nothing from that offset on.
 * - undefined (-1, -1): the epoch is -1, above the latest, or nothing is known (empty cache).
 */
export function endOffsetForEpoch(entries: readonly EpochEntry[], epoch: number, logEndOffset: number): EpochEndOffset {
  const n = entries.length;
  if (epoch === UNDEFINED_EPOCH || n === 0) return { ...UNDEFINED };
  if (entries[n - 1][0] === epoch) return { epoch, endOffset: logEndOffset };
  // First entry with a higher epoch.
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (entries[mid][0] > epoch) hi = mid;
    else lo = mid + 1;
  }
  if (lo === n) return { ...UNDEFINED };
  const endOffset = entries[lo][1];
  return lo === 0 ? { epoch, endOffset } : { epoch: entries[lo - 1][0], endOffset };
}

/**
 * Where a follower truncates its log before fetching from a new leader, from both epoch histories (the
 * leader's as LEADER_EPOCHS reports it, with the leader's log end). KIP-279: ask the leader where the
 * follower's latest epoch ended; when the leader answers with an older epoch (it never had the follower's),
 * the follower also cuts where that older epoch ended in its own log, and asks again with what is left.
 * Everything below the result is the leader's (same offsets, same epochs), and everything the two share is
 * kept, elections of out-of-sync replicas included (property-tested). `fallbackOffset` (the follower's high watermark) is used when no epoch helps: the follower has no epoch
 * history, or its epochs are unknown to the leader. The follower then drops entries >= the result
 * (truncateFromEnd) or takes the leader's history (replaceWith).
 */
export function followerTruncationOffset(
  leader: { entries: readonly EpochEntry[]; logEndOffset: number },
  follower: { entries: readonly EpochEntry[]; logEndOffset: number; fallbackOffset: number },
): number {
  let mine = follower.entries.slice();
  let end = follower.logEndOffset;
  for (;;) {
    if (mine.length === 0) return Math.min(follower.fallbackOffset, end);
    const reply = endOffsetForEpoch(leader.entries, mine[mine.length - 1][0], leader.logEndOffset);
    if (reply.endOffset === UNDEFINED_EPOCH_OFFSET) return Math.min(follower.fallbackOffset, end);
    // Never undefined: the answer is an epoch <= the follower's latest (and mine is not empty).
    const own = endOffsetForEpoch(mine, reply.epoch, end);
    const offset = Math.min(reply.endOffset, own.endOffset, end);
    // The follower has the epoch the leader answered with (or nothing before it): they agree up to there.
    if (own.epoch === reply.epoch) return offset;
    // It has not: cut where its own epochs after that one start (every one above reply.epoch goes, so the
    // latest epoch left is lower and the loop ends), and ask again.
    end = offset;
    mine = mine.filter((e) => e[1] < offset);
  }
}

function isOffset(v: number): boolean {
  return Number.isSafeInteger(v) && v >= 0;
}

export class LeaderEpochCache {
  readonly file: string;
  private list: EpochEntry[] = [];
  /** Bumped by every change; flush() writes when it differs from what the file holds. */
  private version = 0;
  private writtenVersion = -1;
  /** Loads and flushes, in call order. */
  private io: Promise<void> = SETTLED;
  /** While a load runs: the changes made meanwhile, applied again on top of what it reads. */
  private replay: Array<() => void> | null = null;
  /** While removeWith's `drop` runs: the changes made meanwhile, applied again on the empty history. */
  private removing: Array<() => void> | null = null;

  constructor(readonly dir: string) {
    this.file = join(dir, LEADER_EPOCH_CHECKPOINT_FILE);
  }

  /**
   * The checkpoint goes with the partition directory (Partition.release): `drop` runs once no load or
   * flush is in flight, and later ones wait for it, so none writes into the directory as it goes. When
   * `drop` resolves true the history is empty and so is the disk (flush() writes nothing until the next
   * change; changes made while `drop` ran are applied again on top and written by the next flush). False
   * or an error: nothing changes.
   */
  removeWith(drop: () => Promise<boolean>): Promise<boolean> {
    const p = this.io.then(async () => {
      const ops: Array<() => void> = [];
      this.removing = ops;
      try {
        if (!(await drop())) return false;
      } finally {
        this.removing = null;
      }
      this.list = [];
      for (const op of ops) op();
      this.version++;
      this.writtenVersion = ops.length === 0 ? this.version : -1;
      return true;
    });
    this.io = p.then(
      () => {},
      () => {},
    );
    return p;
  }

  /** A copy of the entries, oldest first. */
  entries(): EpochEntry[] {
    return this.list.map(([e, o]) => [e, o]);
  }

  /** The latest epoch, undefined when there is none. */
  get latestEpoch(): number | undefined {
    return this.list.length ? this.list[this.list.length - 1][0] : undefined;
  }

  /** The latest entry, undefined when there is none. */
  get latestEntry(): EpochEntry | undefined {
    const last = this.list[this.list.length - 1];
    return last ? [last[0], last[1]] : undefined;
  }

  /**
   * Records that `epoch` starts at `startOffset`. An epoch not greater than the latest is ignored (false).
   * Entries starting at or after `startOffset` are replaced (a new leader whose log ends below epochs it only
   * heard of: they never reached its log).
   */
  assign(epoch: number, startOffset: number): boolean {
    if (!isOffset(epoch)) throw invalidParam('epoch', 'must be a non-negative safe integer');
    if (!isOffset(startOffset)) throw invalidParam('startOffset', 'must be a non-negative safe integer');
    return this.mutate(() => {
      const latest = this.list[this.list.length - 1];
      if (latest && epoch <= latest[0]) return false;
      while (this.list.length > 0 && this.list[this.list.length - 1][1] >= startOffset) this.list.pop();
      this.list.push([epoch, startOffset]);
      return true;
    });
  }

  /** Where `epoch` ended in a log ending at `logEndOffset` (see endOffsetForEpoch). */
  endOffsetFor(epoch: number, logEndOffset: number): EpochEndOffset {
    return endOffsetForEpoch(this.list, epoch, logEndOffset);
  }

  /** Drops the entries starting at or after `offset` (the log was truncated to `offset`). */
  truncateFromEnd(offset: number): boolean {
    if (!isOffset(offset)) throw invalidParam('offset', 'must be a non-negative safe integer');
    return this.mutate(() => {
      const n = this.list.length;
      while (this.list.length > 0 && this.list[this.list.length - 1][1] >= offset) this.list.pop();
      return this.list.length !== n;
    });
  }

  /**
   * The log now starts at `offset` (retention): entries starting at or before it go, except the last of them,
   * which now starts at `offset` (it is the epoch of the records from there on).
   */
  truncateFromStart(offset: number): boolean {
    if (!isOffset(offset)) throw invalidParam('offset', 'must be a non-negative safe integer');
    return this.mutate(() => {
      let k = 0;
      while (k < this.list.length && this.list[k][1] <= offset) k++;
      if (k === 0 || (k === 1 && this.list[0][1] === offset)) return false;
      const epoch = this.list[k - 1][0];
      this.list.splice(0, k, [epoch, offset]);
      return true;
    });
  }

  /** Replaces every entry (a follower taking its leader's history); entries must be strictly increasing. */
  replaceWith(entries: ReadonlyArray<readonly [number, number]>): void {
    const copy = validate(entries.map(([e, o]) => [e, o] as EpochEntry));
    if (typeof copy === 'string') throw invalidParam('entries', copy);
    this.mutate(() => {
      this.list = copy.map(([e, o]) => [e, o]);
      return true;
    });
  }

  /**
   * Replaces the entries with the checkpoint's; a missing file is an empty history. Changes made after the
   * call, while it runs, are applied again on top of what it read, and flush() waits for it. Throws
   * storage_error when the file is malformed or unreadable (the entries are then left as they were).
   */
  load(): Promise<void> {
    this.replay ??= [];
    const p = this.io.then(async () => {
      let text: string | null = null;
      try {
        text = await readSmallFile(this.file, 'utf8');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
          this.replay = null;
          throw new TributaryError('storage_error', { file: this.file, reason: `cannot read leader epoch checkpoint: ${(err as Error).message}` });
        }
      }
      const ops = this.replay ?? [];
      this.replay = null;
      const parsed = text === null ? [] : parse(text);
      if (typeof parsed === 'string') throw new TributaryError('storage_error', { file: this.file, reason: `malformed leader epoch checkpoint: ${parsed}` });
      this.list = parsed;
      for (const op of ops) op();
      this.version++;
      // With changes replayed on top, the file is behind.
      // No file is an empty history: nothing to write back unless it changes (a replica never led here
      // has no directory, docs/architecture.md "Hosted partitions").
      if (ops.length === 0) this.writtenVersion = this.version;
    });
    this.io = p.catch(() => {});
    return p;
  }

  /** Writes the entries atomically (temp file, fsync, rename, directory fsync) unless the file has them. */
  flush(): Promise<void> {
    const p = this.io.then(async () => {
      const v = this.version;
      if (v === this.writtenVersion) return;
      // A dormant partition has no directory yet (PartitionLog.open, `lazy`).
      await makeDir(dirname(this.file), true);
      await writeFileAtomic(this.file, serialize(this.list));
      this.writtenVersion = v;
    });
    this.io = p.catch(() => {});
    return p;
  }

  private mutate(fn: () => boolean): boolean {
    this.replay?.push(fn);
    this.removing?.push(fn);
    const changed = fn();
    if (changed) this.version++;
    return changed;
  }
}

/** A reason string when `entries` are not strictly increasing non-negative pairs. */
function validate(entries: EpochEntry[]): EpochEntry[] | string {
  for (let i = 0; i < entries.length; i++) {
    const [e, o] = entries[i];
    if (!isOffset(e) || !isOffset(o)) return `entry ${i}: epoch and start offset must be non-negative safe integers`;
    if (i > 0 && (e <= entries[i - 1][0] || o <= entries[i - 1][1])) return `entry ${i}: epochs and start offsets must be strictly increasing`;
  }
  return entries;
}

function serialize(entries: readonly EpochEntry[]): string {
  let s = `${HEADER}\n${entries.length}\n`;
  for (const [e, o] of entries) s += `${e} ${o}\n`;
  return s;
}

function parse(text: string): EpochEntry[] | string {
  const lines = text.split('\n');
  if (lines[0] !== HEADER) return 'bad header';
  if (!/^\d+$/.test(lines[1] ?? '')) return 'bad entry count';
  const n = Number(lines[1]);
  if (lines.length !== n + 3 || lines[n + 2] !== '') return 'entry count does not match';
  const entries: EpochEntry[] = [];
  for (let i = 0; i < n; i++) {
    const m = /^(\d+) (\d+)$/.exec(lines[i + 2]);
    if (!m) return `bad entry line ${i + 1}`;
    entries.push([Number(m[1]), Number(m[2])]);
  }
  return validate(entries);
}
