/**
 * Room for the broker process's old generation between full garbage collections (`--heap-headroom-mb`,
 * docs/operations.md "Limits").
 *
 * V8 sizes the old generation from the live heap. A broker's live heap is small (20-30 MB with a few
 * partitions) and it allocates fast (about 30 MB/s at 10,000 records/s of 1 KiB): V8 started a full
 * collection every 300 ms (`--trace-incremental-marking`: 24 MB used of a 47 MB limit at each start), each
 * an 8-26 ms pause of every request on the broker, and its GC threads took about a third of the broker's
 * CPU. With the growing factor set so that the old generation may grow by about the headroom, the same
 * run (bench latency, W2) had 3 full collections in 18 s instead of 23-28. A heap already larger than the
 * headroom keeps V8's own factor, so the setting costs at most the headroom in memory.
 */
import { PerformanceObserver, constants } from 'node:perf_hooks';
import v8 from 'node:v8';

/** Factor 4, the most V8's own sizing grows the heap by. */
export const MAX_GROWING_PERCENT = 300;

/**
 * V8's `heap_growing_percent` (the next full collection at live x (1 + percent/100)) that gives `live`
 * bytes about `headroom` bytes of growth; 0 (V8's own factor) once the live heap is as large as that.
 */
export function growingPercent(liveBytes: number, headroomBytes: number): number {
  if (headroomBytes <= 0 || liveBytes >= headroomBytes) return 0;
  return Math.min(MAX_GROWING_PERCENT, Math.ceil((headroomBytes / Math.max(liveBytes, 1)) * 100));
}

export interface HeapHeadroom {
  /** The percent set last (0: V8's own). */
  readonly percent: number;
  stop(): void;
}

/**
 * Sets the growing factor for the current heap and again after each full collection, for the life of the
 * process (the factor is process-wide: one broker per process, as the CLI runs it). `setFlag` and
 * `liveBytes` are V8's unless a test passes its own.
 */
export function keepHeapHeadroom(
  headroomMb: number,
  deps: { setFlag?: (flag: string) => void; liveBytes?: () => number } = {},
): HeapHeadroom {
  const setFlag = deps.setFlag ?? ((flag: string) => v8.setFlagsFromString(flag));
  const liveBytes = deps.liveBytes ?? (() => v8.getHeapStatistics().used_heap_size);
  const headroom = headroomMb * 1024 * 1024;
  let percent = 0;
  const apply = () => {
    const p = growingPercent(liveBytes(), headroom);
    if (p === percent) return;
    setFlag(`--heap-growing-percent=${p}`);
    percent = p;
  };
  if (headroom <= 0) return { percent, stop: () => {} };
  apply();
  const observer = new PerformanceObserver((list) => {
    // The entries arrive after the collection: the heap then holds what survived plus a little since.
    if (list.getEntries().some((e) => (e as unknown as { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR)) apply();
  });
  observer.observe({ entryTypes: ['gc'] });
  return {
    get percent() {
      return percent;
    },
    stop: () => observer.disconnect(),
  };
}
