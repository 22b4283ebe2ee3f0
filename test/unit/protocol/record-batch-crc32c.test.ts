import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { crc32c, crc32cPure, crc32cRange, crc32cSliced } from 'tributary-protocol/record-batch/crc32c.js';

describe('protocol crc32c (the fallback SDK users get without @node-rs/crc32)', () => {
  it('the slicing-by-8 fallback agrees with the reference, chained too', () => {
    expect(crc32cSliced(Buffer.from('123456789'))).toBe(0xe3069283);
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 600 }), fc.uint8Array({ maxLength: 100 }), (a, b) => {
        const whole = Buffer.concat([a, b]);
        const ref = crc32cPure(whole);
        expect(crc32cSliced(whole)).toBe(ref);
        expect(crc32cSliced(b, crc32cSliced(a))).toBe(ref);
        expect(crc32c(whole)).toBe(ref);
        expect(crc32cRange(whole, a.length, whole.length)).toBe(crc32cPure(b));
      }),
      { numRuns: 500 },
    );
  });

  it('without @node-rs/crc32 (an SDK install) the codec runs on the pure-TS CRC', () => {
    // A child process whose require() cannot find the native package; it runs the built protocol package.
    const block =
      "const M = require('node:module'); const r = M._resolveFilename; M._resolveFilename = function (req, ...a) { if (req === '@node-rs/crc32') throw new Error('absent'); return r.call(this, req, ...a); };";
    const script = `
      const { crc32cImpl } = await import('tributary-protocol/record-batch/crc32c.js');
      const { encodeRecordBatch, RecordBatchView } = await import('tributary-protocol/record-batch/index.js');
      const b = encodeRecordBatch({ records: [{ key: null, value: Buffer.alloc(5000, 1), timestamp: 1 }], compression: 'gzip' });
      const v = new RecordBatchView(b).validate();
      const big = encodeRecordBatch({ records: [{ key: null, value: Buffer.alloc(5000, 1), timestamp: 1 }] });
      new RecordBatchView(big).validate();
      big[big.length - 1] ^= 1;
      console.log(JSON.stringify({ impl: crc32cImpl, n: v.decode().records[0].value.length, corrupt: new RecordBatchView(big).check()?.reason }));
    `;
    const dir = mkdtempSync(path.join(os.tmpdir(), 'rbv2-crc-'));
    try {
      const preload = path.join(dir, 'no-native.cjs');
      writeFileSync(preload, block);
      const out = execFileSync(process.execPath, ['--require', preload, '--input-type=module', '-e', script], {
        cwd: new URL('../../../', import.meta.url),
        encoding: 'utf8',
      });
      expect(JSON.parse(out)).toEqual({ impl: 'pure', n: 5000, corrupt: 'crc_mismatch' });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
