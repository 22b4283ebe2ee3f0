/**
 * The chunk walk over a segment's records (storage/segment-walk.ts, docs/architecture.md "Storage"): at
 * any chunk size the same records at the same positions as one decode of the whole file, a record split
 * across chunks or larger than one read again from its start, and where and why a walk ends.
 */
import { describe, expect, it } from 'vitest';
import { DECODE, INSPECT, type Verdict, walkSegment } from 'tributary-broker/storage/segment-walk.js';
import { decodeRecords, encodeRecords } from 'tributary-broker/storage/record-codec.js';

/** Records of 0 to 5,000 value bytes (some headers), as a segment file holds them. */
function file(count: number): Buffer {
  const recs = [];
  for (let i = 0; i < count; i++) {
    const headers = i % 4 === 0 ? [{ key: `h${i}`, value: Buffer.from('x') }] : [];
    recs.push({ offset: 100 + i, timestamp: 1000 + i, key: i % 3 === 0 ? null : Buffer.from(`k${i}`), value: Buffer.alloc((i * 997) % 5001, i), headers });
  }
  return encodeRecords(recs);
}

/** Reads of `bytes` as a file would give them (short past its end), logged. */
function reader(bytes: Buffer, reads: Array<[number, number]> = []) {
  return async (position: number, length: number) => {
    reads.push([position, length]);
    return bytes.subarray(Math.min(position, bytes.length), Math.min(position + length, bytes.length));
  };
}

describe('walkSegment', () => {
  const bytes = file(40);
  const whole = decodeRecords(bytes).records;

  it('gives every record once, in order and at its position, whatever the chunk size', async () => {
    for (const chunk of [1, 7, 64, 100, 1000, 4096, 5000, 65536]) {
      const seen: Array<{ offset: number; position: number; size: number }> = [];
      const chunks: Array<[Buffer, number]> = [];
      const out = await walkSegment(reader(bytes), 0, bytes.length, () => chunk, DECODE, (buf, p, r, position) => {
        // The view is the record's bytes in the chunk.
        expect(buf.readUInt32BE(p) + 4).toBe(r.size);
        seen.push({ offset: r.record.offset, position, size: r.size });
        return 'next';
      }, (buf, to) => chunks.push([buf, to]));
      expect(out).toEqual({ position: bytes.length, failure: null });
      expect(seen.map((s) => s.offset)).toEqual(whole.map((r) => r.offset));
      let at = 0;
      for (const s of seen) {
        expect(s.position).toBe(at);
        at += s.size;
      }
      // Every chunk's walk ends on a record boundary, and together they cover the file.
      expect(chunks.reduce((n, [, to]) => n + to, 0)).toBe(bytes.length);
    }
  });

  it('reads a record larger than the chunk whole, from its start', async () => {
    const reads: Array<[number, number]> = [];
    const sizes: number[] = [];
    await walkSegment(reader(bytes, reads), 0, bytes.length, () => 16, INSPECT, (_b, _p, r) => {
      sizes.push(r.size);
      return 'next';
    });
    expect(sizes.length).toBe(whole.length);
    // Each record's read starts at it and takes at least all of it.
    let at = 0;
    for (const size of sizes) {
      expect(reads.some(([pos, len]) => pos === at && len >= size)).toBe(true);
      at += size;
    }
  });

  it('stops before or after a record as the visitor says', async () => {
    const positions: number[] = [];
    await walkSegment(reader(bytes), 0, bytes.length, () => 1 << 20, INSPECT, (_b, _p, _r, position) => {
      positions.push(position);
      return 'next';
    });
    for (const [verdict, expected] of [
      ['stop', positions[3]],
      ['last', positions[4]],
    ] as Array<[Verdict, number]>) {
      let n = 0;
      const ends: number[] = [];
      const out = await walkSegment(reader(bytes), 0, bytes.length, () => 1 << 20, INSPECT, () => (n++ === 3 ? verdict : 'next'), (_b, to) => ends.push(to));
      expect(out).toEqual({ position: expected, failure: null });
      expect(ends).toEqual([expected]);
    }
  });

  it('ends at a torn tail, a corrupt record, a short file and a failed read, saying which', async () => {
    // Where the last record starts.
    let tailAt = 0;
    for (let i = 0; i < whole.length - 1; i++) tailAt += bytes.readUInt32BE(tailAt) + 4;
    // Torn: the last record cut by one byte.
    const torn = bytes.subarray(0, bytes.length - 1);
    expect(await walkSegment(reader(torn), 0, torn.length, () => 4096, INSPECT, () => 'next')).toEqual({ position: tailAt, failure: 'incomplete' });
    // Corrupt: a byte of the last record's value flipped (its CRC no longer matches).
    const bad = Buffer.from(bytes);
    bad[bad.length - 3]! ^= 1;
    expect(await walkSegment(reader(bad), 0, bad.length, () => 4096, DECODE, () => 'next')).toEqual({ position: tailAt, failure: 'corrupt' });
    // The file ends at a record boundary before `end`: nothing at the position.
    expect(await walkSegment(reader(bytes), 0, bytes.length + 10, () => 4096, INSPECT, () => 'next')).toEqual({ position: bytes.length, failure: 'short' });
    const err = new Error('EIO');
    const out = await walkSegment(async () => Promise.reject(err), 0, bytes.length, () => 4096, INSPECT, () => 'next');
    expect(out).toEqual({ position: 0, failure: 'unreadable', error: err });
  });
});
