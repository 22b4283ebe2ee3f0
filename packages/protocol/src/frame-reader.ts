import { TributaryError } from './errors.js';
import { DEFAULT_MAX_FRAME_BYTES } from './frame.js';

/** Bodies at least this long are read straight into their own buffer (see FrameReader). */
export const DIRECT_READ_MIN = 64 * 1024;

/** Below this much room after the bytes kept, a read is too short to be worth its call: compact. */
const MIN_ROOM = 4096;

const EMPTY = Buffer.alloc(0);

/**
 * Frame splitter for a socket that reads into buffers it is handed (net.Socket's `onread`): `buffer()`
 * says where the next read lands, `wrote(n)` takes the n bytes that landed there, and `next()` hands out
 * the frames completed, one at a time (`read(n)` does both for a caller that takes every frame at once).
 * Once a header announces a body of at least `directMin` bytes, the next reads go straight into that
 * body's own buffer (from `alloc`) at the right offset, so a large frame is never assembled from chunks.
 * Headers and smaller frames go through one reusable read buffer, and every frame handed out is copied
 * out of it: what a caller keeps (decoded records, a reply's raw bytes) never aliases bytes a later read
 * overwrites. The declared length is checked against the maximum before any body buffer is allocated,
 * so a hostile length costs nothing.
 *
 * Only `buffer()` decides where bytes go (it is called between reads, when nothing is in flight): `next()`
 * may run at any time, so it only takes frames and never moves the bytes of the read buffer.
 */
export class FrameReader {
  private buf: Buffer;
  private readonly baseBytes: number;
  /** buf[start, end): read and not handed out: whole frames, then at most the start of one. */
  private start = 0;
  private end = 0;
  /**
   * Frames complete and not handed out that come before the bytes of `buf`, from `readyAt` on: a large
   * body once read, and the small frames copied out ahead of it when its reading began.
   */
  private readonly ready: Buffer[] = [];
  private readyAt = 0;
  private readyBytes = 0;
  /** The large frame being read into directly, and how much of it has come (`buf` is empty meanwhile). */
  private body: Buffer | undefined;
  private filled = 0;
  /**
   * After a large frame the next read takes its header alone: the next frame is likely large too, and
   * its body then comes straight into its own buffer rather than partly through the read buffer. A read
   * that fills its buffer is followed at once by the next (libuv), so this costs a read call, not a wait.
   */
  private headerOnly = false;

  constructor(
    private readonly maxFrameBytes = DEFAULT_MAX_FRAME_BYTES,
    private readonly directMin = DIRECT_READ_MIN,
    readBufferBytes = 64 * 1024,
    /** Memory for a large body (the broker's frame pool, docs/architecture.md "Broker"). */
    private readonly alloc: (bytes: number) => Buffer = Buffer.allocUnsafe,
    /**
     * The largest body given its buffer as soon as its header came: one that declares more grows the read
     * buffer as its bytes come, so what a peer that sends only headers makes this side allocate stays
     * bounded (the broker's, whose clients are not trusted; its frames are at most 1 MiB or so).
     */
    private readonly directMax = Number.POSITIVE_INFINITY,
    /** Smaller frames copied out of the read buffer get `alloc` memory from this size too (default directMin). */
    private readonly allocMin = directMin,
  ) {
    // Room for any small frame whole, so one that straddles reads can always be finished in place.
    this.baseBytes = Math.max(readBufferBytes, directMin + 4);
    this.buf = Buffer.allocUnsafeSlow(this.baseBytes);
  }

  /** Bytes read and not handed out as frames yet (complete ones included). */
  get pendingBytes(): number {
    return this.end - this.start + (this.body ? 4 + this.filled : 0) + this.readyBytes;
  }

  /**
   * Where the next read must land, never empty; valid until the next wrote(). `limit` (at most the
   * maximum) is the largest frame that may be read into a buffer of its own now: a caller whose limit
   * depends on what the frames before did (before authentication) passes its current one, and a larger
   * frame stays in the read buffer until next() refuses it; 0 while the caller reads no more (held).
   */
  buffer(limit = this.maxFrameBytes): Buffer {
    if (this.body) return this.body.subarray(this.filled);
    const buf = this.buf;
    if (this.start === this.end) this.start = this.end = 0;
    // The frame left incomplete at the end of what was read, if any, starts at p.
    let p = this.start;
    let need = 4;
    while (this.end - p >= 4) {
      const len = buf.readUInt32BE(p);
      if (this.end - p - 4 >= len) {
        p += 4 + len;
        continue;
      }
      const allowed = len <= Math.min(limit, this.maxFrameBytes);
      if (allowed && len >= this.directMin && len <= this.directMax) return this.direct(p, len);
      // A large frame not read directly grows the read buffer as its bytes come; one next() will refuse
      // needs room for a read, not for itself: reading stops once it is refused.
      need = len < this.directMin ? 4 + len : this.end - p + (allowed ? MIN_ROOM : 1);
      break;
    }
    if (this.headerOnly && this.end - this.start < 4 && this.start + 4 <= buf.length) return buf.subarray(this.end, this.start + 4);
    if (buf.length - p < need || (buf.length - this.end < MIN_ROOM && this.start >= MIN_ROOM)) {
      // The partial frame must fit whole, and a read into a sliver would not be worth its call. What is
      // kept is a partial small frame or header, unless frames are held (next() not called meanwhile).
      const kept = this.end - this.start;
      const required = Math.max(p - this.start + need, kept + 1);
      const into = required > buf.length ? Buffer.allocUnsafeSlow(Math.max(2 * buf.length, required)) : buf;
      buf.copy(into, 0, this.start, this.end);
      this.buf = into;
      this.end = kept;
      this.start = 0;
    } else if (this.start === 0 && this.end === 0 && buf.length > this.baseBytes) {
      // Grown while frames were held: back to the usual size once they are gone.
      this.buf = Buffer.allocUnsafeSlow(this.baseBytes);
    }
    return this.buf.subarray(this.end);
  }

  /** The frame of `len` bytes at p goes on in a buffer of its own; the whole frames before it are taken out. */
  private direct(p: number, len: number): Buffer {
    while (this.start < p) {
      const n = this.buf.readUInt32BE(this.start);
      this.pushReady(this.copyOut(this.start + 4, n));
      this.start += 4 + n;
    }
    const body = this.alloc(len);
    this.buf.copy(body, 0, p + 4, this.end);
    this.body = body;
    this.filled = this.end - p - 4;
    this.start = this.end = 0;
    this.headerOnly = false;
    return body.subarray(this.filled);
  }

  /** `n` bytes were read into the last buffer(). */
  wrote(n: number): void {
    if (this.body) {
      this.filled += n;
      if (this.filled < this.body.length) return;
      this.pushReady(this.body);
      this.body = undefined;
      this.filled = 0;
      this.headerOnly = true;
      return;
    }
    this.end += n;
    if (this.end - this.start >= 4) this.headerOnly = false;
  }

  /**
   * The next complete frame body, or undefined. `max` (at most the maximum) is what its declared length
   * is checked against; throws frame_too_large (with the declared length) past it, and the caller must
   * then close the connection.
   */
  next(max = this.maxFrameBytes): Buffer | undefined {
    const limit = Math.min(max, this.maxFrameBytes);
    const first = this.ready[this.readyAt];
    if (first !== undefined) {
      if (first.length > limit) throw new TributaryError('frame_too_large', { max: limit, declared: first.length });
      this.ready[this.readyAt++] = EMPTY;
      this.readyBytes -= 4 + first.length;
      if (this.readyAt === this.ready.length) {
        this.ready.length = 0;
        this.readyAt = 0;
      }
      return first;
    }
    if (this.body || this.end - this.start < 4) return undefined;
    const len = this.buf.readUInt32BE(this.start);
    if (len > limit) throw new TributaryError('frame_too_large', { max: limit, declared: len });
    const at = this.start + 4;
    if (this.end - at < len) return undefined;
    this.start = at + len;
    return this.copyOut(at, len);
  }

  /** wrote(n), then every frame complete: for a caller that takes them all at once (the client). */
  read(n: number): Buffer[] {
    this.wrote(n);
    const frames: Buffer[] = [];
    for (let f = this.next(); f !== undefined; f = this.next()) frames.push(f);
    return frames;
  }

  private pushReady(frame: Buffer): void {
    this.ready.push(frame);
    this.readyBytes += 4 + frame.length;
  }

  private copyOut(at: number, len: number): Buffer {
    if (len === 0) return EMPTY;
    const out = len >= this.allocMin ? this.alloc(len) : Buffer.allocUnsafe(len);
    this.buf.copy(out, 0, at, at + len);
    return out;
  }
}
