import { EventEmitter } from 'node:events';
import type { Etcd3 } from 'etcd3';
import { type EtcdSource, normalizePrefix, resolveClient, withMetadataErrors } from './etcd-client.js';
import { LeaseKeeper } from './lease-keeper.js';
import { WatchedPrefix } from './watched-prefix.js';

export interface ControllerElectionOptions {
  etcd: EtcdSource;
  /** Root of every Tributary key, default '/tributary/'. The controller key is `<prefix>controller/current`. */
  prefix?: string;
  brokerId: number;
  /** Seconds a dead controller keeps the role; default 10 (tests use 2, etcd's minimum). */
  leaseTtlSeconds?: number;
}

export interface ControllerState {
  /** undefined while no broker holds the role. */
  controllerId: number | undefined;
  /** createRevision of the controller key: larger for every newer controller, a fencing token for its writes. */
  epoch: number | undefined;
  isController: boolean;
}

interface ControllerRecord {
  brokerId: number;
  electedAt: number;
}

const KEY = 'current';

function parseController(text: string): ControllerRecord | undefined {
  try {
    const c = JSON.parse(text) as ControllerRecord;
    return c !== null && typeof c === 'object' && Number.isInteger(c.brokerId) ? c : undefined;
  } catch {
    return undefined;
  }
}

/**
 * One controller among the brokers: whoever creates the controller key first (create-if-absent, bound to
 * its own lease) holds the role until its lease ends; the others watch the key and campaign again when it
 * is deleted. A controller whose lease cannot be confirmed within its TTL stops being controller at once
 * (see LeaseKeeper), before etcd can elect another. Events: 'change' (ControllerState) whenever the
 * controller or this broker's role changes.
 */
export class ControllerElection {
  readonly events = new EventEmitter();
  readonly prefix: string;
  readonly brokerId: number;
  private readonly ttlSeconds: number;
  private readonly client: Etcd3;
  private readonly ownsClient: boolean;
  private readonly key: WatchedPrefix<ControllerRecord>;
  private lease: LeaseKeeper | undefined;
  private campaigning: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private last: ControllerState = { controllerId: undefined, epoch: undefined, isController: false };

  constructor(opts: ControllerElectionOptions) {
    ({ client: this.client, owned: this.ownsClient } = resolveClient(opts.etcd));
    this.prefix = normalizePrefix(opts.prefix);
    this.brokerId = opts.brokerId;
    this.ttlSeconds = opts.leaseTtlSeconds ?? 10;
    this.key = new WatchedPrefix(this.client, `${this.prefix}controller/`, parseController);
    this.key.events.on('put', () => this.publish());
    this.key.events.on('delete', () => {
      this.publish();
      this.schedule(0);
    });
  }

  /** Reads the current controller and runs the first campaign; then keeps campaigning whenever the role is free. */
  async start(): Promise<void> {
    await withMetadataErrors('open', () => this.key.start());
    await this.campaign();
    this.publish();
  }

  /**
   * The key carries our lease and that lease certainly holds. Derived from the cache, which our own
   * transaction's answer and the watch both update in whichever order they arrive.
   */
  get isController(): boolean {
    const current = this.key.get(KEY);
    // Stricter than a broker's registration: the role needs a lease etcd confirmed within its TTL (a
    // controller cut off from etcd could act on nothing anyway), and no pause of this process since etcd
    // last confirmed it (settled): its timers would decide on registrations and states not read yet.
    return current !== undefined && this.lease?.confirmed === true && this.lease.settled && current.lease === this.lease.id;
  }

  get controllerId(): number | undefined {
    return this.key.get(KEY)?.value.brokerId;
  }

  /** The lease the current controller holds its role by (for revoking a dead controller's role). */
  get controllerLease(): string | undefined {
    const l = this.key.get(KEY)?.lease;
    return l && l !== '0' ? l : undefined;
  }

  get epoch(): number | undefined {
    return this.key.get(KEY)?.createRevision;
  }

  get state(): ControllerState {
    return { controllerId: this.controllerId, epoch: this.epoch, isController: this.isController };
  }

  /** Gives up the role (if held) and stops campaigning. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.campaigning?.catch(() => {});
    const lease = this.lease;
    this.lease = undefined;
    // Revoking the lease deletes the key, so the next controller is elected without waiting for the TTL.
    await lease?.revoke().catch(() => {});
    this.publish();
    await this.key.close();
    if (this.ownsClient) this.client.close();
  }

  private campaign(): Promise<void> {
    this.campaigning ??= this.tryWin().finally(() => {
      this.campaigning = undefined;
    });
    return this.campaigning;
  }

  private async tryWin(): Promise<void> {
    if (this.closed || this.isController) return;
    // Always ask etcd (not the cache): the transaction is both the campaign and a fresh read of the holder.
    try {
      if (!this.lease?.alive) await this.newLease();
      const lease = this.lease!;
      const key = `${this.key.prefix}${KEY}`;
      const record: ControllerRecord = { brokerId: this.brokerId, electedAt: Date.now() };
      const res = await withMetadataErrors('elect_controller', () =>
        this.client
          .if(key, 'Create', '==', 0)
          .then(this.client.put(key).value(JSON.stringify(record)).lease(lease.id))
          .else(this.client.get(key))
          .commit(),
      );
      const kv = res.responses[0]?.response_range?.kvs[0];
      if (res.succeeded) {
        const revision = Number(res.header.revision);
        this.key.applyPut(KEY, record, revision, revision, lease.id);
      } else if (kv) {
        // Someone's key, or ours from a create that applied before its answer timed out.
        this.key.applyKv(KEY, kv);
      }
      this.schedule(this.ttlSeconds * 1000);
    } catch {
      // etcd unreachable: try again soon.
      this.schedule(500);
    }
    this.publish();
  }

  private async newLease(): Promise<void> {
    const lease = await LeaseKeeper.grant(this.client, this.ttlSeconds);
    this.lease = lease;
    const drop = () => {
      if (this.lease !== lease) return;
      this.lease = undefined;
      this.publish();
      this.schedule(200);
    };
    lease.events.once('lost', drop);
    lease.events.on('unconfirmed', () => this.publish());
    lease.events.on('reconfirmed', () => this.publish());
    // No longer renewed (etcd was unreachable): the role ends with it; campaign again under a new lease.
    lease.events.once('lapsed', () => {
      lease.retire();
      drop();
    });
  }

  /** The single campaign timer: the watch makes campaigns prompt, this re-check makes them certain. */
  private schedule(ms: number): void {
    if (this.closed) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.campaign(), ms);
  }

  private publish(): void {
    const now = this.state;
    if (now.controllerId === this.last.controllerId && now.epoch === this.last.epoch && now.isController === this.last.isController) return;
    this.last = now;
    this.events.emit('change', now);
  }
}
