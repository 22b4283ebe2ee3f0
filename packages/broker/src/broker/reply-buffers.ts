/**
 * Reusable buffers for the CONSUME and STREAM replies the tail cache writes (docs/architecture.md,
 * "Broker", reply buffers). A reply of a few KiB is an ArrayBuffer of its own, and V8 starts a full
 * collection each time such memory has grown by about 64 MiB: at 10,000 1-KiB records/s read that was
 * one every 5 s from replies alone, each a 20-30 ms stretch of slow replies. A buffer comes back once the
 * socket has written it (the write callback), so it is reused only when nothing refers to it any more: a
 * reply that is dropped unwritten (an error, a closed connection) is simply collected.
 */
import client from 'prom-client';
import type { FramePool } from '../storage/frame-pool.js';

/** Smallest and largest pooled sizes; a larger reply gets a buffer of its own. */
export const MIN_POOLED_BYTES = 2 * 1024;
export const MAX_POOLED_BYTES = 1024 * 1024;
const MIN_SHIFT = 11;
/**
 * Sizes 2^k and 1.5 x 2^k from 2 KiB to 1 MiB: a reply holds at most a third more than it needs (powers of
 * two alone let a client that does not read keep twice the pending reply bytes its limit counts).
 */
const CLASSES = 19;

export class ReplyBuffers {
  /** Free buffers per size class (class k holds classBytes(k) bytes). */
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
    const buf = ab ?? new ArrayBuffer(classBytes(k));
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

/**
 * Writes a reply body to `socket`, a body in pieces piece by piece (never concatenated: corked, they leave
 * in one writev). A buffer `pool` lent goes back once the socket wrote the last piece of the body (writes
 * complete in order, so no piece of it is still queued); other pieces, the views of the tail cache's memory
 * among them (docs/architecture.md, "Broker", reply buffers), are not the pool's and never go to it. The
 * views `frames` pinned let go of it then too.
 */
export function writeReplyBody(
  socket: { write(b: Buffer, cb?: () => void): boolean },
  body: Buffer | Buffer[],
  pool: ReplyBuffers | undefined,
  frames?: FramePool,
): boolean {
  if (Buffer.isBuffer(body)) {
    if (pool === undefined || !pool.owns(body)) return socket.write(body);
    return socket.write(body, () => pool.give(body));
  }
  const last = body.length - 1;
  for (let i = 0; i < last; i++) socket.write(body[i]!);
  const lent = pool === undefined ? undefined : body.find((b) => pool.owns(b));
  // Views of frame memory the tail cache pinned for this reply (storage/frame-pool.ts) hold it until written.
  const pinned = frames?.pins(body) === true;
  if (lent === undefined && !pinned) return socket.write(body[last]!);
  return socket.write(body[last]!, () => {
    if (lent !== undefined) pool!.give(lent);
    if (pinned) frames!.unpin(body);
  });
}

/** The smallest class that holds `bytes` (at most MAX_POOLED_BYTES). */
function sizeClass(bytes: number): number {
  if (bytes <= MIN_POOLED_BYTES) return 0;
  const e = 32 - Math.clz32(bytes - 1); // 2^(e-1) < bytes <= 2^e
  const k = 2 * (e - MIN_SHIFT);
  return bytes <= 3 << (e - 2) ? k - 1 : k;
}

function classBytes(k: number): number {
  return k % 2 === 0 ? 1 << (MIN_SHIFT + k / 2) : 3 << (MIN_SHIFT + (k - 1) / 2 - 1);
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

/** What the frame pool keeps and how often it saves an allocation (docs/operations.md, "Storage and latency"). */
export function registerFramePoolMetrics(registry: client.Registry, pool: FramePool): void {
  new client.Gauge({
    name: 'tributary_frame_memory_pool_bytes',
    help: 'Unused memory kept for request frames of 4 KiB to about 1 MiB (at most 32 MiB)',
    registers: [registry],
    collect() {
      this.set(pool.pooledBytes);
    },
  });
  let counted = 0;
  new client.Counter({
    name: 'tributary_frame_memory_reused_total',
    help: 'Request frames read into memory an earlier frame had used',
    registers: [registry],
    collect() {
      this.inc(pool.reused - counted);
      counted = pool.reused;
    },
  });
}
