/**
 * Producer ids: integers handed out by brokers, unique across the cluster and across restarts
 * (docs/architecture.md, "Producer ids"). Each broker reserves a block at a time from its metadata store
 * (a local file, or etcd by compare-and-set) and hands the block out from memory; ids of a block left
 * unused by a restart are skipped, never reused. A client presents only ids some broker handed out:
 * below the store's reserved bound (issued()).
 */
import type { MetadataStore } from './metadata-store.js';

/** Ids reserved per trip to the metadata store. */
export const PRODUCER_ID_BLOCK = 1000;

/** A producer id as the protocol carries it: a decimal integer without leading zeros. */
const CANONICAL_ID = /^(0|[1-9][0-9]{0,15})$/;

export class ProducerIdAllocator {
  private next = 0;
  private end = 0;
  private reserving: Promise<void> | null = null;
  /** Every id below this was reserved by some broker (as far as this broker has seen). */
  private issuedEnd = 0;
  /** Reads of the store's bound: how many started, the latest finished, the one in flight. */
  private refreshesStarted = 0;
  private refreshedThrough = 0;
  private refreshing: Promise<void> | null = null;

  constructor(
    private readonly store: Pick<MetadataStore, 'reserveProducerIds' | 'reservedProducerIds'>,
    private readonly blockSize = PRODUCER_ID_BLOCK,
  ) {}

  /** A producer id no one else got, as the decimal string the protocol carries. */
  async allocate(): Promise<string> {
    while (this.next >= this.end) {
      // One reservation at a time: callers waiting meanwhile share its block.
      this.reserving ??= this.store.reserveProducerIds(this.blockSize).then(
        (first) => {
          this.next = first;
          this.end = first + this.blockSize;
          this.issuedEnd = Math.max(this.issuedEnd, this.end);
          this.reserving = null;
        },
        (err: unknown) => {
          this.reserving = null;
          throw err;
        },
      );
      await this.reserving;
    }
    return String(this.next++);
  }

  /**
   * Whether `id` is one some broker handed out: true or false at once when this broker's view decides it
   * (the usual case), else a promise that reads the store's bound first. A refresh that started before
   * the question may predate the reservation of `id`, so only one started after it settles a "no". Callers
   * with the same id wait on the same refreshes, in order, so appends they guard keep their order.
   */
  issued(id: string): boolean | Promise<boolean> {
    if (!CANONICAL_ID.test(id)) return false;
    const n = Number(id);
    if (n < this.issuedEnd) return true;
    return this.issuedAfterRefresh(n, this.refreshesStarted);
  }

  private async issuedAfterRefresh(n: number, startedBefore: number): Promise<boolean> {
    while (n >= this.issuedEnd) {
      if (this.refreshedThrough > startedBefore) return false;
      await this.refresh();
    }
    return true;
  }

  private refresh(): Promise<void> {
    this.refreshing ??= (async () => {
      const number = ++this.refreshesStarted;
      try {
        this.issuedEnd = Math.max(this.issuedEnd, await this.store.reservedProducerIds());
        this.refreshedThrough = Math.max(this.refreshedThrough, number);
      } finally {
        this.refreshing = null;
      }
    })();
    return this.refreshing;
  }
}
