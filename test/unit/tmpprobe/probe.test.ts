import { expect, it, vi } from 'vitest';
import { retry } from 'tributary-client/retry.js';
import { TributaryError } from 'tributary-protocol/errors.js';
vi.mock('node:timers/promises', async (importOriginal) => {
  const real = await importOriginal<typeof import('node:timers/promises')>();
  return { ...real, setTimeout: (ms: number, v: unknown) => new Promise((r) => globalThis.setTimeout(() => r(v), ms)) };
});
it('probe', async () => {
  vi.useFakeTimers({ now: 1_000_000 });
  let calls = 0;
  const p = retry(async () => { calls++; throw new TributaryError('connection_lost'); }, { retries: 1000, initialDelayMs: 40, maxDelayMs: 40, maxElapsedMs: 300 });
  p.catch(() => {});
  await vi.advanceTimersByTimeAsync(0);
  console.log('calls after 0', calls, vi.getTimerCount());
  await vi.advanceTimersByTimeAsync(100);
  console.log('calls after 100', calls, Date.now());
  vi.useRealTimers();
});
