/**
 * retry() and backoffDelay(): exponential growth with a cap, full jitter within bounds, only retriable
 * errors retried, the attempt budget, the abort signal during the wait, and the maxElapsedMs bound.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_RETRY, backoffDelay, isRetriable, retry } from 'tributary-client/retry.js';
import { TributaryError } from 'tributary-protocol/errors.js';

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
    const ac = new AbortController();
    let calls = 0;
    const t0 = Date.now();
    const p = retry(
      async () => {
        calls++;
        throw retriable();
      },
      // the first wait is within [0, 10 s): with random near 1 it would be long
      { initialDelayMs: 10_000, maxDelayMs: 10_000, maxElapsedMs: 60_000, signal: ac.signal, onRetry: () => setTimeout(() => ac.abort(new Error('stop')), 30) },
    );
    await expect(p).rejects.toThrow();
    expect(Date.now() - t0).toBeLessThan(1000);
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
    let calls = 0;
    const t0 = Date.now();
    await expect(
      retry(
        async () => {
          calls++;
          throw retriable();
        },
        { retries: 1000, initialDelayMs: 40, maxDelayMs: 40, maxElapsedMs: 300 },
      ),
    ).rejects.toMatchObject({ code: 'connection_lost' });
    const elapsed = Date.now() - t0;
    expect(elapsed).toBeLessThanOrEqual(300 + 50); // never sleeps past the budget
    expect(calls).toBeGreaterThan(3); // but does use it (mean wait 20 ms)
    expect(calls).toBeLessThan(1000);
  });

  it('a wait that would cross maxElapsedMs is not started', async () => {
    let calls = 0;
    const t0 = Date.now();
    await expect(
      retry(
        async () => {
          calls++;
          throw retriable();
        },
        { initialDelayMs: 5_000, maxDelayMs: 5_000, maxElapsedMs: 100, onRetry: () => {} },
      ),
    ).rejects.toMatchObject({ code: 'connection_lost' });
    // Either the random delay fits under 100 ms (rare) or it gives up at once; it never sleeps seconds.
    expect(Date.now() - t0).toBeLessThan(150);
    expect(calls).toBeGreaterThanOrEqual(1);
  });
});
