import { EventEmitter } from 'node:events';
import type { Etcd3, ILeaseKeepAliveResponse, Lease } from 'etcd3';

/**
 * An etcd lease kept alive in the background, with a conservative local view of whether it still holds.
 *
 * etcd expires a lease TTL seconds after the last keep-alive it received. We never know when that was,
 * but it was no earlier than when we sent it: so the lease is certainly alive until `sentAt + TTL`, and
 * `alive` turns false at that moment unless a later keep-alive was answered. The holder of something bound
 * to the lease (a broker registration, the controller role) thus stops acting on it before etcd could
 * hand it to someone else. The client library alone would only notice after 2 × TTL.
 *
 * 'lost' (reason) fires once, when the lease expired (locally or per etcd) but not on revoke().
 */
export class LeaseKeeper {
  readonly events = new EventEmitter();
  private validUntil: number;
  /** Send times of keep-alives not answered yet, oldest first (answers come in order on one stream). */
  private sent: number[] = [];
  private timer: NodeJS.Timeout | undefined;
  private ended = false;
  private leaseId = '';

  private constructor(
    private readonly lease: Lease,
    readonly ttlSeconds: number,
    requestedAt: number,
  ) {
    this.validUntil = requestedAt + ttlSeconds * 1000;
    lease.on('keepaliveEstablished', () => {
      this.sent = [];
    });
    lease.on('keepaliveFired', () => {
      this.sent.push(Date.now());
    });
    lease.on('keepaliveSucceeded', (res: ILeaseKeepAliveResponse) => {
      const sentAt = this.sent.shift();
      if (sentAt === undefined) return;
      this.validUntil = Math.max(this.validUntil, sentAt + Number(res.TTL) * 1000);
      this.arm();
    });
    lease.on('lost', (err: Error) => this.lose(`etcd reports the lease lost: ${err.message}`));
    this.arm();
  }

  /** Grants a lease (rejects when etcd cannot be reached) and starts keeping it alive. */
  static async grant(client: Etcd3, ttlSeconds: number): Promise<LeaseKeeper> {
    const keeper = new LeaseKeeper(client.lease(ttlSeconds), ttlSeconds, Date.now());
    try {
      keeper.leaseId = await keeper.lease.grant();
    } catch (err) {
      keeper.end();
      throw err;
    }
    return keeper;
  }

  /** The lease id, for `put(key).lease(id)`. */
  get id(): string {
    return this.leaseId;
  }

  /** True while the lease certainly holds on etcd. */
  get alive(): boolean {
    return !this.ended && Date.now() < this.validUntil;
  }

  /** Ends keep-alives and revokes the lease, which deletes every key bound to it. Does not emit 'lost'. */
  async revoke(): Promise<void> {
    this.end();
    await this.lease.revoke();
  }

  private arm(): void {
    if (this.ended) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.lose('no keep-alive answered within the lease TTL'), Math.max(0, this.validUntil - Date.now()));
  }

  private lose(reason: string): void {
    if (this.ended) return;
    this.end();
    // Best effort: if etcd still holds the lease, its keys go now rather than at expiry.
    this.lease.revoke().catch(() => {});
    this.events.emit('lost', reason);
  }

  private end(): void {
    this.ended = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
