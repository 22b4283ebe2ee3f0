import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { MAX_CONCURRENT_ATOMIC_WRITES, atomicWritesInFlight, writeFileAtomic } from 'tributary-broker/storage/atomic-file.js';

describe('writeFileAtomic', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
  });

  it('bounds how many writes hold files open at once, and every write lands whole', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tributary-atomic-'));
    dirs.push(dir);
    const n = MAX_CONCURRENT_ATOMIC_WRITES * 6;
    let max = 0;
    let done = false;
    const watch = (async () => {
      while (!done) {
        max = Math.max(max, atomicWritesInFlight());
        await new Promise((r) => setImmediate(r));
      }
    })();
    await Promise.all(Array.from({ length: n }, (_, i) => writeFileAtomic(path.join(dir, `f${i}`), `content ${i}`)));
    done = true;
    await watch;
    expect(max).toBeGreaterThan(1);
    expect(max).toBeLessThanOrEqual(MAX_CONCURRENT_ATOMIC_WRITES);
    expect(atomicWritesInFlight()).toBe(0);
    for (let i = 0; i < n; i++) expect(fs.readFileSync(path.join(dir, `f${i}`), 'utf8')).toBe(`content ${i}`);
    expect(fs.readdirSync(dir).filter((f) => f.endsWith('.tmp'))).toEqual([]);
  });
});
