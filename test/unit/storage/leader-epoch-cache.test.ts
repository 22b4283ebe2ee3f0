import { readdir, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import {
  type EpochEntry,
  endOffsetForEpoch,
  followerTruncationOffset,
  LEADER_EPOCH_CHECKPOINT_FILE,
  LeaderEpochCache,
  UNDEFINED_EPOCH,
  UNDEFINED_EPOCH_OFFSET,
} from 'tributary-broker/storage/leader-epoch-cache.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-epochs-');
});
afterEach(async () => {
  await removeDir(dir);
});

function cacheOf(entries: EpochEntry[]): LeaderEpochCache {
  const c = new LeaderEpochCache(join(dir, 'unused'));
  c.replaceWith(entries);
  return c;
}

describe('LeaderEpochCache', () => {
  it('assign keeps epochs and start offsets increasing', () => {
    const c = new LeaderEpochCache(dir);
    expect(c.latestEpoch).toBeUndefined();
    expect(c.latestEntry).toBeUndefined();
    expect(c.assign(1, 0)).toBe(true);
    expect(c.assign(3, 10)).toBe(true);
    // Not greater than the latest: ignored.
    expect(c.assign(3, 12)).toBe(false);
    expect(c.assign(2, 20)).toBe(false);
    expect(c.entries()).toEqual([
      [1, 0],
      [3, 10],
    ]);
    expect(c.assign(4, 30)).toBe(true);
    expect(c.latestEpoch).toBe(4);
    expect(c.latestEntry).toEqual([4, 30]);
    // A new epoch at or below the start of later entries replaces them.
    expect(c.assign(5, 10)).toBe(true);
    expect(c.entries()).toEqual([
      [1, 0],
      [5, 10],
    ]);
    expect(c.assign(6, 10)).toBe(true);
    expect(c.entries()).toEqual([
      [1, 0],
      [6, 10],
    ]);
    expect(c.assign(7, 0)).toBe(true);
    expect(c.entries()).toEqual([[7, 0]]);
    // The copy returned is the caller's.
    c.entries()[0][1] = 99;
    expect(c.entries()).toEqual([[7, 0]]);
    expect(() => c.assign(-1, 0)).toThrow(TributaryError);
    expect(() => c.assign(8, -1)).toThrow(TributaryError);
    expect(() => c.assign(8.5, 3)).toThrow(TributaryError);
  });

  it('endOffsetFor answers as Kafka (OffsetsForLeaderEpoch)', () => {
    const c = cacheOf([
      [2, 5],
      [4, 10],
      [7, 20],
    ]);
    const at = (epoch: number) => c.endOffsetFor(epoch, 33);
    // The latest epoch ends at the log end.
    expect(at(7)).toEqual({ epoch: 7, endOffset: 33 });
    // A known epoch ends where the next one starts.
    expect(at(2)).toEqual({ epoch: 2, endOffset: 10 });
    expect(at(4)).toEqual({ epoch: 4, endOffset: 20 });
    // An unknown epoch between known ones: the largest known one below it, and where that ended.
    expect(at(3)).toEqual({ epoch: 2, endOffset: 10 });
    expect(at(6)).toEqual({ epoch: 4, endOffset: 20 });
    // Below the first entry: the epoch asked for, ending where the first known epoch starts.
    expect(at(1)).toEqual({ epoch: 1, endOffset: 5 });
    expect(at(0)).toEqual({ epoch: 0, endOffset: 5 });
    // Undefined: above the latest, epoch -1, or nothing known.
    const undef = { epoch: UNDEFINED_EPOCH, endOffset: UNDEFINED_EPOCH_OFFSET };
    expect(at(8)).toEqual(undef);
    expect(at(-1)).toEqual(undef);
    expect(new LeaderEpochCache(dir).endOffsetFor(3, 10)).toEqual(undef);
    expect(endOffsetForEpoch([], 0, 0)).toEqual(undef);
  });

  it('truncateFromEnd drops entries starting at or after the offset', () => {
    const c = cacheOf([
      [1, 0],
      [2, 5],
      [4, 10],
    ]);
    expect(c.truncateFromEnd(11)).toBe(false);
    expect(c.truncateFromEnd(10)).toBe(true);
    expect(c.entries()).toEqual([
      [1, 0],
      [2, 5],
    ]);
    expect(c.truncateFromEnd(3)).toBe(true);
    expect(c.entries()).toEqual([[1, 0]]);
    expect(c.truncateFromEnd(0)).toBe(true);
    expect(c.entries()).toEqual([]);
    expect(c.truncateFromEnd(0)).toBe(false);
  });

  it('truncateFromStart keeps the epoch of the new log start, starting there', () => {
    const c = cacheOf([
      [1, 0],
      [2, 5],
      [4, 10],
    ]);
    expect(c.truncateFromStart(0)).toBe(false);
    expect(c.truncateFromStart(3)).toBe(true);
    expect(c.entries()).toEqual([
      [1, 3],
      [2, 5],
      [4, 10],
    ]);
    // Exactly at an entry's start: the entries before it go.
    expect(c.truncateFromStart(5)).toBe(true);
    expect(c.entries()).toEqual([
      [2, 5],
      [4, 10],
    ]);
    expect(c.truncateFromStart(5)).toBe(false);
    expect(c.truncateFromStart(12)).toBe(true);
    expect(c.entries()).toEqual([[4, 12]]);
    expect(c.truncateFromStart(50)).toBe(true);
    expect(c.entries()).toEqual([[4, 50]]);
    expect(new LeaderEpochCache(dir).truncateFromStart(5)).toBe(false);
  });

  it('replaceWith takes a copy and refuses entries that are not increasing', () => {
    const src: EpochEntry[] = [
      [1, 0],
      [3, 4],
    ];
    const c = cacheOf(src);
    src[1][1] = 100;
    expect(c.entries()).toEqual([
      [1, 0],
      [3, 4],
    ]);
    for (const bad of [
      [
        [1, 0],
        [1, 4],
      ],
      [
        [1, 4],
        [2, 4],
      ],
      [
        [2, 4],
        [1, 6],
      ],
      [[-1, 0]],
      [[1, 0.5]],
    ] as EpochEntry[][]) {
      expect(() => c.replaceWith(bad)).toThrow(TributaryError);
    }
    expect(c.entries()).toEqual([
      [1, 0],
      [3, 4],
    ]);
  });

  it('flush writes the checkpoint atomically; load reads it back; a missing file is an empty history', async () => {
    const c = new LeaderEpochCache(dir);
    await c.load();
    expect(c.entries()).toEqual([]);
    c.assign(1, 0);
    c.assign(5, 1234567890123);
    await c.flush();
    const file = join(dir, LEADER_EPOCH_CHECKPOINT_FILE);
    expect(c.file).toBe(file);
    expect(await readFile(file, 'utf8')).toBe('tributary-leader-epoch 1\n2\n1 0\n5 1234567890123\n');
    expect((await readdir(dir)).filter((n) => n.endsWith('.tmp'))).toEqual([]);
    const d = new LeaderEpochCache(dir);
    await d.load();
    expect(d.entries()).toEqual(c.entries());
    expect(d.latestEpoch).toBe(5);
    // Changes after a flush reach the file at the next one; unchanged, nothing is rewritten.
    d.truncateFromEnd(10);
    await d.flush();
    expect(await readFile(file, 'utf8')).toBe('tributary-leader-epoch 1\n1\n1 0\n');
    await writeFile(file, 'tributary-leader-epoch 1\n1\n2 0\n');
    await d.flush();
    expect(await readFile(file, 'utf8')).toBe('tributary-leader-epoch 1\n1\n2 0\n');
    const e = new LeaderEpochCache(dir);
    await e.load();
    expect(e.entries()).toEqual([[2, 0]]);
    // An empty history is written as such.
    e.truncateFromEnd(0);
    await e.flush();
    // load() replaces what the cache held before it was called.
    const f = new LeaderEpochCache(dir);
    f.assign(9, 9);
    await f.load();
    expect(f.entries()).toEqual([]);
  });

  it('refuses a malformed checkpoint (the history cannot be rebuilt from the log)', async () => {
    const file = join(dir, LEADER_EPOCH_CHECKPOINT_FILE);
    for (const text of [
      '',
      'garbage\n',
      'tributary-leader-epoch 2\n0\n',
      'tributary-leader-epoch 1\n2\n1 0\n',
      'tributary-leader-epoch 1\n1\n1 0\n2 5\n',
      'tributary-leader-epoch 1\n1\n1 0',
      'tributary-leader-epoch 1\n2\n3 0\n2 5\n',
      'tributary-leader-epoch 1\n2\n1 5\n2 5\n',
      'tributary-leader-epoch 1\n1\n-1 0\n',
      'tributary-leader-epoch 1\n1\n1 x\n',
    ]) {
      await writeFile(file, text);
      const c = new LeaderEpochCache(dir);
      const err = await c.load().then(
        () => null,
        (e: unknown) => e,
      );
      expect(err, JSON.stringify(text)).toBeInstanceOf(TributaryError);
      expect((err as TributaryError).code).toBe('storage_error');
    }
  });

  it('changes made while load() runs are applied on top of what it reads, and flush() waits for it', async () => {
    const first = new LeaderEpochCache(dir);
    first.assign(1, 0);
    first.assign(3, 10);
    await first.flush();
    const c = new LeaderEpochCache(dir);
    const loading = c.load();
    // A broker becoming leader right after opening the partition, before the load finished.
    c.assign(5, 20);
    const flushing = c.flush();
    await loading;
    await flushing;
    expect(c.entries()).toEqual([
      [1, 0],
      [3, 10],
      [5, 20],
    ]);
    const d = new LeaderEpochCache(dir);
    await d.load();
    expect(d.entries()).toEqual(c.entries());
  });
});

// ---------------------------------------------------------------- follower truncation

/**
 * A replica of the model: its log is the leader epoch of the record at each offset (a record is identified
 * by its offset and epoch: one leader per epoch writes it), and its epoch cache.
 */
interface Replica {
  log: number[];
  cache: LeaderEpochCache;
}

/** The truncation the replica manager first shipped with: the leader's first epoch above the follower's latest. */
function naiveTruncation(leader: Replica, follower: Replica): number {
  const mine = follower.cache.latestEpoch;
  let end = leader.log.length;
  if (mine !== undefined) {
    const higher = leader.cache.entries().find(([e]) => e > mine);
    if (higher) end = higher[1];
  }
  return Math.min(end, follower.log.length);
}

function truncationFor(leader: Replica, follower: Replica): number {
  return followerTruncationOffset(
    { entries: leader.cache.entries(), logEndOffset: leader.log.length },
    { entries: follower.cache.entries(), logEndOffset: follower.log.length, fallbackOffset: 0 },
  );
}

/** Length of the common prefix of two logs. */
function agreeUpTo(a: number[], b: number[]): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

type Cmd = { t: 'elect'; r: number } | { t: 'append'; n: number } | { t: 'sync'; r: number; max: number };

class Cluster {
  replicas: Replica[];
  leader = -1;
  epoch = 0;
  truncations = 0;
  exact = 0;
  constructor(n: number) {
    this.replicas = Array.from({ length: n }, () => ({ log: [], cache: new LeaderEpochCache(join(tmpdir(), 'never-flushed')) }));
  }
  run(c: Cmd): void {
    if (c.t === 'elect') {
      // Any replica, in sync or not (unclean elections too): the truncation must cope.
      this.leader = c.r;
      this.epoch++;
      const l = this.replicas[c.r];
      l.cache.assign(this.epoch, l.log.length);
    } else if (c.t === 'append') {
      if (this.leader < 0) return;
      for (let i = 0; i < c.n; i++) this.replicas[this.leader].log.push(this.epoch);
    } else {
      if (this.leader < 0 || c.r === this.leader) return;
      const l = this.replicas[this.leader];
      const f = this.replicas[c.r];
      const t = truncationFor(l, f);
      const common = agreeUpTo(l.log, f.log);
      // Never keeps an offset the leader does not have with the same epoch...
      expect(t).toBeLessThanOrEqual(common);
      // ...and cuts nothing they agree on.
      expect(t).toBe(common);
      if (t < f.log.length) this.truncations++;
      if (t === common) this.exact++;
      f.log.length = t;
      f.cache.truncateFromEnd(t);
      // Fetch up to `max` records from the follower's log end, taking each new epoch into its history.
      for (let i = 0; i < c.max && f.log.length < l.log.length; i++) {
        const o = f.log.length;
        f.log.push(l.log[o]);
        f.cache.assign(l.log[o], o);
      }
    }
    this.checkInvariants();
  }
  checkInvariants(): void {
    for (const r of this.replicas) {
      // The cache describes the log: the epoch of every record is the entry at or before its offset.
      const entries = r.cache.entries();
      for (let o = 0; o < r.log.length; o++) {
        let e = -1;
        for (const [epoch, start] of entries) if (start <= o) e = epoch;
        expect(e).toBe(r.log[o]);
      }
    }
    // Log matching: two replicas with the same epoch at an offset agree on everything before it.
    for (const a of this.replicas) {
      for (const b of this.replicas) {
        const n = Math.min(a.log.length, b.log.length);
        for (let o = n - 1; o >= 0; o--) {
          if (a.log[o] === b.log[o]) {
            expect(agreeUpTo(a.log, b.log)).toBeGreaterThan(o);
            break;
          }
        }
      }
    }
  }
}

const cmdArb: fc.Arbitrary<Cmd> = fc.oneof(
  fc.record({ t: fc.constant('elect' as const), r: fc.nat(2) }),
  fc.record({ t: fc.constant('append' as const), n: fc.integer({ min: 1, max: 4 }) }),
  fc.record({ t: fc.constant('sync' as const), r: fc.nat(2), max: fc.integer({ min: 0, max: 6 }) }),
);

describe('follower truncation by leader epoch', () => {
  it('a follower truncating by followerTruncationOffset keeps exactly what it shares with the leader (property)', () => {
    let truncations = 0;
    let syncs = 0;
    fc.assert(
      fc.property(fc.array(cmdArb, { minLength: 1, maxLength: 60 }), (cmds) => {
        const c = new Cluster(3);
        for (const cmd of cmds) c.run(cmd);
        // Finally every follower syncs fully with the last leader and holds its log.
        if (c.leader >= 0) {
          for (let r = 0; r < 3; r++) {
            c.run({ t: 'sync', r, max: 1_000 });
            if (r !== c.leader) expect(c.replicas[r].log).toEqual(c.replicas[c.leader].log);
          }
        }
        truncations += c.truncations;
        syncs += c.exact;
      }),
      { numRuns: 500 },
    );
    // The histories really diverged (unclean elections), and were repaired.
    expect(truncations).toBeGreaterThan(100);
    expect(syncs).toBeGreaterThan(1000);
  });

  it('the leader answering with an older epoch makes the follower cut more (KIP-279); the first epoch above its latest is not enough', () => {
    const c = new Cluster(2);
    const [a, b] = c.replicas;
    c.run({ t: 'elect', r: 0 });
    c.run({ t: 'append', n: 3 });
    c.run({ t: 'sync', r: 1, max: 1 });
    // B takes over with only the first record and writes two of its own that A never gets.
    c.run({ t: 'elect', r: 1 });
    c.run({ t: 'append', n: 2 });
    // A takes over again (epoch 3) and writes one more.
    c.run({ t: 'elect', r: 0 });
    c.run({ t: 'append', n: 1 });
    expect(a.log).toEqual([1, 1, 1, 3]);
    expect(b.log).toEqual([1, 2, 2]);
    // Epoch 2 is unknown to A; the first epoch above it starts at 3, past B's log: B would keep its
    // records of epoch 2 at offsets 1 and 2, where A has epoch 1.
    expect(naiveTruncation(a, b)).toBe(3);
    // A answers for epoch 2 with epoch 1 ending at 3; B's own epoch 1 ended at 1: B cuts at 1.
    expect(a.cache.endOffsetFor(2, a.log.length)).toEqual({ epoch: 1, endOffset: 3 });
    expect(truncationFor(a, b)).toBe(1);
    c.run({ t: 'sync', r: 1, max: 10 });
    expect(b.log).toEqual(a.log);
  });

  it('falls back to the given offset when epochs cannot tell', () => {
    const leader = { entries: [[3, 0] as EpochEntry, [5, 10] as EpochEntry], logEndOffset: 20 };
    // No history on the follower (records from before replication).
    expect(followerTruncationOffset(leader, { entries: [], logEndOffset: 8, fallbackOffset: 4 })).toBe(4);
    expect(followerTruncationOffset(leader, { entries: [], logEndOffset: 2, fallbackOffset: 4 })).toBe(2);
    // The follower's latest epoch is newer than anything the leader knows.
    expect(followerTruncationOffset(leader, { entries: [[6, 0]], logEndOffset: 8, fallbackOffset: 3 })).toBe(3);
    // Same latest epoch: up to the shorter log.
    expect(
      followerTruncationOffset(leader, {
        entries: [
          [3, 0],
          [5, 10],
        ],
        logEndOffset: 25,
        fallbackOffset: 0,
      }),
    ).toBe(20);
    expect(
      followerTruncationOffset(leader, {
        entries: [
          [3, 0],
          [5, 10],
        ],
        logEndOffset: 12,
        fallbackOffset: 0,
      }),
    ).toBe(12);
    // Below the leader's first epoch: nothing from its first start on.
    expect(followerTruncationOffset({ entries: [[3, 5]], logEndOffset: 9 }, { entries: [[1, 0]], logEndOffset: 8, fallbackOffset: 0 })).toBe(5);
  });
});
