/**
 * Journal.endRecovery deletes the old journal files (oldest first) before the new one exists: a crash left
 * the last old file ending in a cut entry (the write the crash interrupted, never acknowledged), and a
 * second crash while they are deleted must not leave that file with a later one after it, which refuses
 * the next start ("damaged, and later files follow it") though nothing acknowledged is missing.
 */
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { encodeWrite, journalKey } from 'tributary-broker/storage/journal-format.js';
import { JOURNAL_DIR, Journal } from 'tributary-broker/storage/journal.js';
import { removeDir, tempDir } from '../../helpers/util.js';

/** While set, an unlinkSync of a path ending so throws: the process dies there. */
const crash = vi.hoisted(() => ({ at: '' }));
vi.mock('node:fs', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs')>();
  const unlinkSync = (p: string) => {
    if (crash.at !== '' && String(p).endsWith(crash.at)) throw new Error('crashed here');
    fs.unlinkSync(p);
  };
  return { ...fs, default: { ...fs, unlinkSync }, unlinkSync };
});

const quiet = pino({ level: 'silent' });
let base: string;
beforeEach(async () => {
  base = await tempDir('trib-journal-endrec-');
});
afterEach(async () => {
  crash.at = '';
  await removeDir(base);
});

describe('a crash while endRecovery deletes the old journal files', () => {
  it('leaves a journal the next start opens, and the new file follows the old ones', async () => {
    const dir = join(base, JOURNAL_DIR);
    await mkdir(dir, { recursive: true });
    const entry = Buffer.concat(encodeWrite(journalKey('logs/gone~1/0'), 0, 0, 0, 1, [Buffer.alloc(10)]));
    await writeFile(join(dir, '0000000000000001.journal'), entry);
    await writeFile(join(dir, '0000000000000002.journal'), Buffer.concat([entry, entry.subarray(0, 20)]));
    const j = await Journal.open(base, quiet);
    crash.at = '0000000000000002.journal';
    await expect(j.endRecovery()).rejects.toThrow('crashed here');
    crash.at = '';
    expect(await readdir(dir)).toEqual(['0000000000000002.journal']);
    // The start after that crash reads the cut file (the last one) and goes on.
    const again = await Journal.open(base, quiet);
    await again.endRecovery();
    expect(await readdir(dir)).toEqual(['0000000000000003.journal']);
    await again.close();
  });
});
