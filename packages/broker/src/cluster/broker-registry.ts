import { EventEmitter } from 'node:events';
import type { Etcd3 } from 'etcd3';
import { type EtcdSource, normalizePrefix, resolveClient, withMetadataErrors } from './etcd-client.js';
import { LeaseKeeper } from './lease-keeper.js';
import { type Versioned, WatchedPrefix } from './watched-prefix.js';

export interface BrokerRegistration {
  id: number;
  /** Where the broker listens. */
  host: string;
  port: number;
  /** What clients and other brokers should dial, `host:port` (differs from host/port behind NAT or proxies). */
  advertisedAddress: string;
  /** Its Kafka listener's `host:port` for Kafka clients (docs/kafka.md), when it has one. */
  kafkaAddress?: string;
  /**
   * Its --max-frame-bytes: the largest append it takes as leader, so the size of the REPLICA_FETCH answers
   * its followers must take (cluster/replica-wire.ts). Absent from brokers of earlier versions.
   */
  maxFrameBytes?: number;
  startedAt: number;
}

export interface BrokerRegistryOptions {
  etcd: EtcdSource;
  /** Root of every Tributary key, default '/tributary/'. Brokers live under `<prefix>brokers/<id>`. */
  prefix?: string;
  /** Seconds a dead broker stays registered; default 10 (tests use 2, etcd's minimum). */
  leaseTtlSeconds?: number;
}

/** Another live broker holds the id (its lease has not expired). */
export class BrokerIdInUseError extends Error {
  constructor(
    readonly brokerId: number,
    readonly holder: BrokerRegistration | undefined,
  ) {
    super(`broker id ${brokerId} is registered by a live broker${holder ? ` at ${holder.advertisedAddress}` : ''}`);
    this.name = 'BrokerIdInUseError';
  }
}

function parseBroker(text: string, key: string): BrokerRegistration | undefined {
  try {
    const b = JSON.parse(text) as BrokerRegistration;
    const ok = b !== null && typeof b === 'object' && String(b.id) === key && typeof b.host === 'string' && Number.isInteger(b.port);
    return ok ? b : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Live brokers, each a key bound to its own lease: a broker that dies or stalls past the TTL disappears
 * without anyone cleaning up. Events: 'broker-joined' / 'broker-left' (BrokerRegistration) for every broker
 * (this one included), and 'registration-lost' (reason) when this broker's own lease expired: it must stop
 * acting as a cluster member until it registers again.
 */
export class BrokerRegistry {
  readonly events = new EventEmitter();
  readonly prefix: string;
  readonly leaseTtlSeconds: number;
  private readonly client: Etcd3;
  private readonly ownsClient: boolean;
  private readonly brokers: WatchedPrefix<BrokerRegistration>;
  private lease: LeaseKeeper | undefined;
  private registration: BrokerRegistration | undefined;
  /** Since when this broker's keep-alives go unanswered while its process runs (etcd unreachable). */
  private unreachableSince: number | undefined;
  /** When etcd answered again after such an outage (0: never). */
  /** performance.now() of the end of the last etcd outage (none yet: long ago). */
  private recoveredAt = Number.NEGATIVE_INFINITY;

  constructor(opts: BrokerRegistryOptions) {
    ({ client: this.client, owned: this.ownsClient } = resolveClient(opts.etcd));
    this.prefix = normalizePrefix(opts.prefix);
    this.leaseTtlSeconds = opts.leaseTtlSeconds ?? 10;
    this.brokers = new WatchedPrefix(this.client, `${this.prefix}brokers/`, parseBroker);
    this.brokers.events.on('put', (_id: string, entry: Versioned<BrokerRegistration>, previous?: Versioned<BrokerRegistration>) => {
      // Same id under a new lease = the old registration expired and a new one came.
      if (previous && previous.lease === entry.lease) return;
      if (previous) this.events.emit('broker-left', previous.value);
      this.events.emit('broker-joined', entry.value);
    });
    this.brokers.events.on('delete', (_id: string, previous: Versioned<BrokerRegistration>) => this.events.emit('broker-left', previous.value));
  }

  /** Loads the live brokers and watches for joins and leaves. */
  async open(): Promise<void> {
    await withMetadataErrors('open', () => this.brokers.start());
  }

  list(): BrokerRegistration[] {
    return this.brokers
      .values()
      .map(([, e]) => e.value)
      .sort((a, b) => a.id - b.id);
  }

  get(id: number): BrokerRegistration | undefined {
    return this.brokers.get(String(id))?.value;
  }

  /** This broker's registration while its lease certainly holds. */
  get self(): BrokerRegistration | undefined {
    return this.lease?.alive ? this.registration : undefined;
  }

  /**
   * Registers this broker under a new lease. Throws BrokerIdInUseError while another live broker holds the
   * id; `waitMs` keeps trying that long first (a broker restarted after kill -9 waits out its old lease).
   */
  async register(info: Omit<BrokerRegistration, 'startedAt'> & { startedAt?: number }, opts: { waitMs?: number } = {}): Promise<BrokerRegistration> {
    if (this.lease?.alive) throw new Error(`this registry already registered broker ${this.registration?.id}`);
    const registration: BrokerRegistration = { ...info, startedAt: info.startedAt ?? Date.now() };
    const key = `${this.brokers.prefix}${registration.id}`;
    const deadline = performance.now() + (opts.waitMs ?? 0);
    const lease = await withMetadataErrors('register_broker', () => LeaseKeeper.grant(this.client, this.leaseTtlSeconds));
    try {
      for (;;) {
        const res = await withMetadataErrors('register_broker', () =>
          this.client
            .if(key, 'Create', '==', 0)
            .then(this.client.put(key).value(JSON.stringify(registration)).lease(lease.id))
            .else(this.client.get(key))
            .commit(),
        );
        const kv = res.responses[0]?.response_range?.kvs[0];
        // A retried create that had applied before its answer timed out finds our own lease on the key.
        if (res.succeeded || kv?.lease === lease.id) {
          const revision = Number(res.header.revision);
          this.brokers.applyPut(String(registration.id), registration, revision, revision, lease.id);
          this.lease = lease;
          this.registration = registration;
          this.watchLease(lease);
          this.etcdAnswered();
          return registration;
        }
        if (kv) this.brokers.applyKv(String(registration.id), kv);
        if (performance.now() >= deadline)
          throw new BrokerIdInUseError(registration.id, kv ? parseBroker(kv.value.toString('utf8'), String(registration.id)) : undefined);
        await new Promise((r) => setTimeout(r, 200));
      }
    } catch (err) {
      await lease.revoke().catch(() => {});
      throw err;
    }
  }

  /**
   * etcd as this broker saw it: whether it is unreachable now and when it last came back after being
   * unreachable for a lease TTL or more. A pause of this process is not an outage of etcd.
   */
  etcdOutage(): { unreachable: boolean; recoveredAt: number } {
    return { unreachable: this.unreachableSince !== undefined, recoveredAt: this.recoveredAt };
  }

  private etcdAnswered(): void {
    if (this.unreachableSince === undefined) return;
    this.unreachableSince = undefined;
    this.recoveredAt = performance.now();
  }

  private watchLease(lease: LeaseKeeper): void {
    lease.events.on('unconfirmed', (paused: boolean) => {
      if (!paused && this.lease === lease && this.unreachableSince === undefined) this.unreachableSince = performance.now();
    });
    lease.events.on('reconfirmed', () => this.etcdAnswered());
    lease.events.once('lost', (reason: string) => {
      // etcd answered that the lease is gone: it is reachable again.
      this.etcdAnswered();
      if (this.lease === lease) this.events.emit('registration-lost', reason);
    });
    lease.events.once('lapsed', () => {
      if (this.lease === lease) this.events.emit('registration-lapsed');
    });
  }

  /**
   * After the lease lapsed (etcd unreachable for a while): moves this broker's key, if it still holds
   * exactly this registration, to a new lease, so the broker stays registered without a leave and a
   * rejoin. Resolves false when the key is gone or another's (the registration was lost: register anew).
   */
  async renew(): Promise<boolean> {
    const registration = this.registration;
    const old = this.lease;
    if (!registration || !old) return false;
    const key = `${this.brokers.prefix}${registration.id}`;
    const value = JSON.stringify(registration);
    const lease = await withMetadataErrors('renew_broker', () => LeaseKeeper.grant(this.client, this.leaseTtlSeconds));
    try {
      const res = await withMetadataErrors('renew_broker', () =>
        this.client.if(key, 'Value', '==', value).then(this.client.put(key).value(value).lease(lease.id)).commit(),
      );
      this.etcdAnswered();
      if (!res.succeeded) {
        await lease.revoke().catch(() => {});
        // Expired on etcd's side: this broker is not registered any more and must register anew.
        old.retire();
        if (this.lease === old) {
          this.lease = undefined;
          this.registration = undefined;
        }
        return false;
      }
      const revision = Number(res.header.revision);
      this.brokers.applyPut(String(registration.id), registration, revision, revision, lease.id);
      this.lease = lease;
      old.retire();
      this.watchLease(lease);
      this.etcdAnswered();
      return true;
    } catch (err) {
      await lease.revoke().catch(() => {});
      throw err;
    }
  }

  /** Revokes this broker's lease: its key disappears at once and the others see it leave. */
  /** The lease another broker's registration is bound to (for the controller's fast death detection). */
  leaseOf(id: number): string | undefined {
    const e = this.brokers.get(String(id));
    return e && e.lease !== '0' ? e.lease : undefined;
  }

  /**
   * Revokes a broker's lease: its registration disappears at once, as if it had expired. Used by the
   * controller for a broker whose process is certainly gone; a broker that is in fact alive loses its
   * registration, stops leading and registers again.
   */
  async revokeLease(lease: string): Promise<void> {
    await withMetadataErrors('revoke_lease', () => this.client.leaseClient.leaseRevoke({ ID: lease }));
  }

  /** Whether etcd confirmed this broker's lease within its TTL (it cannot have expired meanwhile). */
  get confirmed(): boolean {
    return this.lease?.confirmed ?? false;
  }

  /** True while this broker's registration lease certainly holds: only then may it act as a leader. */
  get alive(): boolean {
    return this.lease?.alive ?? false;
  }

  /** alive, with no pause of this process since etcd last confirmed the lease (LeaseKeeper.settled). */
  get settled(): boolean {
    return this.lease?.settled ?? false;
  }

  /** LeaseKeeper.whenSettled: true once settled, false once not alive. */
  whenSettled(): Promise<boolean> {
    return this.lease?.whenSettled() ?? Promise.resolve(false);
  }

  async deregister(): Promise<void> {
    const lease = this.lease;
    this.lease = undefined;
    this.registration = undefined;
    if (lease) await withMetadataErrors('deregister_broker', () => lease.revoke());
  }

  async close(): Promise<void> {
    await this.deregister().catch(() => {});
    await this.brokers.close();
    if (this.ownsClient) this.client.close();
  }
}
