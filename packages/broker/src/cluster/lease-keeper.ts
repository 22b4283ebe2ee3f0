import { EventEmitter } from 'node:events';
import type { Etcd3, ILeaseKeepAliveResponse, Lease } from 'etcd3';

/**
 * An event-loop gap this long means the process was paused (SIGSTOP, a long GC, a second of its own
 * work): not a slow etcd. Every time here is monotonic (performance.now(), which runs on while the process
 * is stopped): a step of the wall clock is neither a pause nor a lease that stays valid past its TTL.
 */
const PAUSE_MS = 1000;
const TICK_MS = 100;

/**
 * An etcd lease kept alive in the background, with a local view of whether its holder may act on it.
 *
 * Two failures look alike from inside and must be told apart:
 * - this process was paused past the TTL (the zombie case): etcd expired the lease and may have handed
 *   what it guarded to another broker. A gap in this process's own timer ticks gives the pause away. Until
 *   a keep-alive sent after it is answered, `settled` reads false: what etcd changed meanwhile (a
 *   partition's leader moved) may not have been read yet. When the gap outlasted what etcd last confirmed
 *   (the send time of the last answered keep-alive plus the TTL: etcd renewed the lease no earlier), or
 *   that confirmation runs out before the answer comes, `alive` turns false too, before anything queued
 *   during the pause is served, until that answer (or etcd reports the lease gone: 'lost'). A shorter gap
 *   cannot have cost the lease: the holder stays alive, so a leader that took a second over a 50 MiB
 *   append keeps it and answers for it once settled (refusing it at once, as this keeper once did, made
 *   its client send it again, and the append took the second again: docs/architecture.md, "Cluster mode").
 * - etcd itself is unreachable (frozen, down): nobody can change the cluster's state, so the holder keeps
 *   acting (leaders keep serving reads and acks=1 writes) until etcd answers again. When the client gives
 *   up renewing this lease (`lapsed`), the holder takes its key over under a new lease once etcd is back.
 *
 * 'lost' (reason): etcd reports the lease expired or unknown (not on revoke()). 'lapsed': keep-alives of
 * this lease stopped without etcd saying it is gone.
 */
export class LeaseKeeper {
  readonly events = new EventEmitter();
  private validUntil: number;
  /** Send times of keep-alives not answered yet, oldest first (answers come in order on one stream). */
  private sent: number[] = [];
  private lapsed = false;
  private timer: NodeJS.Timeout | undefined;
  private ended = false;
  private leaseId = '';
  private lastTick: number;
  /** When a pause of this process was noticed; cleared by a keep-alive sent after it and answered. */
  private pausedAt: number | undefined;
  /** Whether the lease may have expired since a pause was noticed (the pause, or the wait after it, outlasted it). */
  private pausedPastLease = false;
  /** Callers of whenSettled(), told true once settled, false once not alive or past their deadline. */
  private settleWaiters: Array<{ deadline: number; wake: (settled: boolean) => void }> = [];
  private readonly ticker: NodeJS.Timeout;

  private constructor(
    private readonly lease: Lease,
    readonly ttlSeconds: number,
    /** Monotonic milliseconds (performance.now unless a test drives it). */
    private readonly now: () => number,
  ) {
    this.lastTick = now();
    this.validUntil = this.lastTick + ttlSeconds * 1000;
    this.ticker = setInterval(() => this.tick(), TICK_MS);
    this.ticker.unref();
    this.arm();
    lease.on('keepaliveEstablished', () => {
      this.sent = [];
    });
    lease.on('keepaliveFired', () => {
      // A gap is noticed before its send time counts: etcd3's timer may run before this keeper's ticker.
      this.tick();
      this.sent.push(this.now());
    });
    lease.on('keepaliveSucceeded', (res: ILeaseKeepAliveResponse) => {
      const sentAt = this.sent.shift();
      if (sentAt === undefined) return;
      const now = this.now();
      const wasConfirmed = now < this.validUntil;
      if (this.pausedAt !== undefined && sentAt >= this.pausedAt) {
        this.pausedAt = undefined;
        this.pausedPastLease = false;
        this.wakeSettleWaiters(true);
      }
      const until = sentAt + Number(res.TTL) * 1000;
      if (until <= this.validUntil) return;
      this.validUntil = until;
      this.arm();
      // Only an answer that makes the lease valid again counts: one to a keep-alive sent long ago may not.
      if (!wasConfirmed && now < until) this.events.emit('reconfirmed');
    });
    lease.on('lost', (err: Error) => {
      // The client's own guess after 2 x TTL without an answer: etcd may simply be unreachable.
      if (/lost connection to etcd/i.test(err.message)) this.lapse();
      else this.lose(`etcd reports the lease lost: ${err.message}`);
    });
  }

  /** Grants a lease (rejects when etcd cannot be reached) and starts keeping it alive. */
  static async grant(client: Etcd3, ttlSeconds: number, now: () => number = () => performance.now()): Promise<LeaseKeeper> {
    const keeper = new LeaseKeeper(client.lease(ttlSeconds), ttlSeconds, now);
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

  /**
   * False once etcd reported the lease gone, and from a detected pause of this process after which the
   * lease may have expired until etcd confirms it again: whether the holder may act on the lease.
   */
  get alive(): boolean {
    if (this.ended) return false;
    this.tick();
    return !this.pausedPastLease;
  }

  /**
   * alive, and no pause of this process noticed since etcd last confirmed the lease: what this broker
   * knows of etcd's state is current. Coordinators and acks=1 replies wait for it.
   */
  get settled(): boolean {
    return this.alive && this.pausedAt === undefined;
  }

  /**
   * Resolves true once settled, false once not alive, at the latest when the lease confirmed at the call
   * runs out (answers to keep-alives sent before a later gap may extend the lease while gaps keep it unsettled).
   */
  whenSettled(): Promise<boolean> {
    if (this.settled) return Promise.resolve(true);
    if (!this.alive) return Promise.resolve(false);
    return new Promise((wake) => this.settleWaiters.push({ deadline: this.validUntil, wake }));
  }

  private wakeSettleWaiters(settled: boolean): void {
    for (const w of this.settleWaiters.splice(0)) w.wake(settled);
  }

  /** Whether etcd confirmed the lease within its TTL (for status; `alive` is what decides). */
  get confirmed(): boolean {
    return !this.ended && this.now() < this.validUntil;
  }

  private tick(): void {
    const now = this.now();
    // Checked on every call too: after a pause, queued I/O may run before the ticker does.
    if (now - this.lastTick > PAUSE_MS) this.pausedAt = now;
    this.lastTick = now;
    // validUntil only moves on answers, which a gap holds back: it still says what etcd had confirmed.
    if (this.pausedAt !== undefined && !this.pausedPastLease && now >= this.validUntil) {
      this.pausedPastLease = true;
      this.wakeSettleWaiters(false);
    }
    if (this.settleWaiters.some((w) => now >= w.deadline)) {
      const due = this.settleWaiters.filter((w) => now >= w.deadline);
      this.settleWaiters = this.settleWaiters.filter((w) => now < w.deadline);
      for (const w of due) w.wake(false);
    }
  }

  /** Ends keep-alives and revokes the lease, which deletes every key bound to it. Does not emit 'lost'. */
  async revoke(): Promise<void> {
    this.end();
    await this.lease.revoke();
  }

  /**
   * 'unconfirmed' (paused: boolean) when the TTL since the last answered keep-alive passes: etcd
   * unreachable or slow, or (paused = true) this process was frozen past it. 'reconfirmed' when an answer comes
   * after that.
   */
  private arm(): void {
    if (this.ended) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(
      () => {
        // Timers run on the event loop's coarser clock and may fire a fraction of a ms early: confirmed
        // must already read false when 'unconfirmed' is heard, and a gap that ran into it is past the lease.
        this.validUntil = Math.min(this.validUntil, this.now());
        this.tick();
        this.events.emit('unconfirmed', this.pausedPastLease);
      },
      Math.max(0, this.validUntil - this.now()),
    );
    this.timer.unref();
  }

  /** The client stopped renewing; the lease ends on etcd's side unless its key is taken over ('lapsed'). */
  private lapse(): void {
    if (this.ended || this.lapsed) return;
    this.lapsed = true;
    this.events.emit('lapsed');
  }

  private lose(reason: string): void {
    if (this.ended) return;
    this.end();
    // Best effort: if etcd still holds the lease, its keys go now rather than at expiry.
    this.lease.revoke().catch(() => {});
    this.events.emit('lost', reason);
  }

  /** Stops this keeper without revoking (its key was taken over by a new lease). */
  retire(): void {
    this.end();
    this.lease.release();
  }

  private end(): void {
    this.ended = true;
    this.wakeSettleWaiters(false);
    clearInterval(this.ticker);
    clearTimeout(this.timer);
  }
}
