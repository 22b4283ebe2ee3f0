import fs from 'node:fs/promises';
import path from 'node:path';

/**
 * Replace a small file so that a crash leaves the old or the new content, never a torn mix: write a temp
 * file, fsync it, rename it over the target. `syncDir` also fsyncs the directory, so the rename itself
 * survives power loss (metadata); frequent checkpoints skip it, a process crash does not need it.
 * Callers serialize their writes of one file (the temp name is fixed, so a crash leaves at most one).
 */
export async function writeFileAtomic(file: string, data: string | Buffer, opts: { syncDir?: boolean } = {}): Promise<void> {
  const tmp = `${file}.tmp`;
  const fh = await fs.open(tmp, 'w');
  try {
    await fh.writeFile(data);
    await fh.sync();
  } finally {
    await fh.close();
  }
  await fs.rename(tmp, file);
  if (opts.syncDir === false) return;
  const dir = await fs.open(path.dirname(file), 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}
