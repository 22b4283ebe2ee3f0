import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { LogRecord } from 'tributary-protocol/record.js';
import {
  decodeRecord,
  decodeRecords,
  encodedSize,
  encodeRecords,
  encodeRecordView,
  inspectRecord,
  RECORD_OVERHEAD,
  type StoredHeader,
} from 'tributary-broker/storage/record-codec.js';

const safeTs = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });
const optI64 = fc.oneof(fc.constant(-1), fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }));

const recordArb: fc.Arbitrary<LogRecord> = fc.record({
  offset: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
  timestamp: safeTs,
  key: fc.option(fc.uint8Array({ maxLength: 64 }).map((a) => Buffer.from(a)), { nil: null }),
  value: fc.uint8Array({ maxLength: 256 }).map((a) => Buffer.from(a)),
  headers: fc.array(
    fc.oneof(
      fc.record({
        key: fc.string({ unit: 'grapheme', maxLength: 12 }),
        value: fc.uint8Array({ maxLength: 32 }).map((a) => Buffer.from(a)),
      }),
      // A Kafka producer's null header value (StoredHeader).
      fc.string({ unit: 'grapheme', maxLength: 12 }).map((key) => ({ key, value: Buffer.alloc(0), nullValue: true as const })),
    ),
    { maxLength: 5 },
  ),
  producerId: fc.string({ unit: 'grapheme', maxLength: 20 }),
  epoch: optI64,
  sequence: optI64,
  attributes: fc.integer({ min: 0, max: 255 }),
});

function plain(r: LogRecord) {
  return {
    ...r,
    key: r.key === null ? null : Buffer.from(r.key).toString('hex'),
    value: Buffer.from(r.value).toString('hex'),
    headers: r.headers.map((h: StoredHeader) => ({ key: h.key, value: h.nullValue ? null : Buffer.from(h.value).toString('hex') })),
  };
}

describe('record codec', () => {
  it('round-trips arbitrary records (null key, empty value, headers, unicode producer ids)', () => {
    fc.assert(
      fc.property(fc.array(recordArb, { minLength: 1, maxLength: 8 }), (recs) => {
        const buf = encodeRecords(recs);
        expect(buf.length).toBe(recs.reduce((a, r) => a + encodedSize(r), 0));
        const { records, bytesRead, failure } = decodeRecords(buf);
        expect(failure).toBeNull();
        expect(bytesRead).toBe(buf.length);
        expect(records.map(plain)).toEqual(recs.map(plain));
      }),
      { numRuns: 300 },
    );
  });

  it('handles the explicit edge cases', () => {
    const r: LogRecord = {
      offset: 2 ** 40 + 7,
      timestamp: 1_700_000_000_123,
      key: null,
      value: Buffer.alloc(0),
      headers: [{ key: 'ключ-🔑', value: Buffer.alloc(0) }],
      producerId: 'prodücer-日本-🚀',
      epoch: -1,
      sequence: -1,
      attributes: 3,
    };
    const buf = encodeRecords([r]);
    const d = decodeRecord(buf, 0);
    expect(d.ok).toBe(true);
    if (!d.ok) return;
    expect(d.size).toBe(buf.length);
    expect(plain(d.record)).toEqual(plain(r));
    expect(encodedSize({ key: null, value: Buffer.alloc(0) })).toBe(RECORD_OVERHEAD);
  });

  it('encodeRecordView returns views equal to the input', () => {
    const r: LogRecord = {
      offset: 5,
      timestamp: 9,
      key: Buffer.from('k'),
      value: Buffer.from('value'),
      headers: [{ key: 'h', value: Buffer.from('x') }],
      producerId: 'p',
      epoch: 1,
      sequence: 2,
      attributes: 0,
    };
    const buf = Buffer.alloc(encodedSize(r));
    const { end, record } = encodeRecordView(buf, 0, r);
    expect(end).toBe(buf.length);
    expect(plain(record)).toEqual(plain(r));
    expect(record.value.buffer).toBe(buf.buffer);
  });

  it('reports truncated input as incomplete and never throws', () => {
    const r: LogRecord = {
      offset: 1,
      timestamp: 2,
      key: Buffer.from('key'),
      value: Buffer.from('some value'),
      headers: [{ key: 'a', value: Buffer.from('b') }],
      producerId: 'p',
      epoch: 0,
      sequence: 0,
      attributes: 0,
    };
    const buf = encodeRecords([r]);
    for (let n = 0; n < buf.length; n++) {
      const d = decodeRecord(buf.subarray(0, n), 0);
      expect(d.ok).toBe(false);
      if (!d.ok) expect(['incomplete', 'corrupt']).toContain(d.reason);
      // Truncation alone (length field intact) is always a torn record.
      if (n >= 4 && !d.ok) expect(d.reason).toBe('incomplete');
    }
  });

  it('detects every single-byte corruption', () => {
    const recs: LogRecord[] = [0, 1].map((i) => ({
      offset: i,
      timestamp: 1000 + i,
      key: i ? Buffer.from('key') : null,
      value: Buffer.from(`value-${i}`),
      headers: [{ key: 'h', value: Buffer.from('v') }],
      producerId: 'producer',
      epoch: 3,
      sequence: i,
      attributes: 0,
    }));
    const buf = encodeRecords(recs);
    for (let i = 0; i < buf.length; i++) {
      const copy = Buffer.from(buf);
      copy[i] ^= 0xff;
      const { records, failure } = decodeRecords(copy);
      expect(failure).not.toBeNull();
      const firstSize = encodedSize(recs[0]);
      expect(records.length).toBe(i < firstSize ? 0 : 1);
    }
  });

  it('never throws on random garbage', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), fc.nat(210), (bytes, pos) => {
        const buf = Buffer.from(bytes);
        const d = decodeRecord(buf, pos);
        const i = inspectRecord(buf, pos);
        expect(d.ok).toBe(i.ok);
      }),
      { numRuns: 1000 },
    );
  });

  it('rejects structurally inconsistent records even with a valid CRC', async () => {
    const { crc32c } = await import('tributary-broker/storage/crc32c.js');
    const r: LogRecord = {
      offset: 1,
      timestamp: 2,
      key: null,
      value: Buffer.from('abc'),
      headers: [],
      producerId: '',
      epoch: -1,
      sequence: -1,
      attributes: 0,
    };
    const buf = encodeRecords([r]);
    // Claim a larger value length than the record holds, then fix up the CRC.
    const valueLenPos = 4 + 4 + 8 + 8 + 1 + 2 + 8 + 8 + 4;
    buf.writeUInt32BE(1000, valueLenPos);
    buf.writeUInt32BE(crc32c(buf.subarray(8)), 4);
    expect(decodeRecord(buf, 0)).toEqual({ ok: false, reason: 'corrupt' });
    // Key length below -1.
    const buf2 = encodeRecords([r]);
    buf2.writeInt32BE(-5, valueLenPos - 4);
    buf2.writeUInt32BE(crc32c(buf2.subarray(8)), 4);
    expect(decodeRecord(buf2, 0)).toEqual({ ok: false, reason: 'corrupt' });
  });
});
