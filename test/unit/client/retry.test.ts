/**
 * retry() and backoffDelay(): exponential growth with a cap, full jitter within bounds, only retriable
 * errors retried, the attempt budget, the abort signal during the wait, and the maxElapsedMs bound.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { DEFAULT_RETRY, backoffDelay, isRetriable, retry } from 'tributary-client/retry.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { track } from '../../helpers/fake-timers.js';

// retry() waits with node:timers/promises' setTimeout, which vitest's fake timers do not reach (vitest 4.1):
// here it runs on the global setTimeout instead, which they do fake (on real timers it behaves as Node's,
// an abort rejecting with an AbortError whose cause is the signal's reason).
vi.mock('node:timers/promises', async (importOriginal) => {
  const real = await importOriginal<typeof import('node:timers/promises')>();
  const setTimeout = <T>(ms?: number, value?: T, opts: { signal?: AbortSignal } = {}): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const signal = opts.signal;
      const aborted = () => Object.assign(new Error('The operation was aborted', { cause: signal?.reason }), { name: 'AbortError', code: 'ABORT_ERR' });
      if (signal?.aborted) return reject(aborted());
      const onAbort = () => {
        globalThis.clearTimeout(timer);
        reject(aborted());
      };
      const timer = globalThis.setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve(value as T);
      }, ms);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  return { ...real, setTimeout };
});

afterEach(() => {
  vi.useRealTimers();
  vi.restoreAllMocks();
});

const justBelowOne = () => 0.999999;

describe('backoffDelay', () => {
  it('grows by the factor from the initial delay and is capped at maxDelayMs', () => {
    const opts = { initialDelayMs: 10, maxDelayMs: 300, factor: 2 };
    const caps = Array.from({ length: 10 }, (_, a) => backoffDelay(a, opts, justBelowOne));
    expect(caps).toEqual([9, 19, 39, 79, 159, 299, 299, 299, 299, 299]);
    // a factor of 3
    expect([0, 1, 2].map((a) => backoffDelay(a, { initialDelayMs: 10, maxDelayMs: 1000, factor: 3 }, justBelowOne))).toEqual([9, 29, 89]);
    // huge attempt numbers stay capped (no Infinity/NaN)
    expect(backoffDelay(5000, opts, justBelowOne)).toBe(299);
  });

  it('uses the documented defaults', () => {
    expect(backoffDelay(0, {}, justBelowOne)).toBe(DEFAULT_RETRY.initialDelayMs - 1);
    expect(backoffDelay(100, {}, justBelowOne)).toBe(DEFAULT_RETRY.maxDelayMs - 1);
  });

  it('full jitter: every delay is within [0, cap) and the spread covers the range', () => {
    const opts = { initialDelayMs: 100, maxDelayMs: 1000, factor: 2 };
    for (const attempt of [0, 2, 6]) {
      const cap = Math.min(1000, 100 * 2 ** attempt);
      const samples = Array.from({ length: 2000 }, () => backoffDelay(attempt, opts));
      expect(samples.filter((d) => !Number.isInteger(d) || d < 0 || d >= cap)).toEqual([]);
      // jitter really is applied: low and high ends are both hit, and the mean is near cap/2
      expect(Math.min(...samples)).toBeLessThan(cap * 0.1);
      expect(Math.max(...samples)).toBeGreaterThan(cap * 0.9);
      const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
      expect(mean).toBeGreaterThan(cap * 0.4);
      expect(mean).toBeLessThan(cap * 0.6);
    }
    expect(backoffDelay(3, opts, () => 0)).toBe(0);
  });
});

describe('retry', () => {
  const retriable = () => new TributaryError('connection_lost');

  it('retries retriable errors and returns the first success, passing the attempt number', async () => {
    const attempts: number[] = [];
    const retries: Array<[string, number, number]> = [];
    const v = await retry(
      async (attempt) => {
        attempts.push(attempt);
        if (attempt < 3) throw retriable();
        return 'done';
      },
      { initialDelayMs: 4, maxDelayMs: 8, onRetry: (err, attempt, delay) => retries.push([(err as TributaryError).code, attempt, delay]) },
    );
    expect(v).toBe('done');
    expect(attempts).toEqual([0, 1, 2, 3]);
    expect(retries.map(([c, a]) => [c, a])).toEqual([
      ['connection_lost', 1],
      ['connection_lost', 2],
      ['connection_lost', 3],
    ]);
    // the delays passed to onRetry respect the growing, capped bound of each attempt
    retries.forEach(([, attempt, delay]) => {
      expect(delay).toBeGreaterThanOrEqual(0);
      expect(delay).toBeLessThan(Math.min(8, 4 * 2 ** (attempt - 1)));
    });
  });

  it.each([
    ['GEN_MISMATCH'],
    ['invalid_parameter'],
    ['offset_regression'],
    ['client_closed'],
    ['consumer_rebalancing'],
    ['a-code-the-registry-does-not-know'],
  ])('does not retry the non-retriable %s', async (code) => {
    let calls = 0;
    const err = new TributaryError(code);
    await expect(
      retry(
        async () => {
          calls++;
          throw err;
        },
        { initialDelayMs: 1 },
      ),
    ).rejects.toBe(err);
    expect(calls).toBe(1);
    expect(isRetriable(err)).toBe(false);
  });

  it('does not retry errors that are not TributaryErrors', async () => {
    let calls = 0;
    await expect(
      retry(async () => {
        calls++;
        throw new TypeError('bug');
      }),
    ).rejects.toBeInstanceOf(TypeError);
    expect(calls).toBe(1);
  });

  it.each([['NOT_LEADER'], ['NOT_COORDINATOR'], ['COORDINATOR_LOADING'], ['not_ready'], ['request_timeout'], ['throttled'], ['storage_error']])(
    'retries %s (the registry marks it retriable)',
    async (code) => {
      let calls = 0;
      await retry(
        async () => {
          if (++calls < 2) throw new TributaryError(code);
        },
        { initialDelayMs: 1 },
      );
      expect(calls).toBe(2);
    },
  );

  it('stops after `retries` retries and rethrows the last error', async () => {
    let calls = 0;
    const errors: TributaryError[] = [];
    await expect(
      retry(
        async () => {
          calls++;
          const e = new TributaryError('throttled', { n: calls });
          errors.push(e);
          throw e;
        },
        { retries: 3, initialDelayMs: 1, maxDelayMs: 2 },
      ),
    ).rejects.toSatisfy((e) => e === errors.at(-1));
    expect(calls).toBe(4);
    let once = 0;
    await expect(
      retry(
        async () => {
          once++;
          throw retriable();
        },
        { retries: 0 },
      ),
    ).rejects.toMatchObject({ code: 'connection_lost' });
    expect(once).toBe(1);
  });

  it('an abort during the backoff wait ends it at once', async () => {
    vi.useFakeTimers();
    vi.spyOn(Math, 'random').mockReturnValue(0.5); // the first wait: 5 s of the 10 s bound
    const ac = new AbortController();
    let calls = 0;
    const waits: number[] = [];
    const p = track(
      retry(
        async () => {
          calls++;
          throw retriable();
        },
        { initialDelayMs: 10_000, maxDelayMs: 10_000, maxElapsedMs: 60_000, signal: ac.signal, onRetry: (_err, _attempt, delayMs) => waits.push(delayMs) },
      ),
    );
    await vi.advanceTimersByTimeAsync(4_999);
    expect(waits).toEqual([5_000]);
    expect(p.settled).toBe(false); // still waiting
    ac.abort(new Error('stop'));
    // settled with the clock still 1 ms short of the wait's end: the abort ended it
    await vi.advanceTimersByTimeAsync(0);
    expect(p.settled).toBe(true);
    await expect(p.promise).rejects.toMatchObject({ cause: new Error('stop') });
    expect(calls).toBe(1);
  });

  it('an already aborted signal runs nothing', async () => {
    let calls = 0;
    await expect(
      retry(
        async () => {
          calls++;
        },
        { signal: AbortSignal.abort(new Error('gone')) },
      ),
    ).rejects.toThrow('gone');
    expect(calls).toBe(0);
  });

  it('maxElapsedMs bounds the total time, including the waits', async () => {
    vi.useFakeTimers();
    vi.spyOn(Math, 'random').mockReturnValue(0.5); // every wait 20 ms (the 40 ms bound, halved)
    const t0 = Date.now();
    const attemptsAt: number[] = [];
    const p = track(
      retry(
        async () => {
          attemptsAt.push(Date.now() - t0);
          throw retriable();
        },
        { retries: 1000, initialDelayMs: 40, maxDelayMs: 40, maxElapsedMs: 300 },
      ),
    );
    await vi.advanceTimersByTimeAsync(299);
    expect(p.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    // It uses the budget (an attempt every 20 ms up to 300), and gives up at 300 rather than starting a
    // wait that would end past it.
    expect(p.settled).toBe(true);
    await expect(p.promise).rejects.toMatchObject({ code: 'connection_lost' });
    expect(attemptsAt).toEqual(Array.from({ length: 16 }, (_, i) => i * 20));
  });

  it('a wait that would cross maxElapsedMs is not started', async () => {
    vi.useFakeTimers();
    vi.spyOn(Math, 'random').mockReturnValue(0.5); // a 2.5 s wait against a 100 ms budget
    let calls = 0;
    const waits: number[] = [];
    const p = track(
      retry(
        async () => {
          calls++;
          throw retriable();
        },
        { initialDelayMs: 5_000, maxDelayMs: 5_000, maxElapsedMs: 100, onRetry: (_err, _attempt, delayMs) => waits.push(delayMs) },
      ),
    );
    // given up with the clock not moved: no wait was started
    await vi.advanceTimersByTimeAsync(0);
    expect(p.settled).toBe(true);
    await expect(p.promise).rejects.toMatchObject({ code: 'connection_lost' });
    expect(calls).toBe(1);
    expect(waits).toEqual([]);
  });
});
