/** Compacted logs for the truncation tests (docs/architecture.md "Storage", Compaction). */
import type { LogRecord } from 'tributary-protocol/record.js';
import type { PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { useTempLogs } from '../../helpers/temp-logs.js';

const T0 = 1_700_000_000_000;

/** Every record of the log, in order. */
export async function readAll(log: PartitionLog): Promise<LogRecord[]> {
  const out: LogRecord[] = [];
  let next = log.logStartOffset;
  while (next < log.logEndOffset) {
    const got = await log.read(next, { maxRecords: 1000, maxBytes: 1 << 20 });
    if (got.length === 0) break;
    out.push(...got);
    next = got[got.length - 1]!.offset + 1;
  }
  return out;
}

/** Appends 200 records over 13 keys (every 7th without a key) and compacts: the closed segments have gaps. */
export async function fillCompacted(log: PartitionLog): Promise<PartitionLog> {
  for (let i = 0; i < 200; i++) {
    const key = i % 7 === 0 ? null : Buffer.from(`key-${i % 13}`);
    const r = await log.append([{ key, value: Buffer.from(`v${i}-${'p'.repeat(i % 9)}`), timestamp: T0 + i }]);
    log.setHighWatermark(r.lastOffset + 1);
  }
  await log.compact({ now: T0 });
  return log;
}

/**
 * A cut inside a closed compacted segment, two past a record followed by a gap of at least 3 offsets, with
 * at least `segmentsAfter` segments after that one.
 */
export async function cutAfterRecord(log: PartitionLog, segmentsAfter = 1): Promise<{ cut: number; base: number }> {
  const all = await readAll(log);
  for (const s of log.segmentInfos().slice(0, -segmentsAfter)) {
    if (!s.compacted) continue;
    const inSeg = all.filter((r) => r.offset >= s.baseOffset && r.offset < s.nextOffset);
    for (let i = 0; i + 1 < inSeg.length; i++) {
      if (inSeg[i + 1]!.offset - inSeg[i]!.offset >= 3) return { cut: inSeg[i]!.offset + 2, base: s.baseOffset };
    }
  }
  throw new Error('no gap in a compacted segment');
}

/**
 * The truncation tests' logs: a temp directory per test (`dir()`), logs opened in it with small segments
 * and a fine index, closed (and mocks restored) after each test. `forget` drops a log closed by the test.
 */
export function useLogDir(prefix: string): { dir: () => string; openLog: (name: string) => Promise<PartitionLog>; forget: (log: PartitionLog) => void } {
  const logs = useTempLogs(prefix, { flush: 'always', segmentBytes: 600, indexIntervalBytes: 64, tailCacheBytes: 0 });
  return { dir: () => logs.dir, openLog: (name) => logs.open(name), forget: (log) => logs.forget(log) };
}
