/**
 * The produce-consume consumers' accounting, shared by the raw and the SDK consumer so both rows of the
 * table are counted the same way: a bitmap of the N record ids (missing, duplicates, foreign ids, wrong
 * sizes), per-partition offset continuity, and the end-to-end latency of every record (payload send time
 * to receipt, both on this host's clock).
 */
import { nowMs, percentile } from './lib.js';

export class Tally {
  private readonly seen: Uint8Array;
  private readonly latency: Float64Array;
  private readonly nextOffset: number[];
  unique = 0;
  duplicates = 0;
  foreign = 0;
  badSize = 0;
  /** Records whose offset was not the next one of their partition (a re-delivery counts too). */
  offsetGaps = 0;
  frames = 0;
  private firstAt = 0;
  private lastAt = 0;
  lastProgressAt = nowMs();
  private batchStartUnique = 0;
  /**
   * Called once, after the batch that brought the unique records to half the total or more, with their
   * count: the orchestrator samples the server's CPU then, for the cost of the second half alone.
   */
  onHalf: ((unique: number) => void) | undefined;

  constructor(
    readonly total: number,
    readonly size: number,
    partitions: number,
  ) {
    this.seen = new Uint8Array(total);
    this.latency = new Float64Array(total);
    this.nextOffset = new Array<number>(partitions).fill(0);
  }

  /** Before the records of one received frame or batch. */
  beginBatch(t: number): void {
    this.frames++;
    if (this.firstAt === 0) this.firstAt = t;
    this.batchStartUnique = this.unique;
  }

  /** One record; `partition` undefined skips the offset check (the relay assigns no offsets). */
  record(t: number, value: Buffer, partition?: number, offset?: number): void {
    if (partition !== undefined && offset !== undefined) {
      if (offset !== this.nextOffset[partition]) this.offsetGaps++;
      this.nextOffset[partition] = offset + 1;
    }
    if (value.length !== this.size) {
      this.badSize++;
      return;
    }
    const id = value.readUInt32LE(0);
    if (id >= this.total) {
      this.foreign++;
      return;
    }
    if (this.seen[id] !== 0) {
      this.duplicates++;
      return;
    }
    this.seen[id] = 1;
    this.latency[this.unique++] = t - value.readDoubleLE(4);
  }

  /** After the records of a batch; true once every id has been seen. */
  endBatch(t: number): boolean {
    if (this.unique > this.batchStartUnique) {
      this.lastAt = t;
      this.lastProgressAt = t;
      if (this.onHalf !== undefined && this.unique * 2 >= this.total) {
        const half = this.onHalf;
        this.onHalf = undefined;
        half(this.unique);
      }
    }
    return this.unique === this.total;
  }

  /** The figures of the result report; sorts the latencies, so call it once. */
  stats(): Record<string, number | null> {
    const elapsedMs = this.lastAt - this.firstAt;
    const lat = this.latency.subarray(0, this.unique).sort();
    let sum = 0;
    for (let i = 0; i < lat.length; i++) sum += lat[i]!;
    const recordsPerSec = elapsedMs > 0 ? (this.unique / elapsedMs) * 1000 : Number.NaN;
    return {
      records: this.unique,
      missing: this.total - this.unique,
      duplicates: this.duplicates,
      foreign: this.foreign,
      badSize: this.badSize,
      offsetGaps: this.offsetGaps,
      frames: this.frames,
      elapsedMs,
      recordsPerSec,
      mbPerSec: (recordsPerSec * this.size) / 1e6,
      p50Ms: percentile(lat, 50),
      p99Ms: percentile(lat, 99),
      maxMs: lat.length > 0 ? lat[lat.length - 1]! : null,
      meanMs: lat.length > 0 ? sum / lat.length : null,
    };
  }
}

/**
 * `done` on stdin (or stdin closing: the orchestrator is gone) means the producer finished; `finish` runs
 * once nothing new has arrived for `graceMs`.
 */
export function finishAfterProducer(tally: Tally, graceMs: number, isFinished: () => boolean, finish: () => void): void {
  let producerDone = false;
  const producerFinished = () => {
    if (producerDone) return;
    producerDone = true;
    tally.lastProgressAt = Math.max(tally.lastProgressAt, nowMs());
    const tick = setInterval(() => {
      if (isFinished()) return clearInterval(tick);
      if (nowMs() - tally.lastProgressAt >= graceMs) {
        clearInterval(tick);
        finish();
      }
    }, 100);
  };
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', (d: string) => {
    if (d.includes('done')) producerFinished();
  });
  process.stdin.on('end', producerFinished);
}
