/**
 * The SDK clients the admin API acts through. The API is a client of the cluster like any other: each
 * request runs as the caller (AUTH with the caller's principal and token, when authentication is on), so
 * the broker's own permission table and topic ACLs decide, and in cluster mode group and partition
 * requests find their coordinator and leader as the SDK does (docs/http-api.md, "How it works").
 *
 * One Admin (and, on first produce, one Producer) per credential, closed after a minute unused. A token
 * is kept only as the key's SHA-256 and inside the client that uses it; it is never logged.
 */
import { X509Certificate, createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type tls from 'node:tls';
import { Admin } from 'tributary-client/admin.js';
import { Producer } from 'tributary-client/producer.js';
import type { AuthOptions } from 'tributary-protocol/connection.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { BrokerConfig } from '../common/config.js';

const IDLE_MS = 60_000;

export interface ApiClient {
  admin: Admin;
  producer(): Producer;
}

interface Entry {
  admin: Admin;
  producer?: Producer;
  lastUsed: number;
  inUse: number;
}

export class ApiClients {
  private readonly entries = new Map<string, Entry>();
  private readonly sweeper: NodeJS.Timeout;
  private closed = false;

  constructor(
    /** The broker's own listener (`host:port`), resolved when first needed: it is bound after construction. */
    private readonly bootstrap: () => string,
    private readonly tlsOptions: () => tls.ConnectionOptions | undefined,
  ) {
    this.sweeper = setInterval(() => this.sweep(), IDLE_MS / 4);
    this.sweeper.unref();
  }

  /** Runs `fn` with the clients of `auth` (anonymous when undefined); a refused login drops them. */
  async with<T>(auth: AuthOptions | undefined, fn: (c: ApiClient) => Promise<T>): Promise<T> {
    if (this.closed) throw new TributaryError('shutting_down', { reason: 'the admin API is stopped' });
    const key = auth ? `${auth.principal}\u0000${createHash('sha256').update(auth.token).digest('hex')}` : '';
    let e = this.entries.get(key);
    if (!e) {
      e = {
        admin: this.dedicated(auth, { retry: { retries: 3 } }),
        lastUsed: performance.now(),
        inUse: 0,
      };
      this.entries.set(key, e);
    }
    const entry = e;
    entry.inUse++;
    entry.lastUsed = performance.now();
    const client: ApiClient = {
      admin: entry.admin,
      producer: () => {
        if (!entry.producer) {
          entry.producer = new Producer({
            ...this.connection(auth),
            acks: 'all',
            lingerMs: 0,
            requestTimeoutMs: 10_000,
          });
        }
        return entry.producer;
      },
    };
    try {
      return await fn(client);
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (code === 'authentication_failed' || code === 'authentication_required') this.drop(key, entry);
      throw err;
    } finally {
      entry.inUse--;
      entry.lastUsed = performance.now();
    }
  }

  /** How every client of the API reaches this broker, as `auth`. */
  private connection(auth: AuthOptions | undefined) {
    const tlsOpts = this.tlsOptions();
    return { brokers: [this.bootstrap()], ...(auth ? { auth } : {}), ...(tlsOpts ? { tls: tlsOpts } : {}), bootstrapTimeoutMs: 5000 };
  }

  /** An Admin of its own (a long-lived stream); the caller closes it. */
  dedicated(auth: AuthOptions | undefined, extra: { retry?: { retries: number } } = {}): Admin {
    return new Admin({ ...this.connection(auth), ...extra });
  }

  private drop(key: string, e: Entry): void {
    if (this.entries.get(key) === e) this.entries.delete(key);
    void e.admin.close().catch(() => {});
    void e.producer?.close().catch(() => {});
  }

  private sweep(): void {
    const now = performance.now();
    for (const [key, e] of this.entries) if (e.inUse === 0 && now - e.lastUsed > IDLE_MS) this.drop(key, e);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.sweeper);
    const all = [...this.entries.values()];
    this.entries.clear();
    await Promise.allSettled(all.flatMap((e) => [e.admin.close(), e.producer?.close()]));
  }
}

/**
 * How the API's clients reach this broker's own listener: loopback for a wildcard host, and with TLS on,
 * trusting exactly this broker's certificate (pinned by fingerprint; the name on it need not be
 * `127.0.0.1`) and presenting it as the client certificate when the listener asks for one.
 */
export function selfConnection(config: BrokerConfig, port: number): { address: string; tls: tls.ConnectionOptions | undefined } {
  const host = config.host === '0.0.0.0' ? '127.0.0.1' : config.host === '::' ? '::1' : config.host;
  const address = host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
  if (config.tlsCert === undefined || config.tlsKey === undefined) return { address, tls: undefined };
  const cert = readFileSync(config.tlsCert);
  const fingerprint = new X509Certificate(cert).fingerprint256;
  return {
    address,
    tls: {
      // The certificate itself is the trust anchor (its issuer may be unknown to this broker).
      ca: [cert, ...(config.tlsCa === undefined ? [] : [readFileSync(config.tlsCa)])],
      allowPartialTrustChain: true,
      ...(config.tlsCa === undefined ? {} : { cert, key: readFileSync(config.tlsKey) }),
      checkServerIdentity: (_host, peer) => (peer.fingerprint256 === fingerprint ? undefined : new Error('not this broker\'s certificate')),
    },
  };
}
