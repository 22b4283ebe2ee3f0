/**
 * The buffers a partition log writes its appends from (docs/architecture.md, "Storage", tail cache). The
 * tail cache keeps each write's bytes, and a buffer of its own per write cost an allocation per append and,
 * while cached, an ArrayBuffer, its backing store and a Buffer object (about 270 bytes of heap beside a
 * 100-byte record). Small writes are instead carved one after another out of shared blocks, which the cache
 * holds as one chunk per run of writes (tail-cache.ts). Blocks grow for a partition that fills them quickly
 * and shrink for one that does not, so a slow partition pins little: its current block is all that outlives
 * the cache's eviction of its records.
 */

import { type Clock, systemClock } from '../common/clock.js';

export const MIN_BLOCK_BYTES = 4 * 1024;
export const MAX_BLOCK_BYTES = 64 * 1024;
/** Larger writes get buffers of their own. */
export const MAX_SHARED_BYTES = MAX_BLOCK_BYTES / 4;
/** A block filled faster than this: the next one is twice as large. */
const GROW_WITHIN_MS = 1_000;
/** A block that took longer than this to fill: the next one is half as large. */
const SHRINK_AFTER_MS = 10_000;

const NO_BLOCK = Buffer.alloc(0);

export class WriteArena {
  private block = NO_BLOCK;
  private used = 0;
  private blockBytes = MIN_BLOCK_BYTES;
  private startedAt = 0;

  /**
   * `maxBlockBytes` (at least MIN_BLOCK_BYTES) keeps blocks small next to a small tail cache: a cached
   * chunk is charged its whole block, so blocks as large as the budget would leave nothing cached.
   */
  constructor(
    private readonly clock: Pick<Clock, 'now'> = systemClock,
    private readonly maxBlockBytes = MAX_BLOCK_BYTES,
  ) {}

  /**
   * `bytes` of fresh, unpooled memory for one write: a view of the current block (a new block when the
   * rest of this one is too small), or for a write larger than a quarter of the largest block, a buffer of
   * its own (it gains nothing from sharing). Bytes are never handed out twice: replies may still hold views
   * of cached writes after the cache let them go (docs/architecture.md, "Broker", reply buffers).
   */
  take(bytes: number): Buffer {
    if (bytes > MAX_SHARED_BYTES) return Buffer.allocUnsafeSlow(bytes);
    if (this.used + bytes > this.block.length) this.nextBlock(bytes);
    const out = this.block.subarray(this.used, this.used + bytes);
    this.used += bytes;
    return out;
  }

  /** The size the next block will have (for tests and the docs' figures). */
  get nextBlockBytes(): number {
    return this.blockBytes;
  }

  private nextBlock(bytes: number): void {
    const now = this.clock.now();
    if (this.block !== NO_BLOCK) {
      const took = now - this.startedAt;
      if (took < GROW_WITHIN_MS) this.blockBytes = Math.max(MIN_BLOCK_BYTES, Math.min(this.maxBlockBytes, this.blockBytes * 2));
      else if (took > SHRINK_AFTER_MS) this.blockBytes = Math.max(MIN_BLOCK_BYTES, this.blockBytes / 2);
    }
    // Unpooled: a view of Node's shared pool would pin a slab the cache does not account for.
    this.block = Buffer.allocUnsafeSlow(Math.max(this.blockBytes, bytes));
    this.used = 0;
    this.startedAt = now;
  }
}
