import fs from 'node:fs/promises';
import path from 'node:path';

/**
 * Replace a small file so that a crash leaves the old or the new content, never a torn mix: write a temp
 * file, fsync it, rename it over the target. `syncDir` also fsyncs the directory, so the rename itself
 * survives power loss (metadata); frequent checkpoints skip it, a process crash does not need it.
 * Callers serialize their writes of one file (the temp name is fixed, so a crash leaves at most one).
 */
export async function writeFileAtomic(file: string, data: string | Buffer, opts: { syncDir?: boolean } = {}): Promise<void> {
  await slots.acquire();
  try {
    await write(file, data, opts);
  } finally {
    slots.release();
  }
}

/**
 * At most this many atomic writes hold files open at once, broker-wide: checkpoints of thousands of
 * partitions fire together (a CREATE of many partitions makes each write its leader epochs), and their temp
 * files are outside the segment fd budget (docs/operations.md, "Limits"). Each holds at most two fds.
 */
export const MAX_CONCURRENT_ATOMIC_WRITES = 16;

class Slots {
  free = MAX_CONCURRENT_ATOMIC_WRITES;
  private readonly queue: Array<() => void> = [];

  acquire(): Promise<void> | void {
    if (this.free > 0) {
      this.free--;
      return;
    }
    return new Promise<void>((resolve) => this.queue.push(resolve));
  }

  release(): void {
    const next = this.queue.shift();
    if (next) next();
    else this.free++;
  }
}

const slots = new Slots();

/** Atomic writes holding files open right now (for tests). */
export function atomicWritesInFlight(): number {
  return MAX_CONCURRENT_ATOMIC_WRITES - slots.free;
}

async function write(file: string, data: string | Buffer, opts: { syncDir?: boolean }): Promise<void> {
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
