import { TributaryError } from './errors.js';

export const DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024;

/** Length-prefix a body: 4-byte big-endian length, then the body. */
export function encodeFrame(body: Buffer | string): Buffer {
  if (typeof body === 'string') {
    // Written straight into the frame: no intermediate buffer for the text.
    const len = Buffer.byteLength(body, 'utf8');
    const out = Buffer.allocUnsafe(4 + len);
    out.writeUInt32BE(len, 0);
    out.write(body, 4, 'utf8');
    return out;
  }
  const out = Buffer.allocUnsafe(4 + body.length);
  out.writeUInt32BE(body.length, 0);
  body.copy(out, 4);
  return out;
}

/** Header only, for writev-style sends that avoid copying a large body. */
export function frameHeader(length: number): Buffer {
  const h = Buffer.allocUnsafe(4);
  h.writeUInt32BE(length, 0);
  return h;
}

/**
 * Incremental frame splitter. The declared length is checked against the maximum before any buffer for
 * the body is allocated, so a hostile 0xFFFFFFFF length costs nothing.
 */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;

  /**
   * `alloc` gives the memory of a frame assembled from several chunks (a frame inside one chunk is a view
   * of it): the broker's frame pool, so that memory is used again (docs/architecture.md, "Broker").
   */
  constructor(
    private readonly maxFrameBytes = DEFAULT_MAX_FRAME_BYTES,
    private readonly alloc: (bytes: number) => Buffer = Buffer.allocUnsafe,
  ) {}

  /** Bytes held for a frame that is not complete yet. */
  get pendingBytes(): number {
    return this.buffered;
  }

  /**
   * Feed bytes; returns every complete frame body. Throws frame_too_large (with the declared length) when
   * a header announces more than the maximum; the caller must then close the connection.
   */
  push(chunk: Buffer): Buffer[] {
    this.append(chunk);
    const frames: Buffer[] = [];
    for (let f = this.next(); f !== undefined; f = this.next()) frames.push(f);
    return frames;
  }

  /** Buffers bytes without splitting them: next() then takes the frames one at a time. */
  append(chunk: Buffer): void {
    if (chunk.length > 0) {
      this.chunks.push(chunk);
      this.buffered += chunk.length;
    }
  }

  /**
   * The next complete frame body, or undefined. `max` (at most the decoder's maximum) is what the next
   * header is checked against, for a caller whose limit depends on what the frames before did (the Kafka
   * port's, before authentication); frame_too_large as push().
   */
  next(max = this.maxFrameBytes): Buffer | undefined {
    if (this.buffered < 4) return undefined;
    const limit = Math.min(max, this.maxFrameBytes);
    const len = this.peekLength();
    if (len > limit) throw new TributaryError('frame_too_large', { max: limit, declared: len });
    if (this.buffered < 4 + len) return undefined;
    this.consume(4);
    return this.consume(len);
  }

  private peekLength(): number {
    const first = this.chunks[0]!;
    if (first.length >= 4) return first.readUInt32BE(0);
    const head = Buffer.alloc(4);
    let filled = 0;
    for (const c of this.chunks) {
      const n = Math.min(4 - filled, c.length);
      c.copy(head, filled, 0, n);
      filled += n;
      if (filled === 4) break;
    }
    return head.readUInt32BE(0);
  }

  private consume(n: number): Buffer {
    this.buffered -= n;
    const first = this.chunks[0];
    if (n === 0) return Buffer.alloc(0);
    if (first && first.length === n) {
      this.chunks.shift();
      return first;
    }
    if (first && first.length > n) {
      this.chunks[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    const out = this.alloc(n);
    let filled = 0;
    while (filled < n) {
      const c = this.chunks[0]!;
      const take = Math.min(n - filled, c.length);
      c.copy(out, filled, 0, take);
      filled += take;
      if (take === c.length) this.chunks.shift();
      else this.chunks[0] = c.subarray(take);
    }
    return out;
  }
}
