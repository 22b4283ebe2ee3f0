/**
 * What docs/sdk.md names is importable from the package root (`tributary-client`), not only from its
 * modules: the retry defaults its option tables point at, and the connection timeouts' defaults.
 */
import { describe, expect, it } from 'vitest';
import * as sdk from 'tributary-client';
import { DEFAULT_BOOTSTRAP_TIMEOUT_MS, DEFAULT_STALL_TIMEOUT_MS } from 'tributary-client/cluster.js';
import { DEFAULT_RETRY } from 'tributary-client/retry.js';

describe('the package root', () => {
  it('exports DEFAULT_RETRY (docs/sdk.md) and the connection defaults', () => {
    expect(sdk.DEFAULT_RETRY).toBe(DEFAULT_RETRY);
    expect(sdk.DEFAULT_RETRY).toEqual({ retries: 8, initialDelayMs: 50, maxDelayMs: 3000, factor: 2, maxElapsedMs: 30_000 });
    expect(Object.isFrozen(sdk.DEFAULT_RETRY)).toBe(true);
    expect(sdk.DEFAULT_BOOTSTRAP_TIMEOUT_MS).toBe(DEFAULT_BOOTSTRAP_TIMEOUT_MS);
    expect(sdk.DEFAULT_STALL_TIMEOUT_MS).toBe(DEFAULT_STALL_TIMEOUT_MS);
  });
});
