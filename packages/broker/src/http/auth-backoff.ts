/**
 * Failed logins on the HTTP port, per client address (docs/http-api.md): after MAX_FAILURES in a row an
 * address is held off (429 throttled, Retry-After) for a time that doubles with each further failure, up
 * to MAX_HOLD_MS; a success clears it. Without it every guess costs one broker connection and one scrypt,
 * unbounded (the main port closes a connection after its failures, and HTTP opens a new one per guess).
 */
import { TributaryError } from 'tributary-protocol/errors.js';

export const MAX_FAILURES = 5;
const FIRST_HOLD_MS = 1000;
const MAX_HOLD_MS = 60_000;
/** Addresses remembered at most: past it the one unheard of longest goes (a flood of addresses costs memory, not holds). */
const MAX_ADDRESSES = 10_000;

interface Failures {
  count: number;
  /** performance.now() until which the address is held off. */
  until: number;
}

export class AuthBackoff {
  private readonly byAddress = new Map<string, Failures>();

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** Throws throttled while `address` is held off. */
  check(address: string): void {
    const f = this.byAddress.get(address);
    if (!f) return;
    const left = f.until - this.now();
    if (left > 0) throw new TributaryError('throttled', { reason: 'too many failed authentications from this address', retry_after_ms: Math.ceil(left) });
  }

  failed(address: string): void {
    const f = this.byAddress.get(address) ?? { count: 0, until: 0 };
    this.byAddress.delete(address); // re-inserted last: the map's order is the eviction order
    f.count++;
    if (f.count >= MAX_FAILURES) f.until = this.now() + Math.min(MAX_HOLD_MS, FIRST_HOLD_MS * 2 ** (f.count - MAX_FAILURES));
    this.byAddress.set(address, f);
    if (this.byAddress.size > MAX_ADDRESSES) this.byAddress.delete(this.byAddress.keys().next().value!);
  }

  succeeded(address: string): void {
    this.byAddress.delete(address);
  }
}
