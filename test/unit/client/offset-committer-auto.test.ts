/**
 * The auto-commit worker (docs/sdk.md, "Offsets"): a commit refused because the group moved on (a
 * generation the coordinator replaced, a rebalance under way, the member expired) asks the membership
 * for a rebalance and is no `crash`; any other failure of an auto-commit is reported as a non-fatal
 * crash. No server: the cluster answers every BATCH_COMMIT with a scripted error.
 */
import { describe, expect, it } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { ConsumerContext } from 'tributary-client/consumer-context.js';
import { resolveConsumerOptions } from 'tributary-client/consumer-options.js';
import { OffsetCommitter } from 'tributary-client/offset-committer.js';
import { PartitionWorker } from 'tributary-client/partition-worker.js';

function setup(refusal: string) {
  let sends = 0;
  let secondSend!: () => void;
  const twice = new Promise<void>((r) => (secondSend = r));
  const cluster = {
    coordinatorCommand: async () => {
      if (++sends === 2) secondSend();
      throw new TributaryError(refusal as never, {});
    },
  };
  const crashes: string[] = [];
  const emit = (name: string, e: { error: TributaryError }) => {
    if (name === 'crash') crashes.push(e.error.code);
  };
  const ctx = new ConsumerContext(resolveConsumerOptions({ brokers: ['127.0.0.1:1'], groupId: 'g', topic: 't', autoCommitIntervalMs: 5 }), cluster as never, emit as never, async () => {});
  ctx.memberId = 'm-1';
  ctx.generation = 3;
  const w = new PartitionWorker(0, 1, 0, 0, ctx.root.signal);
  w.processed = 7;
  ctx.workers.set(0, w);
  const rebalances: string[] = [];
  const committer = new OffsetCommitter(ctx, { requestRebalance: (reason) => rebalances.push(reason), memberLost: () => {} });
  const loop = committer.loop();
  return { ctx, crashes, rebalances, twice, loop };
}

describe('auto-commit refusals', () => {
  for (const code of ['GEN_MISMATCH', 'REBALANCE_IN_PROGRESS', 'member_not_found']) {
    it(`${code}: a rebalance is asked for, no crash is reported`, async () => {
      const { ctx, crashes, rebalances, twice, loop } = setup(code);
      // The second attempt starts after the first one's failure was handled.
      await twice;
      ctx.root.abort();
      await loop;
      expect(rebalances.length).toBeGreaterThan(0);
      expect(crashes).toEqual([]);
    });
  }

  it('any other failure is a non-fatal crash', async () => {
    const { ctx, crashes, twice, loop } = setup('storage_error');
    await twice;
    ctx.root.abort();
    await loop;
    expect(crashes[0]).toBe('storage_error');
  });
});
