/**
 * Reusable buffers for the CONSUME and STREAM replies the tail cache writes (docs/architecture.md,
 * "Broker", reply buffers). A reply of a few KiB is an ArrayBuffer of its own, and V8 starts a full
 * collection each time such memory has grown by about 64 MiB: at 10,000 1-KiB records/s read that was
 * one every 5 s from replies alone, each a 20-30 ms stretch of slow replies. A buffer comes back once the
 * socket has written it (the write callback), so it is reused only when nothing refers to it any more: a
 * reply that is dropped unwritten (an error, a closed connection) is simply collected.
 */
import client from 'prom-client';

/** Smallest and largest pooled sizes (powers of two); a larger reply gets a buffer of its own. */
export const MIN_POOLED_BYTES = 2 * 1024;
export const MAX_POOLED_BYTES = 1024 * 1024;
const MIN_SHIFT = 11;
const CLASSES = 10; // 2 KiB .. 1 MiB

export class ReplyBuffers {
  /** Free buffers per size class (class k holds 2^(11 + k) bytes). */
  private readonly free: ArrayBuffer[][] = Array.from({ length: CLASSES }, () => []);
  /** Buffers handed out and not yet given back: only these may come back, and only once. */
  private readonly lent = new WeakSet<ArrayBuffer>();
  private freeBytes = 0;
  /** How many takes a given-back buffer served (tributary_reply_buffers_reused_total). */
  reused = 0;

  /** `maxFreeBytes`: the most the pool keeps while nobody uses it; buffers beyond it are left to the GC. */
  constructor(private readonly maxFreeBytes = 8 * 1024 * 1024) {}

  /** `bytes` of uninitialised memory, from the pool when the size is pooled. */
  readonly take = (bytes: number): Buffer => {
    if (bytes > MAX_POOLED_BYTES) return Buffer.allocUnsafeSlow(bytes);
    const k = sizeClass(bytes);
    const ab = this.free[k]!.pop();
    if (ab !== undefined) {
      this.freeBytes -= ab.byteLength;
      this.reused++;
    }
    const buf = ab ?? new ArrayBuffer(1 << (MIN_SHIFT + k));
    this.lent.add(buf);
    return Buffer.from(buf, 0, bytes);
  };

  /** Whether `buf` is a view of a buffer `take` handed out and not yet given back. */
  owns(buf: Buffer): boolean {
    return this.lent.has(buf.buffer as ArrayBuffer);
  }

  /**
   * Gives back the buffer under `buf` (any view of one `take` returned) after its last use: it may be lent
   * again at once, so no view of it may be read or given back afterwards. A second give of the same
   * lending and buffers the pool did not lend are ignored, so callers may pass every reply.
   */
  readonly give = (buf: Buffer): void => {
    const ab = buf.buffer;
    if (!(ab instanceof ArrayBuffer) || !this.lent.delete(ab)) return;
    if (this.freeBytes + ab.byteLength > this.maxFreeBytes) return;
    this.free[sizeClass(ab.byteLength)]!.push(ab);
    this.freeBytes += ab.byteLength;
  };

  /** Bytes the pool holds for reuse (for tests and metrics). */
  get pooledBytes(): number {
    return this.freeBytes;
  }
}

function sizeClass(bytes: number): number {
  if (bytes <= MIN_POOLED_BYTES) return 0;
  return 32 - Math.clz32(bytes - 1) - MIN_SHIFT;
}

/** What the pool holds and how often it saves an allocation (docs/operations.md, "Storage and latency"). */
export function registerReplyBufferMetrics(registry: client.Registry, pool: ReplyBuffers): void {
  new client.Gauge({
    name: 'tributary_reply_buffer_pool_bytes',
    help: 'Memory kept for reuse by the replies the tail cache writes (at most 8 MiB)',
    registers: [registry],
    collect() {
      this.set(pool.pooledBytes);
    },
  });
  let counted = 0;
  new client.Counter({
    name: 'tributary_reply_buffers_reused_total',
    help: 'Replies written into a buffer an earlier reply had used',
    registers: [registry],
    collect() {
      this.inc(pool.reused - counted);
      counted = pool.reused;
    },
  });
}
