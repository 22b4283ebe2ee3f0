/**
 * The Kafka port's frame splitter: an int32 size, then that many bytes. Tributary's own FrameDecoder has the
 * same layout and checks the size against the maximum before buffering (a hostile size allocates nothing),
 * so it is reused as is; Kafka adds a minimum, the smallest request header (api key, version, correlation
 * id, a null client id), below which the frame cannot be a request.
 */
import { FrameDecoder } from 'tributary-protocol/frame.js';
import { KafkaCodecError } from './errors.js';

/** int16 api key + int16 version + int32 correlation id + int16 null client id. */
export const MIN_REQUEST_FRAME = 10;
/** Kafka's own default for socket.request.max.bytes. */
export const DEFAULT_MAX_KAFKA_FRAME = 100 * 1024 * 1024;

export interface KafkaFrameOptions {
  maxFrameBytes?: number;
  minFrameBytes?: number;
}

export class KafkaFrameSplitter {
  private readonly inner: FrameDecoder;
  private readonly min: number;

  constructor(o: KafkaFrameOptions = {}) {
    // FrameDecoder reads the size unsigned: a negative int32 size is above any maximum and refused as such.
    this.inner = new FrameDecoder(o.maxFrameBytes ?? DEFAULT_MAX_KAFKA_FRAME);
    this.min = o.minFrameBytes ?? MIN_REQUEST_FRAME;
  }

  get pendingBytes(): number {
    return this.inner.pendingBytes;
  }

  /**
   * Complete frame bodies (size prefix removed). Throws frame_too_large (TributaryError) or a KafkaCodecError
   * frame_too_small; either way the connection is to be closed.
   */
  push(chunk: Buffer): Buffer[] {
    const frames = this.inner.push(chunk);
    for (const f of frames) this.checkMin(f);
    return frames;
  }

  /** Buffers bytes for next(). */
  append(chunk: Buffer): void {
    this.inner.append(chunk);
  }

  /** One complete frame body at a time, its size checked against `maxFrameBytes` (at most the splitter's maximum); undefined when none is complete. */
  next(maxFrameBytes?: number): Buffer | undefined {
    const f = this.inner.next(maxFrameBytes);
    if (f) this.checkMin(f);
    return f;
  }

  private checkMin(f: Buffer): void {
    if (f.length < this.min) throw new KafkaCodecError('frame_too_small', `frame of ${f.length} bytes, below ${this.min}`, { size: f.length, at: 0 });
  }
}
