/**
 * What a Produce batch's records cost the request's budget (kafka/apis/produce.ts): 256 bytes a record,
 * the bytes a compressed batch inflates to, and 100 bytes a header, each header charged before its record's
 * header objects are built, so a batch of millions of 2-byte headers is MESSAGE_TOO_LARGE (record_too_large)
 * before it is built.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';
import { RecordCursor } from 'tributary-protocol/record-batch/records.js';
import type { RecordHeaderV2 } from 'tributary-protocol/record-batch/types.js';
import { RecordBatchView } from 'tributary-protocol/record-batch/view.js';
import { HEADER_CHARGE_BYTES, type InflateBudget, RECORD_CHARGE_BYTES, recordsOf } from 'tributary-broker/kafka/apis/produce.js';
import type { KafkaRequestContext } from 'tributary-broker/kafka/context.js';

const ctx = { broker: { config: { maxRecordBytes: 1 << 20 } } } as unknown as KafkaRequestContext;
const budget = (left: number): InflateBudget => ({ left, turn: Promise.resolve() });

/** A batch of `records` records of `headers` headers each (the first with a value, the rest null). */
function batch(records: number, headers: number, compression: 'none' | 'gzip' = 'none'): RecordBatchView {
  const hs: RecordHeaderV2[] = Array.from({ length: headers }, (_, i) => ({ key: `h${i}`, value: i === 0 ? Buffer.from('v') : null }));
  const input = Array.from({ length: records }, (_, i) => ({ key: null, value: Buffer.from(`r${i}`), timestamp: 1000, headers: hs }));
  return new RecordBatchView(encodeRecordBatch({ records: input, compression })).validate();
}

async function refusal(p: Promise<unknown>): Promise<TributaryError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(TributaryError);
  return err as TributaryError;
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('the Produce budget charges headers', () => {
  it('100 bytes a header on top of 256 a record; a batch that fits exactly is taken, headers as the log stores them', async () => {
    expect(HEADER_CHARGE_BYTES).toBe(100);
    const b = budget(3 * RECORD_CHARGE_BYTES + 6 * HEADER_CHARGE_BYTES);
    const records = await recordsOf(ctx, batch(3, 2), b);
    expect(b.left).toBe(0);
    expect(records.map((r) => r.headers)).toEqual(
      Array.from({ length: 3 }, () => [
        { key: 'h0', value: Buffer.from('v') },
        // The null value kept apart from an empty one (StoredHeader, docs/kafka.md "Produce").
        { key: 'h1', value: Buffer.alloc(0), nullValue: true },
      ]),
    );
  });

  it('a header past the budget is record_too_large before that record builds its headers', async () => {
    const built = vi.spyOn(RecordCursor.prototype, 'headers');
    // The records, then the headers of two records, then one byte short of the third's.
    const b = budget(3 * RECORD_CHARGE_BYTES + 6 * HEADER_CHARGE_BYTES - 1);
    const err = await refusal(recordsOf(ctx, batch(3, 2), b));
    expect(err.code).toBe('record_too_large');
    expect(err.message).toMatch(/too many headers/);
    expect(built).toHaveBeenCalledTimes(2);
  });

  it('a record of a million 2-byte headers builds none of them', async () => {
    const built = vi.spyOn(RecordCursor.prototype, 'headers');
    const err = await refusal(recordsOf(ctx, batch(1, 1_000_000), budget(64 * 1024 * 1024)));
    expect(err.code).toBe('record_too_large');
    expect(built).not.toHaveBeenCalled();
  });

  it('records without headers are taken even when another batch overspent the budget while this one inflated', async () => {
    const view = batch(2, 0, 'gzip');
    const inflated = view.recordsData().length;
    let go!: () => void;
    const b: InflateBudget = { left: 2 * RECORD_CHARGE_BYTES + inflated, turn: new Promise<void>((resolve) => (go = resolve)) };
    const taking = recordsOf(ctx, view, b);
    go();
    await Promise.resolve(); // its inflating has started, bounded by what was left then
    b.left -= 1000; // another batch's inflated bytes, charged meanwhile
    expect(await taking).toHaveLength(2);
    expect(b.left).toBe(-1000);
  });

  it('the headers of a compressed batch are charged against what its inflated bytes left', async () => {
    const view = batch(1, 50, 'gzip');
    const inflated = view.recordsData().length;
    const exact = RECORD_CHARGE_BYTES + inflated + 50 * HEADER_CHARGE_BYTES;
    const b = budget(exact);
    expect((await recordsOf(ctx, view, b))[0]!.headers).toHaveLength(50);
    expect(b.left).toBe(0);
    expect((await refusal(recordsOf(ctx, batch(1, 50, 'gzip'), budget(exact - 1)))).message).toMatch(/too many headers/);
  });
});
