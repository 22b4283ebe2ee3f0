import { expect } from 'vitest';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';

/**
 * Opening the log in `dir` is refused with a storage_error whose message has every one of `words`, and
 * `files()` (what the test reads of the directory) is the same after as before: a refusal changes nothing.
 */
export async function expectOpenRefused(dir: string, opts: Partial<LogOptions>, files: () => Promise<unknown>, ...words: string[]): Promise<TributaryError> {
  const before = await files();
  const err = (await PartitionLog.open(dir, opts).then(
    async (l) => {
      await l.close();
      throw new Error('the damaged log opened');
    },
    (e: unknown) => e,
  )) as TributaryError;
  expect(err.code).toBe('storage_error');
  for (const w of words) expect(err.message).toContain(w);
  expect(await files()).toEqual(before);
  return err;
}
