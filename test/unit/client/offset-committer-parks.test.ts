/**
 * The committer and park transactions (docs/sdk.md, "Retry and dead-letter topics" → "Commits"): a
 * commit asked for while a park runs waits for it, so a BATCH_COMMIT of a lower offset never lands after
 * the park moved the offset further; what the park committed is not sent again. No server: the cluster
 * is a recorder of the commands sent.
 */
import { describe, expect, it } from 'vitest';
import { ConsumerContext } from 'tributary-client/consumer-context.js';
import { resolveConsumerOptions } from 'tributary-client/consumer-options.js';
import { OffsetCommitter } from 'tributary-client/offset-committer.js';
import { PartitionWorker } from 'tributary-client/partition-worker.js';
import { turn } from '../../helpers/fake-clock.js';

function setup() {
  const sent: string[] = [];
  const cluster = {
    coordinatorCommand: async (_key: unknown, name: string, _fields: unknown, opts: { positional?: string[] }) => {
      sent.push(`${name} ${opts.positional?.join(' ')}`);
      return 'OK';
    },
  };
  const ctx = new ConsumerContext(resolveConsumerOptions({ brokers: ['127.0.0.1:1'], groupId: 'g', topic: 't' }), cluster as never, () => {}, async () => {});
  ctx.memberId = 'm-1';
  const w = new PartitionWorker(0, 1, 0, 0, ctx.root.signal);
  ctx.workers.set(0, w);
  const committer = new OffsetCommitter(ctx, { requestRebalance: () => {}, memberLost: () => {} });
  return { sent, w, committer };
}

describe('commits and park transactions', () => {
  it('a commit waits for a running park; the park’s offset is not committed again', async () => {
    const { sent, w, committer } = setup();
    // messages 0..4 handled, message 5 fails and is being parked
    w.processed = 5;
    let finishPark!: () => void;
    const park = committer.exclusive(async () => {
      await new Promise<void>((r) => (finishPark = r));
      committer.committedByTransaction(0, 1, 6); // the park transaction committed offset 6
    });
    const commit = committer.commitProcessed([w]);
    await turn();
    await turn();
    expect(sent).toEqual([]); // the auto-commit of 5 did not overtake the park
    finishPark();
    await park;
    await commit;
    expect(sent).toEqual([]); // 6 is committed already: nothing to send
    expect([w.processed, w.committed]).toEqual([6, 6]);
    w.processed = 9;
    await committer.commitProcessed([w]);
    expect(sent).toEqual(['BATCH_COMMIT P0:9']);
  });

  it('a park for an installation revoked meanwhile changes nothing of the new one', () => {
    const { w, committer } = setup();
    w.processed = 3;
    committer.committedByTransaction(0, 2, 10);
    expect([w.processed, w.committed]).toEqual([3, 0]);
  });
});
