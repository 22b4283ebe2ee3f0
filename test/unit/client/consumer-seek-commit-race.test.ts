/**
 * seek() below an offset whose commit is on its way (docs/sdk.md, "Offsets"): the broker starts a
 * group's reads at max(requested, committed), so once that commit lands a read from the sought offset
 * starts at the commit instead, and the seek is silently lost (seen under a SIGSTOPped coordinator,
 * whose auto-commit stayed in flight for seconds). seek() refuses it with seek_below_committed, as it
 * does below the committed offset; once the commit settled, the committed offset is the bound.
 */
import { describe, expect, it } from 'vitest';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { batchFrom, consumerWithHeldCommit, scriptedGroup, useCleanup } from '../../helpers/scripted-group.js';
import { until } from '../../helpers/util.js';

describe('Consumer: seek() while a commit is in flight (scripted broker)', () => {
  const cleanup = useCleanup();

  /**
   * The scripted group whose first commit is answered only once `release()` is called (a coordinator slow
   * to answer); reads start at max(requested, committed), as the broker's do.
   */
  async function slowFirstCommit() {
    const s = await scriptedGroup();
    cleanup.push(() => s.close());
    const state = { committed: 0 };
    s.on('FETCH_OFFSET', () => `OK offset=${state.committed} committed=true`);
    s.on('CONSUME', (l) => batchFrom(Math.max(Number(l.params.get('offset')), state.committed), 5));
    const { c, release } = consumerWithHeldCommit(s, cleanup, (l) => {
      state.committed = Math.max(state.committed, Number(/P0:(\d+)/.exec(l.positional[0]!)![1]));
      return 'OK batched=1';
    });
    const it = c[Symbol.asyncIterator]();
    const next = async () => ((await it.next()).value as { offset: number }).offset;
    return { s, c, it, next, release, state };
  }

  it('refuses a seek below the offset being committed; the seek it allows is read from', async () => {
    const { s, c, it, next, release, state } = await slowFirstCommit();
    for (let i = 0; i < 8; i++) expect(await next()).toBe(i);
    const commit = c.commit(); // offsets 0..6 processed: P0:7, unanswered for now
    commit.catch(() => {}); // awaited below; a failing assertion must not leave it unhandled
    await until(() => s.count('BATCH_COMMIT') === 1, 5000, 'the commit sent');
    let refused: TributaryError | undefined;
    try {
      c.seek(0, 3);
    } catch (err) {
      refused = err as TributaryError;
    }
    expect(refused?.code).toBe('seek_below_committed');
    // The way out it names works on a running group (docs/sdk.md, "Offsets"): no need to stop it first.
    expect(refused?.message).toMatch(/reset the group's offsets \(admin\.resetOffsets\(\) or `tributary group reset-offsets`\), which works while its consumers run/);
    expect(refused?.message).not.toMatch(/stop the group/);
    release();
    await commit;
    expect(state.committed).toBe(7);
    // At or above the committed offset a seek is taken, and read from.
    c.seek(0, 7);
    expect(await next()).toBe(7);
    await it.return!();
  });

  it('a commit given up unanswered (its signal aborted) still bounds seek(): it may land later; an answered commit reaching it lifts that', async () => {
    const { s, c, it, next, release, state } = await slowFirstCommit();
    for (let i = 0; i < 8; i++) expect(await next()).toBe(i);
    const ac = new AbortController();
    const commit = c.commit({ signal: ac.signal }); // P0:7, not answered
    commit.catch(() => {});
    await until(() => s.count('BATCH_COMMIT') === 1, 5000, 'the commit sent');
    ac.abort();
    await expect(commit).rejects.toBeDefined();
    const seekCode = (offset: number) => {
      try {
        c.seek(0, offset);
        return 'ok';
      } catch (err) {
        return (err as TributaryError).code;
      }
    };
    expect(seekCode(3)).toBe('seek_below_committed');
    // The broker had it after all; an answered commit (offset 7 now processed: P0:8) reaches past it.
    release();
    expect(await next()).toBe(8);
    await c.commit();
    expect(state.committed).toBe(8);
    expect(seekCode(8)).toBe('ok');
    expect(await next()).toBe(8);
    await it.return!();
  });
});
