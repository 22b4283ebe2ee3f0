import type tls from 'node:tls';
import { type FieldValue, parseLine } from '../protocol/command.js';
import { TributaryError } from '../protocol/errors.js';
import { untilAborted } from './abort.js';
import { type AuthOptions, Connection } from './connection.js';
import { type RetryOptions, retry } from './retry.js';

export interface BrokerAddress {
  host: string;
  port: number;
}

export interface ClusterOptions {
  /** Bootstrap brokers, `host:port`. */
  brokers: string[];
  connectTimeoutMs?: number;
  retry?: RetryOptions;
  /** TLS for every broker connection. */
  tls?: tls.ConnectionOptions;
  /** Credentials sent with AUTH on every broker connection. */
  auth?: AuthOptions;
}

export function parseAddress(s: string): BrokerAddress {
  const i = s.lastIndexOf(':');
  const host = i > 0 ? s.slice(0, i).replace(/^\[|\]$/g, '') : '';
  const port = i > 0 ? Number(s.slice(i + 1)) : Number.NaN;
  if (!host || !Number.isInteger(port) || port < 1 || port > 65535) throw new TributaryError('invalid_config', { option: 'brokers', value: s }, `invalid broker address "${s}" (expected host:port)`);
  return { host, port };
}

export function formatAddress(a: BrokerAddress): string {
  return a.host.includes(':') ? `[${a.host}]:${a.port}` : `${a.host}:${a.port}`;
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
 * Routing per seed 000's table: FIND_COORDINATOR over the bootstrap brokers, group commands to the
 * coordinator (NOT_COORDINATOR → use host/port from the error or rediscover), data commands to partition
 * leaders from METADATA (NOT_LEADER → update the leader cache). One shared connection per broker serves
 * short requests; long polls get their own connections from `dedicated()`.
 */
export class Cluster {
  readonly bootstrap: BrokerAddress[];
  private readonly shared = new Map<string, Promise<Connection>>();
  private readonly dedicatedConns = new Set<Connection>();
  private readonly coordinators = new Map<string, string>();
  private readonly metadataCache = new Map<string, TopicMetadata>();
  private nextBootstrap = 0;
  private closed = false;

  constructor(private readonly opts: ClusterOptions) {
    if (!Array.isArray(opts.brokers) || opts.brokers.length === 0) throw new TributaryError('invalid_config', { option: 'brokers' }, 'brokers: at least one bootstrap broker is required');
    this.bootstrap = opts.brokers.map(parseAddress);
  }

  get retryOptions(): RetryOptions {
    return this.opts.retry ?? {};
  }

  private assertOpen(): void {
    if (this.closed) throw new TributaryError('client_closed');
  }

  /** The shared connection to one broker, opened on first use and replaced when it fails. */
  async connection(address: string, signal?: AbortSignal): Promise<Connection> {
    this.assertOpen();
    const cached = this.shared.get(address);
    if (cached) {
      const conn = await cached.catch(() => undefined);
      if (conn && !conn.closed) return conn;
      if (this.shared.get(address) === cached) this.shared.delete(address);
    }
    const { host, port } = parseAddress(address);
    const p = Connection.connect({ host, port, connectTimeoutMs: this.opts.connectTimeoutMs, signal, tls: this.opts.tls, auth: this.opts.auth });
    this.shared.set(address, p);
    p.catch(() => {
      if (this.shared.get(address) === p) this.shared.delete(address);
    });
    return p;
  }

  /** A connection of its own, for long polls and streams; closed with the cluster. */
  async dedicated(address: string, signal?: AbortSignal): Promise<Connection> {
    this.assertOpen();
    const { host, port } = parseAddress(address);
    const conn = await Connection.connect({ host, port, connectTimeoutMs: this.opts.connectTimeoutMs, signal, tls: this.opts.tls, auth: this.opts.auth });
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
        last = err;
      }
    }
    this.nextBootstrap = (this.nextBootstrap + 1) % this.bootstrap.length;
    throw last instanceof TributaryError ? last : new TributaryError('connection_lost', { reason: 'no bootstrap broker reachable' });
  }

  /** A command to any broker, retried over the bootstrap list. */
  async anyCommand(name: string, fields: Record<string, FieldValue | undefined> = {}, signal?: AbortSignal): Promise<string> {
    return retry(async () => untilAborted((await this.anyBroker(signal)).conn.command(name, fields), signal), { ...this.retryOptions, signal });
  }

  // ---- coordinators ----

  async findCoordinator(key: { group: string } | { transactional_id: string }, signal?: AbortSignal): Promise<string> {
    const reply = await this.anyCommand('FIND_COORDINATOR', key, signal);
    const p = parseLine(reply).params;
    const host = p.get('host') ?? '';
    const port = Number(p.get('port'));
    if (!host || !Number.isInteger(port) || port < 1 || port > 65535) {
      // Never cache an address we cannot use: the next attempt asks again.
      throw new TributaryError('COORDINATOR_LOADING', { reason: `FIND_COORDINATOR answered without a usable address: ${reply.slice(0, 120)}` });
    }
    const addr = formatAddress({ host, port });
    this.coordinators.set(cacheKey(key), addr);
    return addr;
  }

  async coordinator(key: { group: string } | { transactional_id: string }, signal?: AbortSignal): Promise<string> {
    return this.coordinators.get(cacheKey(key)) ?? this.findCoordinator(key, signal);
  }

  /**
   * Seed 000's handleNotCoordinator: take host/port from the error when it has them, else rediscover.
   * Connection failures also rediscover: the coordinator may have moved.
   */
  async onCoordinatorError(key: { group: string } | { transactional_id: string }, err: unknown): Promise<void> {
    const k = cacheKey(key);
    if (err instanceof TributaryError && err.code === 'NOT_COORDINATOR') {
      const host = err.fields.host;
      const port = Number(err.fields.port);
      if (typeof host === 'string' && host && Number.isInteger(port) && port > 0) {
        this.coordinators.set(k, formatAddress({ host, port }));
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
    return retry(
      async () => {
        const addr = await this.coordinator(key, opts.signal);
        try {
          const conn = await this.connection(addr, opts.signal);
          return await untilAborted(conn.command(name, fields, opts.positional), opts.signal);
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
    const reply = await this.anyCommand('METADATA', { topic }, signal);
    const p = parseLine(reply).params;
    const md: TopicMetadata = {
      topic,
      partitions: Number(p.get('partitions')),
      leaders: (p.get('leaders') ?? '').split(',').filter(Boolean),
      epochs: (p.get('epochs') ?? '').split(',').filter(Boolean).map(Number),
    };
    this.metadataCache.set(topic, md);
    return md;
  }

  async metadata(topic: string, signal?: AbortSignal): Promise<TopicMetadata> {
    return this.metadataCache.get(topic) ?? this.fetchMetadata(topic, signal);
  }

  async leaderFor(topic: string, partition: number, signal?: AbortSignal): Promise<string> {
    const md = await this.metadata(topic, signal);
    const leader = md.leaders[partition];
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

  /** Seed 000's handleBrokerError for data commands: NOT_LEADER LEADER_IS host:port updates the cache. */
  onLeaderError(topic: string, partition: number, err: unknown): void {
    if (!(err instanceof TributaryError)) return;
    if (err.code === 'NOT_LEADER') {
      const i = err.extra.indexOf('LEADER_IS');
      const addr = i >= 0 ? err.extra[i + 1] : typeof err.fields.leader === 'string' ? err.fields.leader : undefined;
      const md = this.metadataCache.get(topic);
      if (addr && md) md.leaders[partition] = addr;
      else this.metadataCache.delete(topic);
    } else if (err.code === 'connection_lost' || err.code === 'request_timeout') {
      this.metadataCache.delete(topic);
    }
  }

  invalidateMetadata(topic: string): void {
    this.metadataCache.delete(topic);
  }

  async close(): Promise<void> {
    this.closed = true;
    const conns = await Promise.all([...this.shared.values()].map((p) => p.catch(() => undefined)));
    this.shared.clear();
    await Promise.all([...conns, ...this.dedicatedConns].map((c) => c?.close()));
    this.dedicatedConns.clear();
  }
}

function cacheKey(key: { group: string } | { transactional_id: string }): string {
  return 'group' in key ? `g:${key.group}` : `t:${key.transactional_id}`;
}
