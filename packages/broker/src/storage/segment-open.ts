/** Opening a segment's file within the broker-wide fd budget (fd-budget.ts, docs/architecture.md "Storage"). */
import { type FileHandle, open } from 'node:fs/promises';
import type { FdHolder, SegmentFdPolicy } from './fd-budget.js';

/**
 * Opens `path` for `holder` once it has a slot of the budget: after the holder's previous fd is closed
 * (`previousClose`, so a segment never holds two slots or waits for its own), then waiting for a slot
 * while the budget is full. The slot goes back if the open fails: no fd is held, so none is counted.
 * `closedError`: the holder closed for good meanwhile (its close found no wait to cancel yet), so the
 * open gives up rather than wait for a slot its close would wait for (docs/architecture.md "Storage").
 */
export async function openWithinBudget(
  path: string,
  flags: 'r+' | 'w+',
  holder: FdHolder,
  fds: SegmentFdPolicy | undefined,
  previousClose: Promise<void> | null,
  closedError: () => Error | null,
): Promise<FileHandle> {
  if (fds === undefined) return open(path, flags);
  if (previousClose !== null) {
    await previousClose;
    const closed = closedError();
    if (closed !== null) throw closed;
  }
  await fds.budget.acquire(holder, fds);
  try {
    return await open(path, flags);
  } catch (err) {
    fds.budget.closed(holder);
    throw err;
  }
}
