/**
 * The largest frame on the main port before authentication (authentication on), as Kafka's
 * sasl.server.max.receive.size bounds a SASL exchange: 30 connections that each sent 64 MiB and no login
 * held 2 GB. Checked on the declared length, before the body is buffered (client-connection.ts).
 */
export const MAX_FRAME_BEFORE_AUTHENTICATION = 64 * 1024;

/** Connections per client IP address (maxConnectionsPerAddress): one address cannot take every slot. */
export class AddressLimiter {
  private readonly counts = new Map<string, number>();

  constructor(private readonly max: number) {}

  /** Takes a slot for `address`; false when it already holds `max` connections (0 = unlimited). */
  tryAcquire(address: string): boolean {
    const n = this.counts.get(address) ?? 0;
    if (this.max > 0 && n >= this.max) return false;
    this.counts.set(address, n + 1);
    return true;
  }

  release(address: string): void {
    const n = this.counts.get(address) ?? 0;
    if (n <= 1) this.counts.delete(address);
    else this.counts.set(address, n - 1);
  }

  count(address: string): number {
    return this.counts.get(address) ?? 0;
  }
}
