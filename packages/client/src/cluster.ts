import type tls from 'node:tls';
import { type FieldValue, parseLine } from 'tributary-protocol/command.js';
import { type BrokerAddress, formatAddress, parseAddress } from 'tributary-protocol/address.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { untilAborted } from './abort.js';
import { type AuthOptions, Connection } from 'tributary-protocol/connection.js';
import { isRetriable, notCountedByRetry, type RetryOptions, retry } from './retry.js';
import { checkStallTimeout, DEFAULT_BOOTSTRAP_TIMEOUT_MS, DEFAULT_STALL_TIMEOUT_MS } from './connection-options.js';

export { type BrokerAddress, formatAddress, parseAddress } from 'tributary-protocol/address.js';
export { checkConnectionOptions, checkStallTimeout, DEFAULT_BOOTSTRAP_TIMEOUT_MS, DEFAULT_STALL_TIMEOUT_MS } from './connection-options.js';

export interface ClusterOptions {
  /** Bootstrap brokers, `host:port`. */
  brokers: string[];
  connectTimeoutMs?: number;
  retry?: RetryOptions;
  /** TLS for every broker connection. */
  tls?: tls.ConnectionOptions;
  /** Credentials sent with AUTH on every broker connection. */
  auth?: AuthOptions;
  /** See DEFAULT_STALL_TIMEOUT_MS. */
  stallTimeoutMs?: number;
  /** See DEFAULT_BOOTSTRAP_TIMEOUT_MS. */
  bootstrapTimeoutMs?: number;
  /** Broker connections coming and going (the clients' `connect` / `disconnect` events). */
  onConnectionEvent?: (e: ConnectionEvent) => void;
}

/** `connect`: the first connection to a broker; `disconnect`: the last one closed, `error` why (none when the client closed it). */
export type ConnectionEvent = { type: 'connect'; broker: string } | { type: 'disconnect'; broker: string; error?: Error };

/** The connection events every client emits (Consumer, Producer, Admin). */
export interface ConnectionEvents {
  connect: Extract<ConnectionEvent, { type: 'connect' }>;
  disconnect: Extract<ConnectionEvent, { type: 'disconnect' }>;
}

/** What every client passes on to its Cluster, and where its connect / disconnect events go. */
export function clientCluster(
  o: Pick<ClusterOptions, 'brokers' | 'retry' | 'tls' | 'auth' | 'connectTimeoutMs' | 'bootstrapTimeoutMs' | 'stallTimeoutMs'>,
  onConnectionEvent: (e: ConnectionEvent) => void,
): Cluster {
  return new Cluster({
    brokers: o.brokers,
    retry: o.retry,
    tls: o.tls,
    auth: o.auth,
    connectTimeoutMs: o.connectTimeoutMs,
    bootstrapTimeoutMs: o.bootstrapTimeoutMs,
    stallTimeoutMs: o.stallTimeoutMs,
    onConnectionEvent,
  });
}

/** METADATA's leader entry for a partition without a live leader (a cluster mid-failover). */
const NO_LEADER = '-';

export interface TopicMetadata {
  topic: string;
  partitions: number;
  leaders: string[];
  epochs: number[];
}

/**
 * Routing (docs/sdk.md, "Routing"): FIND_COORDINATOR over the bootstrap brokers, group commands to the
 * coordinator (NOT_COORDINATOR → use host/port from the error or rediscover), data commands to partition
 * leaders from METADATA (NOT_LEADER → update the leader cache). One shared connection per broker serves
 * short requests; long polls get their own connections from `dedicated()`; leader lookups and liveness
 * pings go over a control connection per broker, so they never wait behind other replies.
 */
export class Cluster {
  readonly bootstrap: BrokerAddress[];
  readonly stallTimeoutMs: number;
  private readonly shared = new Map<string, Promise<Connection>>();
  private readonly control = new Map<string, Promise<Connection>>();
  private readonly dedicatedConns = new Set<Connection>();
  private readonly coordinators = new Map<string, string>();
  private readonly metadataCache = new Map<string, TopicMetadata>();
  /** Brokers learned from METADATA, FIND_COORDINATOR and redirects: lookups may ask them too. */
  private readonly known = new Set<string>();
  private nextBootstrap = 0;
  /** The broker that answered the last lookup: asked first next time. */
  private lookupBroker: string | undefined;
  /** When a partition's leader lookup last refused an unresponsive leader (leaderFor). */
  private readonly rechecked = new Map<string, number>();
  /**
   * Brokers that recently left a request unanswered, and since when: asked last until they answer again.
   * This class's times are performance.now(): a wall-clock step (NTP) must not stretch or cut its bounds.
   */
  private readonly unresponsiveSince = new Map<string, number>();
  private closed = false;
  /** Whether any broker ever completed a handshake: until then failures count against the bootstrap timeout. */
  private reachedOnce = false;
  private firstAttemptAt: number | undefined;
  /** Why each address failed, until one answered (for brokers_unreachable). */
  private readonly bootstrapFailures = new Map<string, Error>();
  /** The signal of the caller that started a pooled dial (pooled()). */
  private readonly dialSignals = new WeakMap<Promise<Connection>, AbortSignal>();
  /** Pooled dials that succeeded, and their connection (pooled()'s fast path). */
  private readonly dialed = new WeakMap<Promise<Connection>, Connection>();
  /** Open connections per broker, for the connect / disconnect events. */
  private readonly openPerBroker = new Map<string, number>();

  constructor(private readonly opts: ClusterOptions) {
    if (!Array.isArray(opts.brokers) || opts.brokers.length === 0) throw new TributaryError('invalid_config', { option: 'brokers' }, 'brokers: at least one bootstrap broker is required');
    this.bootstrap = opts.brokers.map(parseAddress);
    const bad = checkStallTimeout(opts.stallTimeoutMs);
    if (bad) throw new TributaryError('invalid_config', { option: 'stallTimeoutMs', reason: bad }, `stallTimeoutMs: ${bad}`);
    this.stallTimeoutMs = opts.stallTimeoutMs ?? DEFAULT_STALL_TIMEOUT_MS;
  }

  get retryOptions(): RetryOptions {
    return this.opts.retry ?? {};
  }

  private assertOpen(): void {
    if (this.closed) throw new TributaryError('client_closed');
  }

  private open(address: string, signal: AbortSignal | undefined, control: boolean, stallTimeoutMs = this.stallTimeoutMs): Promise<Connection> {
    const { host, port } = parseAddress(address);
    this.firstAttemptAt ??= performance.now();
    return this.connectTo(address, host, port, signal, control, stallTimeoutMs).then(
      (c) => {
        // It answered a handshake: responsive again.
        this.unresponsiveSince.delete(address);
        this.reachedOnce = true;
        this.bootstrapFailures.clear();
        return c;
      },
      (err: unknown) => {
        throw this.connectError(address, err, signal);
      },
    );
  }

  /**
   * A failed connect before any broker ever answered counts against the bootstrap timeout; past it the
   * failure becomes brokers_unreachable, which no retry loop repeats (a consumer pointed at the wrong
   * address must fail, not hang); until then no retry loop counts it (notCountedByRetry).
   */
  private connectError(address: string, err: unknown, signal: AbortSignal | undefined): unknown {
    if (this.reachedOnce || signal?.aborted || !isRetriable(err)) return err;
    this.bootstrapFailures.set(address, err as Error);
    const elapsed = Math.round(performance.now() - this.firstAttemptAt!);
    const limit = this.opts.bootstrapTimeoutMs ?? DEFAULT_BOOTSTRAP_TIMEOUT_MS;
    if (elapsed < limit) return notCountedByRetry(err as Error);
    const tried = [...this.bootstrapFailures.keys()];
    return new TributaryError(
      'brokers_unreachable',
      { brokers: tried.join(','), elapsedMs: elapsed, bootstrapTimeoutMs: limit },
      `no broker reachable after ${elapsed} ms (bootstrapTimeoutMs ${limit}): ${[...this.bootstrapFailures.values()].map((e) => e.message).join('; ')}`,
    );
  }

  private connected(address: string): void {
    const n = this.openPerBroker.get(address) ?? 0;
    this.openPerBroker.set(address, n + 1);
    if (n === 0) this.opts.onConnectionEvent?.({ type: 'connect', broker: address });
  }

  private disconnected(address: string, error: Error | undefined): void {
    const n = (this.openPerBroker.get(address) ?? 1) - 1;
    if (n > 0) this.openPerBroker.set(address, n);
    else {
      this.openPerBroker.delete(address);
      this.opts.onConnectionEvent?.(error ? { type: 'disconnect', broker: address, error } : { type: 'disconnect', broker: address });
    }
  }

  private connectTo(address: string, host: string, port: number, signal: AbortSignal | undefined, control: boolean, stallTimeoutMs: number): Promise<Connection> {
    // Only a connection that completed its handshake counts for the connect / disconnect events.
    let counted = false;
    return Connection.connect({
      host,
      port,
      connectTimeoutMs: this.opts.connectTimeoutMs,
      signal,
      tls: this.opts.tls,
      auth: this.opts.auth,
      stallTimeoutMs,
      // A control connection carries only immediate answers: its own silence is the verdict.
      probe: control ? undefined : () => this.ping(address),
      onStall: () => this.gaveUpOn(address),
      onClose: (err) => {
        if (counted) this.disconnected(address, err);
      },
    }).then((c) => {
      if (!c.closed) {
        counted = true;
        this.connected(address);
      }
      return c;
    });
  }

  /** The broker left a request unanswered past the bound: lookups ask it last, its control connection is dropped. */
  private gaveUpOn(address: string): void {
    this.unresponsiveSince.set(address, performance.now());
    if (this.lookupBroker === address) this.lookupBroker = undefined;
    void this.control
      .get(address)
      ?.then((c) => c.abandon(new TributaryError('connection_lost', { reason: 'broker not answering', broker: address })))
      .catch(() => {});
  }

  /**
   * Whether the broker left a request unanswered lately: within two stall bounds, after which the
   * cluster has had time to move its partitions (or it was only slow), and a stale mark from an earlier
   * outage must not cost a broker that now leads a re-check before it is dialled.
   */
  private unresponsive(address: string): boolean {
    const since = this.unresponsiveSince.get(address);
    if (since === undefined) return false;
    if (performance.now() - since <= 2 * this.stallTimeoutMs) return true;
    this.unresponsiveSince.delete(address);
    return false;
  }

  /** The pooled connection of `pool` to one broker, opened on first use and replaced when it fails. */
  private async pooled(pool: Map<string, Promise<Connection>>, address: string, signal: AbortSignal | undefined): Promise<Connection> {
    this.assertOpen();
    const cached = pool.get(address);
    // Already open: no wait, so no abort listener (EventTarget listeners cost microseconds each; the
    // producer asks for its leader's connection at every batch it sends).
    const open = cached && this.dialed.get(cached);
    if (open && !open.closed && !signal?.aborted) return open;
    if (cached) {
      // Another caller's dial: this caller's own signal still ends its wait (with its abort reason).
      const got = await untilAborted(
        cached.then(
          (conn) => ({ conn }),
          (err: unknown) => ({ err }),
        ),
        signal,
      );
      if ('conn' in got && !got.conn.closed) return got.conn;
      if (pool.get(address) === cached) pool.delete(address);
      // The dial this caller waited for failed, so this attempt fails with it: the caller's retry looks
      // the route up again (a lost connection drops the cached leaders) instead of dialling the same,
      // maybe unreachable, broker for another handshake bound. Unless its own caller gave the dial up.
      if ('err' in got && !this.dialSignals.get(cached)?.aborted) throw got.err;
    }
    const p = this.open(address, signal, pool === this.control);
    pool.set(address, p);
    if (signal) this.dialSignals.set(p, signal);
    p.then(
      (conn) => {
        this.dialed.set(p, conn);
        // Opened after close(): nobody else will close it.
        if (this.closed) void conn.close();
      },
      () => {
        if (pool.get(address) === p) pool.delete(address);
      },
    );
    return p;
  }

  /** The shared connection to one broker, opened on first use and replaced when it fails. */
  connection(address: string, signal?: AbortSignal): Promise<Connection> {
    return this.pooled(this.shared, address, signal);
  }

  /**
   * Is the broker alive? Asked by a connection that has heard nothing for a while: any answer on the
   * control connection (even an ERROR) means the silence elsewhere is the broker's own wait.
   */
  private async ping(address: string): Promise<void> {
    const conn = await this.pooled(this.control, address, undefined);
    await conn.request('PROTOCOL_INFO');
    this.unresponsiveSince.delete(address);
  }

  /**
   * A connection of its own, for long polls and streams; closed with the cluster. `stallTimeoutMs`: a
   * tighter stall bound than the cluster's, for a caller that must hear back sooner (heartbeats).
   */
  async dedicated(address: string, signal?: AbortSignal, opts: { stallTimeoutMs?: number } = {}): Promise<Connection> {
    this.assertOpen();
    const conn = await this.open(address, signal, false, Math.min(this.stallTimeoutMs, opts.stallTimeoutMs ?? this.stallTimeoutMs));
    if (this.closed) {
      await conn.close();
      throw new TributaryError('client_closed');
    }
    this.dedicatedConns.add(conn);
    return conn;
  }

  async release(conn: Connection): Promise<void> {
    this.dedicatedConns.delete(conn);
    await conn.close();
  }

  /** Any reachable bootstrap broker, trying each in turn (failover). */
  async anyBroker(signal?: AbortSignal): Promise<{ address: string; conn: Connection }> {
    let last: unknown;
    for (let i = 0; i < this.bootstrap.length; i++) {
      const addr = formatAddress(this.bootstrap[(this.nextBootstrap + i) % this.bootstrap.length]!);
      try {
        const conn = await this.connection(addr, signal);
        this.nextBootstrap = (this.nextBootstrap + i) % this.bootstrap.length;
        return { address: addr, conn };
      } catch (err) {
        // The caller gave up (a dial is aborted with its reason): that is the answer, not a reason to
        // try the next broker or to report the brokers unreachable.
        if (signal?.aborted) throw signal.reason;
        last = err;
      }
    }
    this.nextBootstrap = (this.nextBootstrap + 1) % this.bootstrap.length;
    throw last instanceof TributaryError ? last : new TributaryError('connection_lost', { reason: 'no bootstrap broker reachable' });
  }

  /** A command to any broker, retried over the bootstrap list. */
  anyCommand(name: string, fields: Record<string, FieldValue | undefined> = {}, signal?: AbortSignal): Promise<string> {
    return this.anyRequest((conn) => conn.command(name, fields), signal);
  }

  /** Any request to any broker (`send` puts it on the connection given), with anyCommand's failover and retries. */
  async anyRequest<T>(send: (conn: Connection) => Promise<T>, signal?: AbortSignal): Promise<T> {
    return retry(
      async () => {
        const { address, conn } = await this.anyBroker(signal);
        try {
          return await untilAborted(send(conn), signal);
        } catch (err) {
          // A broker whose connection failed is tried last next time.
          if (err instanceof TributaryError && (err.code === 'connection_lost' || err.code === 'request_timeout') && formatAddress(this.bootstrap[this.nextBootstrap]!) === address) {
            this.nextBootstrap = (this.nextBootstrap + 1) % this.bootstrap.length;
          }
          throw err;
        }
      },
      { ...this.retryOptions, signal },
    );
  }

  /**
   * A leader lookup (METADATA, FIND_COORDINATOR) that any broker can answer. It goes over control
   * connections, never behind produce or other traffic; a broker that does not answer within the stall
   * bound (or fails retriably) is skipped for the next bootstrap or known broker at once, and only when
   * every one failed does the retry module back off and start over.
   */
  async lookup(name: string, fields: Record<string, FieldValue | undefined>, signal?: AbortSignal): Promise<string> {
    return retry(
      async () => {
        const candidates = this.lookupCandidates();
        let last: unknown;
        for (const address of candidates) {
          try {
            const reply = await this.lookupAt(address, name, fields, signal);
            this.lookupBroker = address;
            this.unresponsiveSince.delete(address);
            return reply;
          } catch (err) {
            if (signal?.aborted || !isRetriable(err)) throw err;
            last = err;
          }
        }
        this.lookupBroker = undefined;
        throw last instanceof TributaryError ? last : new TributaryError('connection_lost', { reason: 'no broker answered the lookup' });
      },
      { ...this.retryOptions, signal },
    );
  }

  /** Bootstrap brokers, then learned ones; the last broker that answered first, unresponsive ones last. */
  private lookupCandidates(): string[] {
    const all = [...new Set([...this.bootstrap.map(formatAddress), ...this.known])];
    const i = this.lookupBroker === undefined ? -1 : all.indexOf(this.lookupBroker);
    const order = i <= 0 ? all : [...all.slice(i), ...all.slice(0, i)];
    return [...order.filter((a) => !this.unresponsive(a)), ...order.filter((a) => this.unresponsive(a))];
  }

  private async lookupAt(address: string, name: string, fields: Record<string, FieldValue | undefined>, signal: AbortSignal | undefined): Promise<string> {
    // Not bounded here: a dial fails by its own bounds, as a connect counted against bootstrapTimeoutMs (docs/sdk.md, "Connecting").
    const conn = await untilAborted(this.pooled(this.control, address, undefined), signal).catch((err: unknown) => {
      // unanswered, as a lookup can be: asked last
      if (!signal?.aborted && err instanceof TributaryError && (err.fields.cause === 'no_handshake' || err.fields.cause === 'timeout')) this.gaveUpOn(address);
      throw err;
    });
    const bound = this.stallTimeoutMs;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        reject(new TributaryError('request_timeout', { reason: 'lookup not answered', broker: address, timeoutMs: bound }, `${name} to ${address}: no answer within ${bound} ms`));
        // Its late reply would hold back the next lookups on that connection: drop it.
        conn.abandon(new TributaryError('connection_lost', { reason: 'lookup not answered', broker: address }));
        this.gaveUpOn(address);
      }, bound);
    });
    try {
      return await untilAborted(Promise.race([conn.command(name, fields), timeout]), signal);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Remembers brokers named by the cluster, so a lookup has somewhere to go when the bootstrap list does not answer. */
  private learn(address: string | undefined): void {
    if (!address || address === NO_LEADER || this.known.has(address)) return;
    try {
      parseAddress(address);
    } catch {
      return;
    }
    this.known.add(address);
  }

  // ---- coordinators ----

  async findCoordinator(key: { group: string } | { transactional_id: string }, signal?: AbortSignal): Promise<string> {
    const reply = await this.lookup('FIND_COORDINATOR', key, signal);
    const p = parseLine(reply).params;
    const host = p.get('host') ?? '';
    const port = Number(p.get('port'));
    if (!host || !Number.isInteger(port) || port < 1 || port > 65535) {
      // Never cache an address we cannot use: the next attempt asks again.
      throw new TributaryError('COORDINATOR_LOADING', { reason: `FIND_COORDINATOR answered without a usable address: ${reply.slice(0, 120)}` });
    }
    const addr = formatAddress({ host, port });
    this.coordinators.set(cacheKey(key), addr);
    this.learn(addr);
    return addr;
  }

  async coordinator(key: { group: string } | { transactional_id: string }, signal?: AbortSignal): Promise<string> {
    return this.coordinators.get(cacheKey(key)) ?? this.findCoordinator(key, signal);
  }

  /**
   * NOT_COORDINATOR: take host/port from the error when it has them, else rediscover.
   * Connection failures also rediscover: the coordinator may have moved.
   */
  async onCoordinatorError(key: { group: string } | { transactional_id: string }, err: unknown): Promise<void> {
    const k = cacheKey(key);
    if (err instanceof TributaryError && err.code === 'NOT_COORDINATOR') {
      const host = err.fields.host;
      const port = Number(err.fields.port);
      if (typeof host === 'string' && host && Number.isInteger(port) && port > 0) {
        const addr = formatAddress({ host, port });
        this.coordinators.set(k, addr);
        this.learn(addr);
        return;
      }
    }
    if (err instanceof TributaryError && (err.code === 'NOT_COORDINATOR' || err.code === 'connection_lost' || err.code === 'request_timeout' || err.code === 'COORDINATOR_LOADING')) {
      this.coordinators.delete(k);
    }
  }

  /** A group command sent to the coordinator, following redirects and retrying what is retriable. */
  async coordinatorCommand(
    key: { group: string } | { transactional_id: string },
    name: string,
    fields: Record<string, FieldValue | undefined>,
    opts: { signal?: AbortSignal; positional?: string[]; retry?: RetryOptions } = {},
  ): Promise<string> {
    return this.coordinatorRequest(key, (conn) => conn.command(name, fields, opts.positional), opts);
  }

  /** Any request to the coordinator (a text command, a transactional batch), with coordinatorCommand's redirects and retries. */
  async coordinatorRequest<T>(key: { group: string } | { transactional_id: string }, send: (conn: Connection) => Promise<T>, opts: { signal?: AbortSignal; retry?: RetryOptions } = {}): Promise<T> {
    return retry(
      async () => {
        const addr = await this.coordinator(key, opts.signal);
        try {
          const conn = await this.connection(addr, opts.signal);
          return await untilAborted(send(conn), opts.signal);
        } catch (err) {
          await this.onCoordinatorError(key, err);
          throw err;
        }
      },
      { ...this.retryOptions, ...opts.retry, signal: opts.signal },
    );
  }

  // ---- partition leaders ----

  async fetchMetadata(topic: string, signal?: AbortSignal): Promise<TopicMetadata> {
    const reply = await this.lookup('METADATA', { topic }, signal);
    const p = parseLine(reply).params;
    const md: TopicMetadata = {
      topic,
      partitions: Number(p.get('partitions')),
      leaders: (p.get('leaders') ?? '').split(',').filter(Boolean),
      epochs: (p.get('epochs') ?? '').split(',').filter(Boolean).map(Number),
    };
    this.metadataCache.set(topic, md);
    for (const l of md.leaders) this.learn(l);
    return md;
  }

  async metadata(topic: string, signal?: AbortSignal): Promise<TopicMetadata> {
    return this.metadataCache.get(topic) ?? this.fetchMetadata(topic, signal);
  }

  async leaderFor(topic: string, partition: number, signal?: AbortSignal): Promise<string> {
    const md = await this.metadata(topic, signal);
    const leader = md.leaders[partition];
    if (leader && this.unresponsive(leader)) {
      // The broker named just left a request unanswered: the cluster is probably moving its partitions
      // right now and the broker that answered may not know yet. Ask again (after the retry module's
      // backoff) before dialling it, whose handshake would hang for the whole stall bound; once per
      // stall bound, so a leader that was only slow is dialled again.
      const k = `${topic}\u0000${partition}`;
      const at = this.rechecked.get(k);
      if (at === undefined || performance.now() - at > this.stallTimeoutMs) {
        this.rechecked.set(k, performance.now());
        this.metadataCache.delete(topic);
        throw new TributaryError('NOT_LEADER', { topic, partition, reason: `the leader named (${leader}) is not answering; asking again` });
      }
    }
    if (!leader || leader === NO_LEADER) {
      const fresh = await this.fetchMetadata(topic, signal);
      const l = fresh.leaders[partition];
      if (!l) throw new TributaryError('partition_not_found', { topic, partition });
      if (l === NO_LEADER) {
        // Mid-failover: retriable; the next attempt asks again.
        this.metadataCache.delete(topic);
        throw new TributaryError('NOT_LEADER', { topic, partition, reason: 'the partition has no leader right now' });
      }
      return l;
    }
    return leader;
  }

  /** A data command's error: NOT_LEADER LEADER_IS host:port updates the cache. */
  onLeaderError(topic: string, partition: number, err: unknown): void {
    if (!(err instanceof TributaryError)) return;
    if (err.code === 'NOT_LEADER') {
      const i = err.extra.indexOf('LEADER_IS');
      const addr = i >= 0 ? err.extra[i + 1] : typeof err.fields.leader === 'string' ? err.fields.leader : undefined;
      const md = this.metadataCache.get(topic);
      this.learn(addr);
      if (addr && md) md.leaders[partition] = addr;
      else this.metadataCache.delete(topic);
    } else if (err.code === 'connection_lost' || err.code === 'request_timeout') {
      this.metadataCache.delete(topic);
    }
  }

  invalidateMetadata(topic: string): void {
    this.metadataCache.delete(topic);
  }

  /** Forgets all the cluster knows of `topic` (a producer's idle topic: idle-topics.ts). */
  forgetTopic(topic: string): void {
    this.metadataCache.delete(topic);
    for (const k of this.rechecked.keys()) if (k.startsWith(`${topic}\u0000`)) this.rechecked.delete(k);
  }

  async close(): Promise<void> {
    this.closed = true;
    const conns = await Promise.all([...this.shared.values(), ...this.control.values()].map((p) => p.catch(() => undefined)));
    this.shared.clear();
    this.control.clear();
    await Promise.all([...conns, ...this.dedicatedConns].map((c) => c?.close()));
    this.dedicatedConns.clear();
  }
}

function cacheKey(key: { group: string } | { transactional_id: string }): string {
  return 'group' in key ? `g:${key.group}` : `t:${key.transactional_id}`;
}
