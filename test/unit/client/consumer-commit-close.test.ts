/**
 * A manual commit() still waiting for a coordinator that stopped answering when close() is called
 * (docs/sdk.md, "Consumer"): commits run one at a time, so close()'s final commit queued behind it and
 * close() waited out the manual commit's whole retry budget (35 s against a SIGSTOPped broker), and for
 * ever against one that keeps its connection but never answers. close() ends the manual commit
 * (`client_closed`); its own final commit gets the close deadline.
 */
import { describe, expect, it } from 'vitest';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { batchFrom, consumerWithHeldCommit, scriptedGroup, useCleanup } from '../../helpers/scripted-group.js';


describe('Consumer: a manual commit in flight at close() (scripted broker)', () => {
  const cleanup = useCleanup();

  it('close() ends the manual commit with client_closed', { timeout: 15_000 }, async () => {
    const s = await scriptedGroup();
    cleanup.push(() => s.close());
    s.on('FETCH_OFFSET', () => 'OK offset=0 committed=true');
    s.on('CONSUME', (l) => batchFrom(Number(l.params.get('offset')), 3));
    // The first commit is never answered (a coordinator that stopped answering; its connection stays up).
    const { c } = consumerWithHeldCommit(s, cleanup, (l) => `OK batched=${l.positional[0]!.split(',').length}`);
    let commit: Promise<string> | undefined;
    let committedMessage = -1;
    for await (const m of c) {
      if (m.offset === 1) {
        committedMessage = m.offset;
        commit = c.commit({ message: m }).then(
          () => 'resolved',
          (e: TributaryError) => e.code,
        );
        break;
      }
    }
    // break closed the consumer: that returned while the first commit was still unanswered
    expect(c.state).toBe('closed');
    expect(await commit).toBe('client_closed');
    expect(committedMessage).toBe(1);
  });
});
