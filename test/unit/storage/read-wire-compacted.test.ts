/**
 * The segment files' wire path (LogReader.readWireFromDisk) over a compacted log, whose segments end in gaps
 * and whose reads step over them: the same records, bytes and nextOffset as read() + encodeBatch from every
 * offset (docs/architecture.md, "Storage", Fast paths), and as one RecordBatch v2 the bytes the Kafka
 * listener's Fetch encoded from read()'s records.
 */
import { describe, expect, it } from 'vitest';
import { encodeBatch, logRecordsToBatch } from 'tributary-protocol/batch.js';
import { asRecordBatch } from 'tributary-broker/kafka/apis/fetch.js';
import { Partition } from 'tributary-broker/partition/partition.js';
import { fillCompacted, useLogDir } from './compacted-logs.js';

const logs = useLogDir('trib-wire-compacted-');

describe('readWireFromDisk over a compacted log', () => {
  it('answers the records and the nextOffset of read() from every offset', async () => {
    const log = await fillCompacted(await logs.openLog('p'));
    const part = new Partition('t', 0, log);
    const tails = log.segmentInfos().filter((s) => s.compacted);
    expect(tails.length).toBeGreaterThan(1);
    let compared = 0;
    for (let offset = log.logStartOffset; offset < log.highWatermark; offset++) {
      for (const maxRecords of [1, 2, 3, 1000]) {
        const opts = { maxRecords, maxBytes: 1 << 20, isolation: 'read_uncommitted' as const };
        const res = await part.read(offset, opts);
        const disk = await part.readWireFromDisk(offset, opts, { topic: 't', extensions: true });
        if (!disk) {
          expect(res.records).toEqual([]);
          continue;
        }
        compared++;
        expect([disk.count, disk.nextOffset]).toEqual([res.records.length, res.nextOffset]);
        const trailer = { nextOffset: res.nextOffset, highWatermark: part.highWatermark, logStartOffset: part.earliest };
        expect(Buffer.compare(disk.frame, encodeBatch(logRecordsToBatch('t', 0, res.records, trailer), { extensions: true }))).toBe(0);
        const v2 = await part.readWireFromDisk(offset, opts, { topic: '', extensions: true, format: 'record_batch_v2' });
        // As the Kafka listener's Fetch answers: offsets keep their gaps as deltas, the batch ends at nextOffset - 1.
        expect(v2 && Buffer.compare(v2.frame, asRecordBatch(res.records, res.nextOffset, offset))).toBe(0);
      }
    }
    expect(compared).toBeGreaterThan(100);
  });
});
