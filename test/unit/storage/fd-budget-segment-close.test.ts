/**
 * A segment that closes while its own reopen waits for a slot of the fd budget (FdBudget): the close cancels
 * that open, which never takes a slot nor opens the file, and the close does not wait for a slot to free.
 * The reopen first waits for the segment's previous close to end (one slot per segment): a close arriving
 * then found no waiter in the budget's queue to cancel, and waited for the open it could not cancel.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FdBudget, type FdHolder } from 'tributary-broker/storage/fd-budget.js';
import { Segment } from 'tributary-broker/storage/segment.js';
import { removeDir, tempDir } from '../../helpers/util.js';

/** Another file's holder: it may close, and says when the budget asks it to (it then keeps its slot). */
class OtherHolder implements FdHolder {
  readonly asked: Promise<'the other file was asked to close'>;
  private onAsked!: () => void;
  constructor() {
    this.asked = new Promise((resolve) => {
      this.onAsked = () => resolve('the other file was asked to close');
    });
  }
  canRelease(): boolean {
    return true;
  }
  async release(): Promise<void> {
    this.onAsked();
  }
}

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-fd-segment-close-');
});
afterEach(async () => {
  await removeDir(dir);
});

describe('a segment closing while its reopen waits for a slot', () => {
  it('cancels the open: it completes without a slot freeing, and the open never takes one', async () => {
    const budget = new FdBudget(1);
    const seg = await Segment.create(dir, 0, 4096, Date.now(), { budget, syncTracked: false });
    const other = new OtherHolder();
    try {
      // The segment's fd closes; meanwhile another file waits for the one slot, then the segment is read
      // (its reopen waits for that close first) and closed for good.
      const previousClose = seg.release();
      expect(budget.acquire(other)).toBeInstanceOf(Promise);
      const read = seg.read(0, 1);
      read.catch(() => {});
      const closing = seg.close();
      // The previous close gives its slot to the other file: the reopen would wait for it now.
      await previousClose;
      const first = await Promise.race([closing.then(() => 'closed' as const), other.asked]);
      expect(first).toBe('closed');
      await expect(read).rejects.toMatchObject({ code: 'ESEGMENTCLOSED' });
      expect(budget.waiting).toBe(0);
      expect(budget.open).toBe(1);
      expect(seg.isOpen).toBe(false);
    } finally {
      // Lets a reopen that did wait (without the cancellation) end, so nothing hangs.
      budget.closed(other);
      await seg.close();
    }
  });
});
