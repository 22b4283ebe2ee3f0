/**
 * Memory for the request frames of 4 KiB or more a connection reads (from 16 KiB straight into it,
 * direct-reads.ts, smaller ones copied into it out of the read buffer, or on TLS assembled from several
 * socket reads), used again once nothing holds it (docs/architecture.md,
 * "Broker", frame memory). A frame stamped in place is what the tail cache
 * keeps (append-block.ts, stampBlockInPlace), so at 1 KiB records every byte received became an ArrayBuffer
 * that lived past two scavenges and only a full collection freed: V8 started one per 64 MiB of it.
 *
 * A lent buffer has holders, counted: the frame itself until its append is written and cached as a block
 * stamped in place (the log writer hands its hold to the tail cache, unless the journal still has to write
 * its bytes), the tail cache while a chunk of it is cached, and each CONSUME or STREAM reply that went out
 * as a view of it until its socket wrote it. At zero it is free again. A holder that never lets go (any
 * other frame, an append refused, a reply dropped unwritten) only leaves the buffer to the garbage
 * collector: the count can err high, never low.
 */
import { IN_PLACE_MIN_BYTES } from './append-block.js';

/** Frames below this are copied into the write arena, not cached in place. */
export const MIN_POOLED_FRAME = IN_PLACE_MIN_BYTES;
/** Above this a frame is not one block (MAX_APPEND_BLOCK_BYTES) and never stays in the cache as it came. */
export const MAX_POOLED_FRAME = 1024 * 1024 + 64 * 1024;
/**
 * Sizes are rounded up to this: a frame is cached in place only when its buffer is hardly larger than its
 * records (inPlaceBlockable allows 4 KiB).
 */
const GRAIN = 1024;

export class FramePool {
  /** Holders of each buffer lent out; a buffer with none is in `free` or gone. */
  private readonly holders = new WeakMap<ArrayBuffer, number>();
  /** Views that replies took (pin), each let go once (unpin). */
  private readonly pinned = new WeakSet<Buffer>();
  private readonly free = new Map<number, ArrayBuffer[]>();
  private freeBytes = 0;
  /** Frames given memory an earlier frame had used (tributary_frame_memory_reused_total). */
  reused = 0;

  /** `maxFreeBytes`: the most kept while unused; buffers beyond it are left to the garbage collector. */
  constructor(private readonly maxFreeBytes = 32 * 1024 * 1024) {}

  /** `bytes` of uninitialised memory for a frame, with one holder (the frame) when it comes from the pool. */
  readonly take = (bytes: number): Buffer => {
    if (bytes < MIN_POOLED_FRAME || bytes > MAX_POOLED_FRAME) return Buffer.allocUnsafe(bytes);
    const size = Math.ceil(bytes / GRAIN) * GRAIN;
    // A buffer one grain larger serves too (frames of a producer vary a little): at most 2 KiB to spare.
    let ab = this.free.get(size)?.pop() ?? this.free.get(size + GRAIN)?.pop();
    if (ab !== undefined) {
      this.freeBytes -= ab.byteLength;
      this.reused++;
    } else ab = Buffer.allocUnsafeSlow(size).buffer as ArrayBuffer;
    this.holders.set(ab, 1);
    return Buffer.from(ab, 0, bytes);
  };

  /** Whether `buf` is a view of memory the pool lent and that still has holders. */
  lent(buf: Buffer): boolean {
    return this.holders.has(buf.buffer as ArrayBuffer);
  }

  /** One more holder of the buffer under `buf`, which must be lent (lent() true). */
  retain(buf: Buffer): void {
    const ab = buf.buffer as ArrayBuffer;
    const n = this.holders.get(ab);
    if (n === undefined) throw new Error('frame pool: retain of a buffer not lent');
    this.holders.set(ab, n + 1);
  }

  /** A holder of the buffer under `buf` lets go; with none left it may be lent again at once. */
  release(buf: Buffer): void {
    const ab = buf.buffer as ArrayBuffer;
    const n = this.holders.get(ab);
    // Free already: a caller's bug, and throwing in a socket's write callback would end the process.
    if (n === undefined) return;
    if (n > 1) {
      this.holders.set(ab, n - 1);
      return;
    }
    this.holders.delete(ab);
    if (ab.byteLength > this.maxFreeBytes) return;
    if (this.freeBytes + ab.byteLength > this.maxFreeBytes) {
      // Full: what is kept may be sizes no frame asks for any more (another producer's); start again.
      this.free.clear();
      this.freeBytes = 0;
    }
    let list = this.free.get(ab.byteLength);
    if (list === undefined) this.free.set(ab.byteLength, (list = []));
    list.push(ab);
    this.freeBytes += ab.byteLength;
  }

  /** A view of [s, e) of `src` (lent) for a reply: a holder until unpinned. */
  pin(src: Buffer, s: number, e: number): Buffer {
    this.retain(src);
    const view = src.subarray(s, e);
    this.pinned.add(view);
    return view;
  }

  /** Lets go of the views among `pieces` that pin() made (each once; other pieces are not the pool's). */
  unpin(pieces: readonly Buffer[]): void {
    for (const p of pieces) if (this.pinned.delete(p)) this.release(p);
  }

  /** Whether any of `pieces` is a view pin() made and unpin() has not let go of. */
  pins(pieces: readonly Buffer[]): boolean {
    for (const p of pieces) if (this.pinned.has(p)) return true;
    return false;
  }

  /** Memory kept for frames to come (for tests and metrics). */
  get pooledBytes(): number {
    return this.freeBytes;
  }
}
