/**
 * Producer ids: integers handed out by brokers, unique across the cluster and across restarts
 * (docs/architecture.md, "Producer ids"). Each broker reserves a block at a time from its metadata store
 * (a local file, or etcd by compare-and-set) and hands the block out from memory; ids of a block left
 * unused by a restart are skipped, never reused.
 */
import type { MetadataStore } from './metadata-store.js';

/** Ids reserved per trip to the metadata store. */
export const PRODUCER_ID_BLOCK = 1000;

export class ProducerIdAllocator {
  private next = 0;
  private end = 0;
  private reserving: Promise<void> | null = null;

  constructor(
    private readonly store: Pick<MetadataStore, 'reserveProducerIds'>,
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
}
