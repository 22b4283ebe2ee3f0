import { TributaryError } from './errors.js';
import { DEFAULT_MAX_FRAME_BYTES } from './frame.js';

/** Bodies at least this long are read straight into their own buffer (see FrameReader). */
export const DIRECT_READ_MIN = 64 * 1024;

/** Below this much room after the bytes kept, a read is too short to be worth its call: compact. */
const MIN_ROOM = 4096;

const EMPTY = Buffer.alloc(0);

/**
 * Frame splitter for a socket that reads into buffers it is handed (net.Socket's `onread`): `buffer()`
 * says where the next read lands, `read(n)` takes the n bytes that landed there and returns the frames
 * they completed. Once a header announces a body of at least `directMin` bytes, the next reads go
 * straight into that body's own buffer at the right offset, so a large frame is never assembled from
 * chunks. Headers and smaller frames go through one reusable read buffer, and every frame handed out
 * is copied out of it: what a caller keeps (decoded records, a reply's raw bytes) never aliases bytes a
 * later read overwrites. The declared length is checked against the maximum before any body buffer
 * is allocated, so a hostile length costs nothing.
 */
export class FrameReader {
  private readonly buf: Buffer;
  /** buf[start, end): read and not handed out yet (a partial header or small frame). */
  private start = 0;
  private end = 0;
  /** The large frame being read into directly, and how much of it has come. */
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
  ) {
    // Room for any small frame whole, so one that straddles reads can always be finished in place.
    this.buf = Buffer.allocUnsafeSlow(Math.max(readBufferBytes, directMin + 4));
  }

  /** Bytes held for a frame that is not complete yet. */
  get pendingBytes(): number {
    return this.body ? 4 + this.filled : this.end - this.start;
  }

  /** Where the next read must land; valid until the next read(). */
  buffer(): Buffer {
    if (this.body) return this.body.subarray(this.filled);
    return this.headerOnly ? this.buf.subarray(this.end, 4) : this.buf.subarray(this.end);
  }

  /**
   * `n` bytes were read into the last buffer(); returns every frame body they completed. Throws
   * frame_too_large (with the declared length) when a header announces more than the maximum; the
   * caller must then close the connection.
   */
  read(n: number): Buffer[] {
    if (this.body) {
      this.filled += n;
      if (this.filled < this.body.length) return [];
      const done = this.body;
      this.body = undefined;
      this.filled = 0;
      this.headerOnly = true;
      return [done];
    }
    this.end += n;
    if (this.end >= 4) this.headerOnly = false;
    const buf = this.buf;
    const frames: Buffer[] = [];
    let need = 4;
    while (this.end - this.start >= 4) {
      const len = buf.readUInt32BE(this.start);
      if (len > this.maxFrameBytes) throw new TributaryError('frame_too_large', { max: this.maxFrameBytes, declared: len });
      const at = this.start + 4;
      const have = this.end - at;
      if (have >= len) {
        frames.push(this.copyOut(at, len));
        this.start = at + len;
        continue;
      }
      if (len >= this.directMin) {
        const body = Buffer.allocUnsafe(len);
        buf.copy(body, 0, at, this.end);
        this.body = body;
        this.filled = have;
        this.start = this.end = 0;
        return frames;
      }
      need = 4 + len;
      break;
    }
    if (this.start === this.end) {
      this.start = this.end = 0;
    } else if (buf.length - this.start < need || (buf.length - this.end < MIN_ROOM && this.start >= MIN_ROOM)) {
      // The partial frame must fit whole, and a read into a sliver would not be worth its call. What is
      // kept is a partial small frame or header, so this copies less than directMin + 4 bytes.
      buf.copyWithin(0, this.start, this.end);
      this.end -= this.start;
      this.start = 0;
    }
    return frames;
  }

  private copyOut(at: number, len: number): Buffer {
    if (len === 0) return EMPTY;
    const out = Buffer.allocUnsafe(len);
    this.buf.copy(out, 0, at, at + len);
    return out;
  }
}
