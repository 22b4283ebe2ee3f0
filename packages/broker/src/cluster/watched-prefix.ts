import { EventEmitter } from 'node:events';
import type { Etcd3, IKeyValue, Watcher } from 'etcd3';

export interface Versioned<T> {
  value: T;
  /** etcd revision of the write that produced this value: the token for compare-and-set. */
  modRevision: number;
  /** etcd revision at which the key was (last) created. */
  createRevision: number;
  /** Lease id the key is bound to, '0' for none. */
  lease: string;
}

const RETRY_MS = 500;
const CANCEL_TIMEOUT_MS = 1_000;

/**
 * An in-memory copy of every key under one etcd prefix, kept current by a watch, so reads never wait on
 * etcd and keep serving the last known state while it is unreachable.
 *
 * Events on `events` (not for the initial load): 'put' (key, entry, previous | undefined) and
 * 'delete' (key, previous). Keys are relative to the prefix.
 *
 * Changes reach this copy three ways (the owner's own writes, the watch, full re-reads after a watch
 * reconnect), in any order; each is applied only if it is newer than what the key already reflects, so a
 * late or replayed change never undoes a newer one.
 */
export class WatchedPrefix<T> {
  readonly events = new EventEmitter();
  private readonly entries = new Map<string, Versioned<T>>();
  /** Revision of the delete that removed a key, until a full read makes it redundant. */
  private readonly tombstones = new Map<string, number>();
  /** Everything at or below this revision is reflected (the last full read). */
  private floor = 0;
  private watcher: Watcher | undefined;
  private closed = false;
  private stale = false;
  private readonly timers = new Set<NodeJS.Timeout>();
  /** Bumped whenever a key is added or removed (not when a value changes): see keyVersion. */
  private keyChanges = 0;

  constructor(
    private readonly client: Etcd3,
    readonly prefix: string,
    /** Returns undefined for a value it cannot read; such a key is treated as absent. */
    private readonly parse: (text: string, key: string) => T | undefined,
  ) {}

  /** Reads every key (no events) and starts the watch right after that read's revision. */
  async start(): Promise<void> {
    const revision = await this.load(false);
    this.attach(revision + 1);
  }

  get(key: string): Versioned<T> | undefined {
    return this.entries.get(key);
  }

  keys(): string[] {
    return [...this.entries.keys()];
  }

  values(): Array<[string, Versioned<T>]> {
    return [...this.entries.entries()];
  }

  /** The entries without a copy: for a loop that does not await (the cache may change between turns). */
  each(): IterableIterator<[string, Versioned<T>]> {
    return this.entries.entries();
  }

  /** Changes whenever the set of keys changes, and only then: a cache of the keys is current while it holds. */
  get keyVersion(): number {
    return this.keyChanges;
  }

  /** The keys without a copy (see each). */
  eachKey(): IterableIterator<string> {
    return this.entries.keys();
  }

  /** Applies a value the owner wrote or read itself (read-your-writes without waiting for the watch). */
  applyKv(key: string, kv: IKeyValue, emit = true): void {
    const value = this.parse(kv.value.toString('utf8'), key);
    const modRevision = Number(kv.mod_revision);
    if (value === undefined) {
      this.applyDelete(key, modRevision, emit);
      return;
    }
    if (modRevision <= this.revisionOf(key)) return;
    const previous = this.entries.get(key);
    const entry: Versioned<T> = { value, modRevision, createRevision: Number(kv.create_revision), lease: String(kv.lease) };
    if (previous === undefined) this.keyChanges++;
    this.entries.set(key, entry);
    this.tombstones.delete(key);
    if (emit) this.events.emit('put', key, entry, previous);
  }

  applyPut(key: string, value: T, modRevision: number, createRevision: number, lease = '0'): void {
    if (modRevision <= this.revisionOf(key)) return;
    const previous = this.entries.get(key);
    const entry: Versioned<T> = { value, modRevision, createRevision, lease };
    if (previous === undefined) this.keyChanges++;
    this.entries.set(key, entry);
    this.tombstones.delete(key);
    this.events.emit('put', key, entry, previous);
  }

  applyDelete(key: string, revision: number, emit = true): void {
    if (revision <= this.revisionOf(key)) return;
    const previous = this.entries.get(key);
    if (previous !== undefined) this.keyChanges++;
    this.entries.delete(key);
    this.tombstones.set(key, revision);
    if (previous && emit) this.events.emit('delete', key, previous);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    await this.detach();
  }

  private revisionOf(key: string): number {
    return Math.max(this.floor, this.entries.get(key)?.modRevision ?? this.tombstones.get(key) ?? 0);
  }

  private relative(key: Buffer): string {
    return key.toString('utf8').slice(this.prefix.length);
  }

  /** One full read; absent keys become deletes at the read's revision. Returns that revision. */
  private async load(emit: boolean): Promise<number> {
    const res = await this.client.getAll().prefix(this.prefix).exec();
    const revision = Number(res.header.revision);
    const present = new Set<string>();
    for (const kv of res.kvs) {
      const key = this.relative(kv.key);
      present.add(key);
      this.applyKv(key, kv, emit);
    }
    for (const key of this.keys()) if (!present.has(key)) this.applyDelete(key, revision, emit);
    this.floor = Math.max(this.floor, revision);
    for (const [key, rev] of this.tombstones) if (rev <= this.floor) this.tombstones.delete(key);
    return revision;
  }

  /** watcher() rather than create(): it does not wait for etcd, and events flow from `fromRevision` once connected. */
  private attach(fromRevision: number): void {
    const w = this.client.watch().prefix(this.prefix).startRevision(String(fromRevision)).watcher();
    this.watcher = w;
    w.on('put', (kv) => this.applyKv(this.relative(kv.key), kv));
    w.on('delete', (kv) => this.applyDelete(this.relative(kv.key), Number(kv.mod_revision)));
    // The client resumes a reconnected watch from the last response header, which can skip events that
    // were not delivered yet; a full read after the reconnect closes that gap.
    w.on('disconnected', () => {
      this.stale = true;
    });
    w.on('connected', () => {
      if (!this.stale) return;
      this.stale = false;
      this.retry(() => this.load(true));
    });
    // etcd cancelled the watch (e.g. its start revision was compacted): read everything and watch anew.
    w.on('error', () => {
      if (this.watcher !== w) return;
      this.watcher = undefined;
      void w.cancel().catch(() => {});
      this.retry(async () => {
        const revision = await this.load(true);
        if (!this.closed) this.attach(revision + 1);
      });
    });
  }

  private retry(fn: () => Promise<unknown>): void {
    if (this.closed) return;
    fn().catch(() => {
      const t = setTimeout(() => {
        this.timers.delete(t);
        this.retry(fn);
      }, RETRY_MS);
      this.timers.add(t);
    });
  }

  private async detach(): Promise<void> {
    const w = this.watcher;
    this.watcher = undefined;
    if (!w) return;
    // Cancelling waits for etcd's answer; a frozen etcd must not hang close().
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([w.cancel().catch(() => {}), new Promise((r) => (timer = setTimeout(r, CANCEL_TIMEOUT_MS)))]);
    clearTimeout(timer);
  }
}
