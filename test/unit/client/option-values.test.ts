/**
 * Option values the clients would use as given and that cannot work are refused at construction
 * (docs/sdk.md, "Options"): a timer option past 2^31-1 ms (setTimeout fires it after 1 ms, so every
 * request timed out at once), retry values that never stop or fire at once, and a retry signal the
 * client would replace by its own. Nothing connects: the brokers listed are never contacted.
 */
import { describe, expect, it } from 'vitest';
import { Admin } from 'tributary-client/admin.js';
import { Consumer } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import { thrown } from '../../helpers/util.js';

const brokers = ['127.0.0.1:1'];
const MAX_TIMER = 2 ** 31 - 1;

describe('option values', () => {
  it('timer options above 2^31-1 ms are refused; at it they are taken', async () => {
    expect(thrown(() => new Producer({ brokers, requestTimeoutMs: MAX_TIMER + 1 })).fields).toMatchObject({ option: 'requestTimeoutMs' });
    expect(thrown(() => new Producer({ brokers, metadataMaxAgeMs: 0 })).fields).toMatchObject({ option: 'metadataMaxAgeMs' });
    for (const k of ['sessionTimeoutMs', 'rebalanceTimeoutMs', 'autoCommitIntervalMs', 'processingTimeoutMs', 'maxWaitMs']) {
      expect(thrown(() => new Consumer({ brokers, groupId: 'g', topic: 't', [k]: 3e9 })).fields).toMatchObject({ option: k });
    }
    const p = new Producer({ brokers, requestTimeoutMs: MAX_TIMER, metadataMaxAgeMs: MAX_TIMER });
    await p.close();
  });

  it('retry values that never stop, fire at once or go unused are refused by every client', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ retries: Number.NaN }, 'retry.retries'],
      [{ retries: -1 }, 'retry.retries'],
      [{ initialDelayMs: -5 }, 'retry.initialDelayMs'],
      [{ maxDelayMs: 3e9 }, 'retry.maxDelayMs'],
      [{ maxElapsedMs: Number.NaN }, 'retry.maxElapsedMs'],
      [{ factor: 0.5 }, 'retry.factor'],
      [{ factor: Number.POSITIVE_INFINITY }, 'retry.factor'],
      [{ onRetry: 'log' }, 'retry.onRetry'],
      [{ signal: new AbortController().signal }, 'retry.signal'],
    ];
    for (const [retry, option] of cases) {
      expect(thrown(() => new Producer({ brokers, retry } as never)).fields).toMatchObject({ option });
      expect(thrown(() => new Consumer({ brokers, groupId: 'g', topic: 't', retry } as never)).fields).toMatchObject({ option });
      expect(thrown(() => new Admin({ brokers, retry } as never)).fields).toMatchObject({ option });
    }
    const p = new Producer({ brokers, retry: { retries: 0, initialDelayMs: 0, maxDelayMs: MAX_TIMER, factor: 1, maxElapsedMs: 1, onRetry: () => {} } });
    await p.close();
  });
});
