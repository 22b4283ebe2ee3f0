/**
 * The tombstones of deleted topics in etcd (docs/architecture.md, "Metadata"): `<prefix>deleted-topics/
 * <name>~<topicId>`, written in a delete's transaction, valued `{"deletedAt":<wall ms>}` (empty when
 * written by an earlier version). A broker reads them at its start to remove the directories of topics
 * deleted while it was down. The controller removes each once older than --deleted-topic-retention-ms,
 * so etcd holds the topics deleted within the retention, not every topic ever deleted. One dropped too
 * early costs disk, never data: a start moves a directory no topic or tombstone names aside.
 */
import type { Etcd3, IKeyValue } from 'etcd3';
import type { Clock } from '../common/clock.js';
import type { Logger } from '../common/logger.js';
import { etcd3Lib } from '../common/optional-deps.js';
import type { DeletedTopic } from '../partition/metadata-store.js';
import { deleteAsRead, withMetadataErrors } from './etcd-client.js';

/** Under the cluster prefix. */
export const DELETED_TOPICS = 'deleted-topics/';
/** Keys one read takes (at open, and per controller pass): a response or a pass does not grow with their count. */
export const TOMBSTONE_PAGE = 500;
/** Keys one stamping transaction takes (etcd's --max-txn-ops is 128 by default). */
const STAMP_CHUNK = 100;
/**
 * A sweep comes back at least this often though nothing is due by what it read: a tombstone written
 * since by a broker whose clock is behind the controller's may be due earlier.
 */
const MAX_SWEEP_INTERVAL_MS = 10 * 60_000;
const MIN_SWEEP_INTERVAL_MS = 1000;
const RETRY_MS = 10_000;
/** A time this far ahead of the controller's clock is not believed (the deleting broker's clock was wrong). */
const FUTURE_SLACK_MS = 60_000;

export function tombstoneValue(deletedAt: number): string {
  return JSON.stringify({ deletedAt });
}

/** When the topic was deleted, per a tombstone's value; undefined for an empty value (an earlier version's) or one not understood. */
export function tombstoneTime(value: string): number | undefined {
  if (value === '') return undefined;
  try {
    const v = JSON.parse(value) as { deletedAt?: unknown } | null;
    const at = v !== null && typeof v === 'object' ? v.deletedAt : undefined;
    return typeof at === 'number' && Number.isSafeInteger(at) && at >= 0 ? at : undefined;
  } catch {
    return undefined;
  }
}

/** The deleted topic a tombstone names (`<name>~<topicId>`, relative to DELETED_TOPICS). */
export function tombstoneTopic(relative: string): DeletedTopic | undefined {
  const at = relative.lastIndexOf('~');
  return at > 0 ? { name: relative.slice(0, at), topicId: relative.slice(at + 1) } : undefined;
}

/**
 * What the controller does with a tombstone at wall time `now`: `stamp` one without a believable time
 * (an earlier version's, or from a clock far ahead) with `now`, so it expires a retention after this
 * version first saw it; `remove` one older than the retention; else `keep` it until `expiresAt`.
 */
export type TombstoneFate = { kind: 'keep'; expiresAt: number } | { kind: 'remove' } | { kind: 'stamp' };

export function tombstoneFate(deletedAt: number | undefined, now: number, retentionMs: number): TombstoneFate {
  if (deletedAt === undefined || deletedAt > now + FUTURE_SLACK_MS) return { kind: 'stamp' };
  if (now - deletedAt >= retentionMs) return { kind: 'remove' };
  return { kind: 'keep', expiresAt: deletedAt + retentionMs };
}

/** One page of the tombstones from key `from` on (`more`: keys remain after it). */
async function readPage(client: Etcd3, root: string, from: Buffer, limit: number, operation: string): Promise<{ kvs: IKeyValue[]; more: boolean }> {
  const res = await withMetadataErrors(operation, () =>
    client
      .getAll()
      .inRange({ start: from, end: etcd3Lib().Range.prefix(root).end })
      .limit(limit)
      .exec(),
  );
  return { kvs: res.kvs, more: Boolean(res.more) && res.kvs.length > 0 };
}

/** The key right after `key`: where the next page starts. */
function after(key: Buffer): Buffer {
  return Buffer.concat([key, Buffer.from([0])]);
}

/** Every deleted topic with a tombstone under `root`, read a page at a time. */
export async function readDeletedTopics(client: Etcd3, root: string, pageSize = TOMBSTONE_PAGE): Promise<DeletedTopic[]> {
  const out: DeletedTopic[] = [];
  let from: Buffer = Buffer.from(root);
  for (;;) {
    const page = await readPage(client, root, from, pageSize, 'open');
    for (const kv of page.kvs) {
      const topic = tombstoneTopic(kv.key.toString('utf8').slice(root.length));
      if (topic) out.push(topic);
    }
    if (!page.more) return out;
    from = after(page.kvs.at(-1)!.key);
  }
}

export interface DeletedTopicSweeperOptions {
  client: Etcd3;
  /** The cluster prefix (normalized, ending in '/'). */
  prefix: string;
  /** --deleted-topic-retention-ms; 0 keeps every tombstone. */
  retentionMs: number;
  clock: Pick<Clock, 'now' | 'monotonic'>;
  logger: Logger;
  pageSize?: number;
}

/** What one pass did. */
export interface SweepStep {
  read: number;
  removed: number;
  stamped: number;
}

/**
 * The controller's removal of expired tombstones. Each pass (started by the controller's periodic work,
 * not awaited by it: a slow etcd must not hold a failover behind a sweep) reads at most one page and removes or stamps what it found there; a walk over every
 * tombstone goes on at the next pass, and once done the next walk waits for the earliest expiry it saw.
 * Every write compares the key's revision as read, so a key changed meanwhile (another controller's
 * stamp) is left for the next walk; keys carry the topic id, so a re-created topic's tombstone is
 * another key altogether. Any broker may run it: two at once only repeat each other's reads.
 */
export class DeletedTopicSweeper {
  private readonly root: string;
  /** Monotonic time of the next walk. */
  private dueAt = 0;
  /** A walk in progress: where its next page starts, and the earliest expiry (wall time) it saw. */
  private walk: { from: Buffer; nextExpiry: number } | undefined;
  private failing = false;
  private running: Promise<SweepStep> | undefined;
  private closed = false;

  constructor(private readonly o: DeletedTopicSweeperOptions) {
    this.root = `${o.prefix}${DELETED_TOPICS}`;
  }

  /**
   * One step when due (the step already running, if one is). Never rejects: a failure is logged (once
   * per streak) and tried again later.
   */
  pass(): Promise<SweepStep> {
    if (this.running) return this.running;
    if (this.closed || this.o.retentionMs === 0 || this.o.clock.monotonic() < this.dueAt) return Promise.resolve({ read: 0, removed: 0, stamped: 0 });
    this.running = this.guardedStep().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  /** No pass from now on (the broker stops: its etcd client closes under a step in flight). */
  close(): void {
    this.closed = true;
  }

  private async guardedStep(): Promise<SweepStep> {
    try {
      const step = await this.step();
      if (this.failing) this.o.logger.info('expiring the tombstones of deleted topics works again');
      this.failing = false;
      return step;
    } catch (err) {
      if (this.closed) return { read: 0, removed: 0, stamped: 0 };
      if (!this.failing) this.o.logger.warn({ err }, 'expiring the tombstones of deleted topics failed; retrying');
      this.failing = true;
      this.walk = undefined;
      this.dueAt = this.o.clock.monotonic() + RETRY_MS;
      return { read: 0, removed: 0, stamped: 0 };
    }
  }

  private async step(): Promise<SweepStep> {
    const { client, retentionMs } = this.o;
    const now = this.o.clock.now();
    // A tombstone written after this walk began expires a retention after it at the earliest.
    const walk = (this.walk ??= { from: Buffer.from(this.root), nextExpiry: now + retentionMs });
    const page = await readPage(client, this.root, walk.from, this.o.pageSize ?? TOMBSTONE_PAGE, 'expire_deleted_topics');
    const remove: IKeyValue[] = [];
    const stamp: IKeyValue[] = [];
    for (const kv of page.kvs) {
      const fate = tombstoneFate(tombstoneTime(kv.value.toString('utf8')), now, retentionMs);
      if (fate.kind === 'remove') remove.push(kv);
      else if (fate.kind === 'stamp') stamp.push(kv);
      else walk.nextExpiry = Math.min(walk.nextExpiry, fate.expiresAt);
    }
    let removed = 0;
    const allRemoved = await deleteAsRead(client, 'expire_deleted_topics', remove, () => removed++);
    const stamped = await this.stamp(stamp, now);
    // A key changed since it was read: the next walk looks at it again, soon.
    if (!allRemoved || stamped < stamp.length) walk.nextExpiry = now;
    if (page.more) {
      walk.from = after(page.kvs.at(-1)!.key);
    } else {
      this.walk = undefined;
      const wait = Math.min(Math.max(walk.nextExpiry - now, MIN_SWEEP_INTERVAL_MS), MAX_SWEEP_INTERVAL_MS);
      this.dueAt = this.o.clock.monotonic() + wait;
    }
    if (removed > 0 || stamped > 0) this.o.logger.info({ removed, stamped, retentionMs }, 'tombstones of deleted topics expired');
    return { read: page.kvs.length, removed, stamped };
  }

  /** Writes `now` into tombstones without a believable time, each only as read; returns how many were. */
  private async stamp(kvs: IKeyValue[], now: number): Promise<number> {
    let done = 0;
    for (let start = 0; start < kvs.length; start += STAMP_CHUNK) {
      const chunk = kvs.slice(start, start + STAMP_CHUNK);
      const res = await withMetadataErrors('expire_deleted_topics', () => {
        // Mod == as read: a key removed meanwhile (its revision 0 now) is not written back.
        let txn = this.o.client.if(chunk[0]!.key, 'Mod', '==', Number(chunk[0]!.mod_revision));
        for (const kv of chunk.slice(1)) txn = txn.and(kv.key, 'Mod', '==', Number(kv.mod_revision));
        return txn.then(...chunk.map((kv) => this.o.client.put(kv.key).value(tombstoneValue(now)))).commit();
      });
      if (!res.succeeded) return done;
      done += chunk.length;
    }
    return done;
  }
}
