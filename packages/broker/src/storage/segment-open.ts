/** Opening a segment's file within the broker-wide fd budget (fd-budget.ts, docs/architecture.md "Storage"). */
import { type FileHandle, open } from 'node:fs/promises';
import type { FdHolder, SegmentFdPolicy } from './fd-budget.js';

/**
 * Opens `path` for `holder` once it has a slot of the budget: after the holder's previous fd is closed
 * (`previousClose`, so a segment never holds two slots or waits for its own), then waiting for a slot
 * while the budget is full. The slot goes back if the open fails: no fd is held, so none is counted.
 */
export async function openWithinBudget(
  path: string,
  flags: 'r+' | 'w+',
  holder: FdHolder,
  fds: SegmentFdPolicy | undefined,
  previousClose: Promise<void> | null,
): Promise<FileHandle> {
  if (fds === undefined) return open(path, flags);
  if (previousClose !== null) await previousClose;
  await fds.budget.acquire(holder, fds);
  try {
    return await open(path, flags);
  } catch (err) {
    fds.budget.closed(holder);
    throw err;
  }
}
