import fc from 'fast-check';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { DEFAULT_MAX_FRAME_BYTES, FrameDecoder, encodeFrame, frameHeader } from 'tributary-protocol/frame.js';

/** Feed `data` to a fresh decoder in the given chunks and collect every body (as copies). */
function decodeChunks(chunks: Buffer[], max?: number): { bodies: Buffer[]; pending: number } {
  const d = new FrameDecoder(max);
  const bodies: Buffer[] = [];
  for (const c of chunks) for (const f of d.push(c)) bodies.push(Buffer.from(f));
  return { bodies, pending: d.pendingBytes };
}

/** Split `data` at the given cut points (any order, duplicates allowed: they yield empty chunks). */
function splitAt(data: Buffer, cuts: number[]): Buffer[] {
  const points = [...cuts].sort((a, b) => a - b);
  const out: Buffer[] = [];
  let prev = 0;
  for (const p of points) {
    out.push(data.subarray(prev, p));
    prev = p;
  }
  out.push(data.subarray(prev));
  return out;
}

function expectTributary(fn: () => unknown, code: string): TributaryError {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(TributaryError);
  expect((caught as TributaryError).code).toBe(code);
  return caught as TributaryError;
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('encodeFrame', () => {
  it('writes a 4-byte big-endian length that does not count itself', () => {
    const f = encodeFrame(Buffer.from([1, 2, 3]));
    expect([...f]).toEqual([0, 0, 0, 3, 1, 2, 3]);
  });

  it('encodes strings as UTF-8 and counts bytes, not characters', () => {
    const f = encodeFrame('é€😀');
    const body = Buffer.from('é€😀', 'utf8');
    expect(f.readUInt32BE(0)).toBe(body.length);
    expect(body.length).toBe(2 + 3 + 4);
    expect(f.subarray(4).equals(body)).toBe(true);
  });

  it('encodes a zero-length body as just the header', () => {
    expect([...encodeFrame(Buffer.alloc(0))]).toEqual([0, 0, 0, 0]);
    expect([...encodeFrame('')]).toEqual([0, 0, 0, 0]);
  });

  it('frameHeader matches the header encodeFrame writes', () => {
    const body = Buffer.alloc(70_000, 7);
    expect(frameHeader(body.length).equals(encodeFrame(body).subarray(0, 4))).toBe(true);
    expect([...frameHeader(0x01020304)]).toEqual([1, 2, 3, 4]);
  });
});

describe('FrameDecoder', () => {
  it('round-trips a single frame pushed whole', () => {
    const d = new FrameDecoder();
    const out = d.push(encodeFrame('PUBLISH topic=t message=hello'));
    expect(out.map((b) => b.toString('utf8'))).toEqual(['PUBLISH topic=t message=hello']);
    expect(d.pendingBytes).toBe(0);
  });

  it('returns several frames from one chunk, in order', () => {
    const bodies = ['A', '', 'CCC', 'x'.repeat(1000)];
    const wire = Buffer.concat(bodies.map((b) => encodeFrame(b)));
    const { bodies: got, pending } = decodeChunks([wire]);
    expect(got.map((b) => b.toString())).toEqual(bodies);
    expect(pending).toBe(0);
  });

  it('yields zero-length frames (keepalives) as empty bodies', () => {
    const wire = Buffer.concat([encodeFrame(''), encodeFrame('a'), encodeFrame(''), encodeFrame('')]);
    const { bodies } = decodeChunks([wire]);
    expect(bodies.map((b) => b.length)).toEqual([0, 1, 0, 0]);
    // byte by byte too
    const one = decodeChunks([...wire].map((b) => Buffer.from([b])));
    expect(one.bodies.map((b) => b.length)).toEqual([0, 1, 0, 0]);
  });

  it('holds partial frames and reports their bytes as pending', () => {
    const d = new FrameDecoder();
    const wire = encodeFrame('hello world');
    expect(d.push(wire.subarray(0, 2))).toEqual([]);
    expect(d.pendingBytes).toBe(2);
    expect(d.push(wire.subarray(2, 9))).toEqual([]);
    expect(d.pendingBytes).toBe(9);
    const out = d.push(wire.subarray(9));
    expect(out.map((b) => b.toString())).toEqual(['hello world']);
    expect(d.pendingBytes).toBe(0);
  });

  it('ignores empty chunks', () => {
    const d = new FrameDecoder();
    expect(d.push(Buffer.alloc(0))).toEqual([]);
    expect(d.pendingBytes).toBe(0);
    const wire = encodeFrame('ab');
    d.push(wire.subarray(0, 3));
    expect(d.push(Buffer.alloc(0))).toEqual([]);
    expect(d.pendingBytes).toBe(3);
    expect(d.push(wire.subarray(3)).map((b) => b.toString())).toEqual(['ab']);
  });

  it('splitting a stream at every possible byte boundary yields the same bodies', () => {
    const bodies = [Buffer.from('first'), Buffer.alloc(0), Buffer.from([0xba, 0x7c, 0, 1, 2]), Buffer.from('last one')];
    const wire = Buffer.concat(bodies.map((b) => encodeFrame(b)));
    for (let cut = 0; cut <= wire.length; cut++) {
      const { bodies: got, pending } = decodeChunks([wire.subarray(0, cut), wire.subarray(cut)]);
      expect(got).toEqual(bodies);
      expect(pending).toBe(0);
    }
  });

  it('property: arbitrary bodies, arbitrary chunking, and one byte at a time all yield the same bodies', () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint8Array({ maxLength: 64 }), { maxLength: 12 }),
        fc.array(fc.nat(), { maxLength: 20 }),
        (raw, cutSeeds) => {
          const bodies = raw.map((u) => Buffer.from(u));
          const wire = Buffer.concat(bodies.map((b) => encodeFrame(b)));
          const cuts = cutSeeds.map((s) => s % (wire.length + 1));
          const chunked = decodeChunks(splitAt(wire, cuts));
          expect(chunked.bodies).toEqual(bodies);
          expect(chunked.pending).toBe(0);
          const bytewise = decodeChunks([...wire].map((b) => Buffer.from([b])));
          expect(bytewise.bodies).toEqual(bodies);
          expect(bytewise.pending).toBe(0);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('property: pendingBytes equals the bytes of the incomplete tail after each push', () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 20 }), { minLength: 1, maxLength: 6 }), fc.array(fc.nat(), { maxLength: 10 }), (raw, cutSeeds) => {
        const wire = Buffer.concat(raw.map((u) => encodeFrame(Buffer.from(u))));
        const chunks = splitAt(wire, cutSeeds.map((s) => s % (wire.length + 1)));
        const d = new FrameDecoder();
        let fed = 0;
        let consumed = 0;
        for (const c of chunks) {
          fed += c.length;
          for (const f of d.push(c)) consumed += 4 + f.length;
          expect(d.pendingBytes).toBe(fed - consumed);
        }
        expect(d.pendingBytes).toBe(0);
      }),
      { numRuns: 200 },
    );
  });

  it('bodies returned earlier are not altered by later pushes', () => {
    const d = new FrameDecoder();
    const wire = Buffer.concat([encodeFrame('abc'), encodeFrame('def')]);
    const first = d.push(wire.subarray(0, 9)); // frame 1 + 2 bytes of header 2
    expect(first.map((b) => b.toString())).toEqual(['abc']);
    const second = d.push(wire.subarray(9));
    expect(second.map((b) => b.toString())).toEqual(['def']);
    expect(first[0]?.toString()).toBe('abc');
  });

  describe('maximum frame size', () => {
    it('a declared length of 0xFFFFFFFF throws frame_too_large without allocating a body buffer', () => {
      const allocs: number[] = [];
      for (const fn of ['alloc', 'allocUnsafe', 'allocUnsafeSlow'] as const) {
        const orig = Buffer[fn].bind(Buffer) as (size: number, ...rest: unknown[]) => Buffer;
        vi.spyOn(Buffer, fn).mockImplementation(((size: number, ...rest: unknown[]) => {
          allocs.push(size);
          return orig(size, ...rest);
        }) as never);
      }
      const d = new FrameDecoder();
      const err = expectTributary(() => d.push(Buffer.from([0xff, 0xff, 0xff, 0xff])), 'frame_too_large');
      expect(err.fields.max).toBe(DEFAULT_MAX_FRAME_BYTES);
      expect(err.fields.declared).toBe(0xffffffff);
      expect(err.errorClass).toBe('validation');
      expect(err.retriable).toBe(false);
      expect(d.pendingBytes).toBeLessThanOrEqual(4);
      // Header split across chunks: the decoder assembles it in a small scratch buffer (proves the spy sees
      // the decoder's allocations), and still refuses before allocating anything for the body.
      const split = new FrameDecoder();
      for (const b of [0xff, 0xff, 0xff]) expect(split.push(Buffer.from([b]))).toEqual([]);
      expectTributary(() => split.push(Buffer.from([0xff])), 'frame_too_large');
      expect(split.pendingBytes).toBeLessThanOrEqual(4);
      expect(allocs.length).toBeGreaterThan(0);
      expect(Math.max(...allocs)).toBeLessThanOrEqual(1024);
    });

    it('detects the oversized length when the header arrives one byte at a time', () => {
      const d = new FrameDecoder();
      expect(d.push(Buffer.from([0xff]))).toEqual([]);
      expect(d.push(Buffer.from([0xff]))).toEqual([]);
      expect(d.push(Buffer.from([0xff]))).toEqual([]);
      expectTributary(() => d.push(Buffer.from([0xff])), 'frame_too_large');
      expect(d.pendingBytes).toBe(4);
    });

    it('detects the oversized length even when some body bytes came with the header', () => {
      const d = new FrameDecoder(100);
      const chunk = Buffer.concat([frameHeader(101), Buffer.alloc(10)]);
      const err = expectTributary(() => d.push(chunk), 'frame_too_large');
      expect(err.fields).toMatchObject({ max: 100, declared: 101 });
      expect(d.pendingBytes).toBeLessThan(100);
    });

    it('accepts a length exactly at the maximum (small configured maximum)', () => {
      const d = new FrameDecoder(16);
      const body = Buffer.from('0123456789abcdef');
      expect(body.length).toBe(16);
      const out = d.push(encodeFrame(body));
      expect(out).toHaveLength(1);
      expect(out[0]?.equals(body)).toBe(true);
      expectTributary(() => new FrameDecoder(16).push(encodeFrame(Buffer.alloc(17))), 'frame_too_large');
    });

    it('accepts a header declaring exactly the default maximum and waits for the body', () => {
      const d = new FrameDecoder();
      expect(d.push(frameHeader(DEFAULT_MAX_FRAME_BYTES))).toEqual([]);
      expect(d.pendingBytes).toBe(4);
      expect(d.push(Buffer.alloc(1024))).toEqual([]);
      expect(d.pendingBytes).toBe(4 + 1024);
      expectTributary(() => new FrameDecoder().push(frameHeader(DEFAULT_MAX_FRAME_BYTES + 1)), 'frame_too_large');
    });

    it('a maximum of 0 allows only keepalives', () => {
      const d = new FrameDecoder(0);
      expect(d.push(encodeFrame('')).map((b) => b.length)).toEqual([0]);
      expectTributary(() => d.push(encodeFrame('x')), 'frame_too_large');
    });

    it('next(max) takes one frame at a time, each header checked against the max of the moment (never above the maximum)', () => {
      const d = new FrameDecoder(100);
      d.append(Buffer.concat([encodeFrame('small'), encodeFrame(Buffer.alloc(50)), frameHeader(101)]));
      expect(d.next(10)?.toString()).toBe('small');
      // The second frame is complete, but above this max: refused by its header, whatever follows it.
      expect(expectTributary(() => d.next(10), 'frame_too_large').fields).toMatchObject({ max: 10, declared: 50 });
      expect(d.next(1000)?.length).toBe(50);
      expect(expectTributary(() => d.next(1000), 'frame_too_large').fields).toMatchObject({ max: 100, declared: 101 });
      const partial = new FrameDecoder(100);
      partial.append(frameHeader(20));
      expect(partial.next()).toBeUndefined();
      expect(partial.pendingBytes).toBe(4);
    });
  });
});

describe('FrameDecoder with an allocator', () => {
  it('assembles a frame cut across chunks in memory from `alloc`; a frame inside one chunk stays a view of it', () => {
    const asked: number[] = [];
    const given: Buffer[] = [];
    const d = new FrameDecoder(DEFAULT_MAX_FRAME_BYTES, (n) => {
      asked.push(n);
      const b = Buffer.alloc(n + 10).subarray(0, n);
      given.push(b);
      return b;
    });
    const big = Buffer.alloc(50_000, 7);
    const small = Buffer.from('hello');
    const wire = Buffer.concat([encodeFrame(big), encodeFrame(small)]);
    const frames = [...d.push(wire.subarray(0, 20_000)), ...d.push(wire.subarray(20_000))];
    expect(frames.map((f) => f.length)).toEqual([50_000, 5]);
    expect(frames[0]!.equals(big)).toBe(true);
    expect(asked).toEqual([50_000]);
    expect(frames[0]!.buffer).toBe(given[0]!.buffer);
    expect(frames[1]!.toString()).toBe('hello');
  });
});
