import fs from 'node:fs/promises';
import path from 'node:path';

/**
 * Replace a small file so that a crash leaves the old or the new content, never a torn mix: write a temp
 * file, fsync it, rename it over the target. `syncDir` also fsyncs the directory, so the rename itself
 * survives power loss (metadata); frequent checkpoints skip it, a process crash does not need it.
 * Callers serialize their writes of one file (the temp name is fixed, so a crash leaves at most one).
 * `mode` is the file's whatever the umask (a temp file left by a crash is set to it too).
 */
export async function writeFileAtomic(file: string, data: string | Buffer, opts: WriteOptions = {}): Promise<void> {
  await slots.acquire();
  try {
    await write(file, data, opts);
  } finally {
    slots.release();
  }
}

/**
 * At most this many small-file operations hold files open at once, broker-wide: atomic writes and reads of
 * checkpoints and snapshots, segment index writes and reads, and directory fsyncs (withFileSlot). They
 * come by the thousand together: checkpoints when a CREATE of many partitions makes each write its leader
 * epochs, reads at a restart, and the directory fsyncs and index writes of many dormant partitions' first
 * appends or of many rolls at once. They are outside the segment fd budget (docs/operations.md, "Limits").
 * Each holds at most two fds, and none waits for anything else while it holds its slot.
 */
export const MAX_CONCURRENT_ATOMIC_WRITES = 16;

/** At most `free` holders at once; the others wait in order. */
export class Slots {
  private readonly queue: Array<() => void> = [];

  constructor(public free: number) {}

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

const slots = new Slots(MAX_CONCURRENT_ATOMIC_WRITES);

/** A small file's whole content (a checkpoint, a snapshot), within the same bound as the atomic writes. */
export async function readSmallFile(file: string): Promise<Buffer>;
export async function readSmallFile(file: string, encoding: 'utf8'): Promise<string>;
export async function readSmallFile(file: string, encoding?: 'utf8'): Promise<Buffer | string> {
  await slots.acquire();
  try {
    return encoding ? await fs.readFile(file, encoding) : await fs.readFile(file);
  } finally {
    slots.release();
  }
}

/** Runs `fn`, which opens at most two files and closes them before it ends, within the same bound. */
export async function withFileSlot<T>(fn: () => Promise<T>): Promise<T> {
  await slots.acquire();
  try {
    return await fn();
  } finally {
    slots.release();
  }
}

/** Small-file operations holding files open right now (for tests). */
export function atomicWritesInFlight(): number {
  return MAX_CONCURRENT_ATOMIC_WRITES - slots.free;
}

export interface WriteOptions {
  syncDir?: boolean;
  mode?: number;
}

async function write(file: string, data: string | Buffer, opts: WriteOptions): Promise<void> {
  const tmp = `${file}.tmp`;
  const fh = await fs.open(tmp, 'w', opts.mode);
  try {
    if (opts.mode !== undefined) await fh.chmod(opts.mode);
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
