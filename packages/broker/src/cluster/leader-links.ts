/**
 * Follower side of replication's connections (docs/architecture.md, "Cluster mode"): per leader broker, a
 * few connections shared by every partition this broker follows there, and one `REPLICA_WAIT` long poll
 * that says which parked partitions have news (fetch-watch.ts is the leader's half). A partition's fetch
 * loop asks with `park=true` and no wait; when the answer is empty it parks here until its leader marks it.
 * One connection per followed partition, as before, put a broker with 10,000 partitions over 3 brokers at
 * several thousand sockets (bench scale-cluster).
 */
import { parseAddress } from 'tributary-protocol/address.js';
import { parseLine } from 'tributary-protocol/command.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { failpointMs } from '../common/failpoints.js';
import type { Logger } from '../common/logger.js';
import type { BrokerRegistry } from './broker-registry.js';
import { parseMarked } from './fetch-watch.js';

/** Connections per leader shared by the fetches (the broker answers one connection's requests in order). */
const FETCH_CONNECTIONS = 2;
/**
 * A parked partition fetches again after this long even without a mark: a safety net only (marks are not
 * lost: a REPLICA_WAIT connection that fails wakes every parked partition of its leader). Fault tests raise
 * it (`replica.park_fallback@ms`) to show that a fetch came from a mark.
 */
const PARK_FALLBACK_MS = failpointMs('replica.park_fallback') ?? 30_000;
/** At most one warning per leader this often about the fetches that keep failing (LeaderLink.fetchFailed). */
const FETCH_WARN_EVERY_MS = 10_000;
/**
 * A failed connect is every fetch loop's answer for this long (LeaderLink.connection): while a leader is
 * down or unregistered, thousands of loops retrying each made a connect attempt and an error of their own.
 */
export const CONNECT_RETRY_MS = 250;

export interface LeaderLinkDeps {
  brokerId: number;
  registry: BrokerRegistry;
  logger: Logger;
  /** How long one REPLICA_WAIT may wait at the leader. */
  waitMs: number;
  /** `leaderFrameBytes`: the leader's --max-frame-bytes, as it registered it (absent from earlier versions). */
  connect: (host: string, port: number, signal: AbortSignal, leaderFrameBytes?: number) => Promise<Connection>;
  /** The clock of the warnings' pacing and of the connect retry (monotonic performance.now unless a test drives it). */
  now?: () => number;
}

export class LeaderLinks {
  private readonly links = new Map<number, LeaderLink>();

  constructor(private readonly deps: LeaderLinkDeps) {}

  /** The link to `leaderId` for the fetch loop of `topic`/`partition`, held until release(). */
  acquire(leaderId: number, topic: string, partition: number): LeaderLink {
    let l = this.links.get(leaderId);
    if (!l) {
      l = new LeaderLink(leaderId, this.deps, () => this.links.delete(leaderId));
      this.links.set(leaderId, l);
    }
    l.hold(`${topic}\u0000${partition}`);
    return l;
  }

  closeAll(): void {
    for (const l of [...this.links.values()]) l.close();
  }
}

export class LeaderLink {
  private refs = 0;
  /** Fetch loops holding the link, per partition: a loop ending while its successor starts overlaps it. */
  private readonly users = new Map<string, number>();
  private readonly ac = new AbortController();
  /** The shared fetch connections: each a connection being made or made (`c` once it is). */
  private readonly conns: Array<{ p: Promise<Connection>; c?: Connection } | null> = new Array(FETCH_CONNECTIONS).fill(null);
  private next = 0;
  private readonly parked = new Map<string, () => void>();
  /** Marks that arrived while their partition was not parked (its fetch was on the way): honoured at park(). */
  private readonly early = new Set<string>();
  private watching = false;
  /** Fetch failures since the last warning, and when that was. */
  private fetchFailures = 0;
  private fetchWarnedAt = Number.NEGATIVE_INFINITY;
  /** The last connect that failed, shared by the connection() calls of the next CONNECT_RETRY_MS. */
  private connectFailed: { p: Promise<Connection>; at: number } | null = null;

  constructor(
    readonly leaderId: number,
    private readonly deps: LeaderLinkDeps,
    private readonly onClosed: () => void,
  ) {}

  /**
   * One of the shared connections (round-robin), connected on first use or after a failure. A connect that
   * failed less than CONNECT_RETRY_MS ago is the answer without a new attempt: a broker that followed
   * 3,300 partitions on a restarting leader spent half of a 1.5 s stall making their connect errors
   * (bench scale-cluster, docs/operations.md).
   */
  connection(): Promise<Connection> {
    const failed = this.connectFailed;
    if (failed && this.now() - failed.at < CONNECT_RETRY_MS) return failed.p;
    const i = this.next;
    this.next = (this.next + 1) % FETCH_CONNECTIONS;
    const cur = this.conns[i];
    if (cur && !cur.c?.closed) return cur.p;
    const slot: { p: Promise<Connection>; c?: Connection } = { p: this.connect() };
    this.conns[i] = slot;
    slot.p.then(
      (c) => {
        slot.c = c;
        this.connectFailed = null;
      },
      () => {
        if (this.conns[i] === slot) this.conns[i] = null;
        this.connectFailed = { p: slot.p, at: this.now() };
      },
    );
    return slot.p;
  }

  private now(): number {
    return this.deps.now?.() ?? performance.now();
  }

  /**
   * A partition's fetch from this leader failed for the `failures`th time in a row. A leader that died or
   * moved is routine, so nothing is said until a partition keeps failing, and then one warning per leader
   * every 10 s, counting the failures since the last. One warning per partition, each with its error's
   * stack and written synchronously, held a broker's event loop for 1.3 s when the 3,300 partitions it
   * followed on a restarting broker reached their tenth failure together (bench scale-cluster).
   */
  fetchFailed(err: unknown, topic: string, partition: number, failures: number): void {
    this.fetchFailures++;
    const now = this.now();
    if (failures < 10 || now - this.fetchWarnedAt < FETCH_WARN_EVERY_MS) return;
    this.fetchWarnedAt = now;
    this.deps.logger.warn({ err, leader: this.leaderId, topic, partition, failures, fetch_failures: this.fetchFailures }, 'replica fetch failed; retrying');
    this.fetchFailures = 0;
  }

  /** A request on `conn` failed: it is closed and replaced on next use (other partitions' requests on it fail too). */
  failed(conn: Connection): void {
    for (let i = 0; i < this.conns.length; i++) if (this.conns[i]?.c === conn) this.conns[i] = null;
    conn.close().catch(() => {});
  }

  /**
   * Waits until the leader marks the partition (REPLICA_WAIT), `signal` aborts or the fallback time
   * passes. A mark that came while the partition's fetch was on its way ends the wait at once.
   */
  async park(topic: string, partition: number, signal: AbortSignal): Promise<void> {
    const k = `${topic}\u0000${partition}`;
    if (this.early.delete(k) || signal.aborted) return;
    this.startWatch();
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        if (this.parked.get(k) === done) this.parked.delete(k);
        resolve();
      };
      const timer = setTimeout(done, PARK_FALLBACK_MS);
      signal.addEventListener('abort', done, { once: true });
      this.parked.get(k)?.();
      this.parked.set(k, done);
    });
  }

  hold(k: string): void {
    this.refs++;
    this.users.set(k, (this.users.get(k) ?? 0) + 1);
  }

  /**
   * A partition loop stopped using this link. Once no loop of the partition holds it, a mark left for the
   * partition would never be taken: it goes (a successor loop still holding it may park on it).
   */
  release(topic: string, partition: number): void {
    const k = `${topic}\u0000${partition}`;
    const n = (this.users.get(k) ?? 1) - 1;
    if (n > 0) this.users.set(k, n);
    else {
      this.users.delete(k);
      this.early.delete(k);
    }
    if (--this.refs <= 0) this.close();
  }

  /** Marks kept for partitions not parked yet (for tests: released loops leave none). */
  get pendingMarks(): number {
    return this.early.size;
  }

  close(): void {
    if (this.ac.signal.aborted) return;
    this.ac.abort();
    this.onClosed();
    for (const slot of this.conns) slot?.p.then((c) => c.close().catch(() => {}), () => {});
    this.conns.fill(null);
    for (const wake of [...this.parked.values()]) wake();
  }

  private async connect(): Promise<Connection> {
    const leader = this.deps.registry.get(this.leaderId);
    if (!leader) throw new TributaryError('NOT_LEADER', { reason: `leader ${this.leaderId} is not registered` });
    const { host, port } = parseAddress(leader.advertisedAddress);
    // The answers carry the leader's appends whole: up to its frame size, which may be larger than ours.
    const frame = leader.maxFrameBytes;
    return this.deps.connect(host, port, this.ac.signal, Number.isSafeInteger(frame) && frame! > 0 ? frame : undefined);
  }

  private wake(k: string): void {
    const wake = this.parked.get(k);
    if (wake) wake();
    else this.early.add(k);
  }

  private wakeAll(): void {
    for (const wake of [...this.parked.values()]) wake();
  }

  /** One REPLICA_WAIT at a time on a connection of its own, for as long as the link lives. */
  private startWatch(): void {
    if (this.watching || this.ac.signal.aborted) return;
    this.watching = true;
    void this.watch().finally(() => {
      this.watching = false;
    });
  }

  private async watch(): Promise<void> {
    const signal = this.ac.signal;
    let conn: Connection | null = null;
    let failures = 0;
    const onAbort = () => conn?.close().catch(() => {});
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      while (!signal.aborted) {
        try {
          if (!conn || conn.closed) {
            conn = await this.connect();
            // Marks sent on a connection that failed may be lost: every parked partition asks once.
            this.wakeAll();
          }
          const reply = await conn.command('REPLICA_WAIT', { replica: this.deps.brokerId, wait_ms: this.deps.waitMs });
          failures = 0;
          for (const m of parseMarked(parseLine(reply).params.get('partitions'))) this.wake(`${m.topic}\u0000${m.partition}`);
        } catch (err) {
          if (signal.aborted) break;
          failures++;
          conn?.close().catch(() => {});
          conn = null;
          this.wakeAll();
          if (failures === 10 || failures % 100 === 0) this.deps.logger.warn({ err, leader: this.leaderId }, 'REPLICA_WAIT failed; retrying');
          await new Promise((r) => setTimeout(r, Math.min(1000, 50 * failures)));
        }
      }
    } finally {
      signal.removeEventListener('abort', onAbort);
      conn?.close().catch(() => {});
    }
  }
}
