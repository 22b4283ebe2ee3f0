/**
 * FrameReader (packages/protocol/src/frame-reader.ts): the plain TCP client's read path, where each read
 * lands in the buffer the reader hands out. Reads are simulated as a socket does them: at most what
 * has arrived, at most the buffer's length. Every frame handed out is kept as it was handed out (not
 * copied) and checked at the end, so a frame that aliased the reused read buffer shows up overwritten.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { encodeFrame } from 'tributary-protocol/frame.js';
import { DIRECT_READ_MIN, FrameReader } from 'tributary-protocol/frame-reader.js';

/** A body whose bytes depend on its index and position, so a misplaced byte cannot go unnoticed. */
function body(i: number, len: number): Buffer {
  const b = Buffer.allocUnsafe(len);
  for (let j = 0; j < len; j++) b[j] = (i * 131 + j * 7 + (j >> 8)) & 0xff;
  return b;
}

interface Fed {
  frames: Buffer[];
  /** Every read: the buffer it landed in and how many bytes. */
  reads: { target: Buffer; n: number }[];
}

/**
 * Feeds `stream` to `reader`, arriving in the pieces `cuts` makes; every read takes what has arrived,
 * up to the length of the buffer the reader hands out.
 */
function feed(reader: FrameReader, stream: Buffer, cuts: number[]): Fed {
  const points = [...new Set(cuts.filter((c) => c > 0 && c < stream.length))].sort((a, b) => a - b);
  points.push(stream.length);
  const out: Fed = { frames: [], reads: [] };
  let read = 0;
  for (const arrived of points) {
    while (read < arrived) {
      const target = reader.buffer();
      expect(target.length).toBeGreaterThan(0);
      const n = Math.min(target.length, arrived - read);
      stream.copy(target, 0, read, read + n);
      read += n;
      out.reads.push({ target, n });
      out.frames.push(...reader.read(n));
    }
  }
  return out;
}

function expectBodies(got: Buffer[], want: Buffer[]): void {
  expect(got.length).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    if (!got[i]!.equals(want[i]!)) throw new Error(`frame ${i} (${want[i]!.length} bytes) differs`);
  }
}

describe('FrameReader', () => {
  it('hands out every frame byte for byte, for arrivals cut anywhere (small thresholds)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.integer({ min: 0, max: 40 }), fc.integer({ min: 60, max: 400 })), { minLength: 1, maxLength: 12 }),
        fc.array(fc.nat(), { maxLength: 20 }),
        fc.integer({ min: 1, max: 100 }),
        (lengths, cutSeeds, directMin) => {
          const bodies = lengths.map((len, i) => body(i, len));
          const stream = Buffer.concat(bodies.map((b) => encodeFrame(b)));
          const cuts = cutSeeds.map((c) => c % (stream.length + 1));
          // A read buffer barely larger than a small frame: compaction and reads into slivers get exercised.
          const reader = new FrameReader(10_000, directMin, 0);
          const fed = feed(reader, stream, cuts);
          expectBodies(fed.frames, bodies);
          expect(reader.pendingBytes).toBe(0);
        },
      ),
      { numRuns: 500 },
    );
  });

  it('with the real threshold: every split point of large and small frames back to back', () => {
    const lengths = [10, DIRECT_READ_MIN + 5, 0, 3, 200_000, DIRECT_READ_MIN - 1, DIRECT_READ_MIN, 7, 150_000, 1];
    const bodies = lengths.map((len, i) => body(i, len));
    const stream = Buffer.concat(bodies.map((b) => encodeFrame(b)));
    // Every frame boundary, and each byte around it (headers split across reads, a read ending right after
    // a header, small and large frames in one read).
    const cuts = new Set<number>();
    let at = 0;
    for (const b of bodies) {
      for (let d = -5; d <= 9; d++) cuts.add(at + d);
      at += 4 + b.length;
    }
    for (const cut of cuts) {
      if (cut <= 0 || cut >= stream.length) continue;
      const fed = feed(new FrameReader(), stream, [cut]);
      expectBodies(fed.frames, bodies);
    }
    // And everything at once, and in 1000-byte pieces.
    expectBodies(feed(new FrameReader(), stream, []).frames, bodies);
    expectBodies(feed(new FrameReader(), stream, Array.from({ length: Math.ceil(stream.length / 1000) }, (_, i) => i * 1000)).frames, bodies);
  });

  it('reads large bodies straight into the buffers it hands out, with no assembly copy', () => {
    const small = body(1, 100);
    const bigs = [body(2, 1_000_000), body(3, 300_000), body(4, DIRECT_READ_MIN)];
    const stream = Buffer.concat([small, ...bigs, small].map((b) => encodeFrame(b)));
    // Arrivals of 64 KiB, as a socket's reads would be.
    const cuts = Array.from({ length: Math.ceil(stream.length / 65536) }, (_, i) => i * 65536);
    const fed = feed(new FrameReader(), stream, cuts);
    expectBodies(fed.frames, [small, ...bigs, small]);
    const into = (f: Buffer) => fed.reads.filter((r) => r.target.buffer === f.buffer && r.target.byteOffset >= f.byteOffset && r.target.byteOffset < f.byteOffset + f.length);
    // The first large frame's header came with the small frame before it: the rest of its body, read
    // into its own memory at the right offset, in as many reads as pieces arrived.
    const first = into(fed.frames[1]!);
    expect(first.length).toBeGreaterThan(0);
    expect(first.length).toBeLessThanOrEqual(Math.ceil(bigs[0]!.length / 65536) + 1);
    for (const r of first) expect(r.target.byteOffset + r.target.length).toBe(fed.frames[1]!.byteOffset + fed.frames[1]!.length);
    // A large frame after a large one: its header read alone, so every byte of its body lands in place.
    for (const f of fed.frames.slice(2, 4)) {
      const reads = into(f);
      expect(reads[0]!.target.byteOffset).toBe(f.byteOffset);
      expect(reads.reduce((sum, r) => sum + r.n, 0)).toBe(f.length);
    }
  });

  it('frames handed out keep their bytes after later reads reuse the read buffer', () => {
    const reader = new FrameReader();
    const first = body(3, 500);
    const kept = feed(reader, encodeFrame(first), []).frames;
    expectBodies(kept, [first]);
    // Many more frames through the same read buffer, one read each, then a partial one left in it.
    for (let i = 0; i < 200; i++) feed(reader, encodeFrame(body(100 + i, 500)), []);
    const target = reader.buffer();
    target.fill(0xee);
    reader.read(target.length >= 3 ? 3 : 1);
    expectBodies(kept, [first]);
  });

  it('refuses a hostile length before allocating anything for it', () => {
    const reader = new FrameReader(1000);
    const head = Buffer.alloc(4);
    head.writeUInt32BE(0xfffffff0, 0);
    const target = reader.buffer();
    head.copy(target);
    let caught: unknown;
    try {
      reader.read(4);
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(TributaryError);
    expect((caught as TributaryError).code).toBe('frame_too_large');
    expect((caught as TributaryError).fields).toMatchObject({ max: 1000, declared: 0xfffffff0 });
    // The next read target is still the shared read buffer: no body buffer was made for that length.
    expect(reader.buffer().buffer).toBe(target.buffer);
  });
});

/**
 * The broker's use: frames taken one at a time when it is ready for them (next()), possibly long after
 * their bytes came and while reads go on, with a limit on what may be read into a buffer of its own.
 */
describe('FrameReader taken one frame at a time', () => {
  it('hands out every frame in order for arrivals cut anywhere, whenever next() runs', () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.integer({ min: 0, max: 40 }), fc.integer({ min: 60, max: 400 })), { minLength: 1, maxLength: 12 }),
        fc.array(fc.nat(), { maxLength: 20 }),
        fc.integer({ min: 1, max: 100 }),
        fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 1, maxLength: 30 }),
        fc.integer({ min: 0, max: 400 }),
        (lengths, cutSeeds, directMin, takes, above) => {
          const bodies = lengths.map((len, i) => body(i, len));
          const stream = Buffer.concat(bodies.map((b) => encodeFrame(b)));
          const cuts = [...new Set(cutSeeds.map((c) => c % (stream.length + 1)).filter((c) => c > 0 && c < stream.length))].sort((a, b) => a - b);
          cuts.push(stream.length);
          // Frames longer than directMax grow the read buffer as they come instead.
          const directMax = directMin + above;
          const direct: number[] = [];
          const reader = new FrameReader(
            10_000,
            directMin,
            0,
            (n) => {
              const b = Buffer.allocUnsafe(n);
              direct.push(n);
              return b;
            },
            directMax,
          );
          const got: Buffer[] = [];
          let read = 0;
          let step = 0;
          // How many frames the caller takes at each point: 0 holds them (the reads go on meanwhile).
          const take = (): void => {
            for (let k = takes[step++ % takes.length]!; k > 0; k--) {
              const f = reader.next();
              if (f === undefined) return;
              got.push(f);
            }
          };
          for (const arrived of cuts) {
            while (read < arrived) {
              const target = reader.buffer();
              expect(target.length).toBeGreaterThan(0);
              // next() between buffer() and the read landing: it must not move what the read lands after.
              take();
              const n = Math.min(target.length, arrived - read);
              stream.copy(target, 0, read, read + n);
              read += n;
              reader.wrote(n);
              take();
            }
          }
          for (let f = reader.next(); f !== undefined; f = reader.next()) got.push(f);
          expectBodies(got, bodies);
          expect(reader.pendingBytes).toBe(0);
          // What was allocated: frames of directMin or more (read into, or copied out whole when above directMax).
          expect(direct.length).toBeLessThanOrEqual(bodies.filter((b) => b.length >= directMin).length);
          for (const n of direct) expect(n).toBeGreaterThanOrEqual(directMin);
        },
      ),
      { numRuns: 1000 },
    );
  });

  it('reads a large frame into its own buffer only within the limit it is given; next() refuses one past it', () => {
    const allocs: number[] = [];
    const reader = new FrameReader(1_000_000, 1000, 0, (n) => {
      allocs.push(n);
      return Buffer.allocUnsafe(n);
    });
    const big = encodeFrame(body(1, 5000));
    const first = reader.buffer(4000);
    big.copy(first, 0, 0, 100);
    reader.wrote(100);
    // Within 4000 the 5000-byte frame stays in the read buffer, unallocated, and next() refuses it.
    const second = reader.buffer(4000);
    expect(allocs).toEqual([]);
    expect(second.buffer).toBe(first.buffer);
    expect(() => reader.next(4000)).toThrow(TributaryError);
    // Once the limit allows it (authenticated), it goes on in a buffer of its own.
    const third = reader.buffer(1_000_000);
    expect(allocs).toEqual([5000]);
    expect(third.length).toBe(5000 - 96);
    big.copy(third, 0, 100);
    reader.wrote(third.length);
    expectBodies([reader.next()!], [body(1, 5000)]);
  });

  it('small frames held while a large one is read come out before it, and bytes after it after it', () => {
    const reader = new FrameReader(1_000_000, 1000, 0);
    const bodies = [body(1, 10), body(2, 20), body(3, 3000), body(4, 30)];
    const stream = Buffer.concat(bodies.map((b) => encodeFrame(b)));
    let read = 0;
    while (read < stream.length) {
      const target = reader.buffer();
      const n = Math.min(target.length, stream.length - read, 700);
      stream.copy(target, 0, read, read + n);
      read += n;
      reader.wrote(n); // nothing taken until the end
    }
    const got: Buffer[] = [];
    for (let f = reader.next(); f !== undefined; f = reader.next()) got.push(f);
    expectBodies(got, bodies);
  });
});
