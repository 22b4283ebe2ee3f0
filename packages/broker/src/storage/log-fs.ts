/** Small file-system helpers of the partition log, and the storage_error every part of it raises. */
import { mkdir, open, rename, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import { type ErrorFields, TributaryError } from 'tributary-protocol/errors.js';
import { Slots, withFileSlot } from './atomic-file.js';

export function storageError(dir: string, reason: string, cause?: unknown, fields: ErrorFields = {}): TributaryError {
  const detail = cause instanceof Error ? `: ${cause.message}` : '';
  const err = new TributaryError('storage_error', { dir, reason: reason + detail, ...fields });
  if (cause !== undefined) (err as Error & { cause?: unknown }).cause = cause;
  return err;
}

/**
 * A segment write failed. Cut back to where it began (`cut`), none of it is in the log: `outcome=not_written`
 * tells a writer that must know (the group coordinator) it needs no reload. ENOSPC says the disk is full.
 */
export function writeFailed(dir: string, err: unknown, cut: boolean): TributaryError {
  const full = (err as NodeJS.ErrnoException | null)?.code === 'ENOSPC';
  return storageError(dir, full ? 'write failed, the disk is full' : 'write failed', err, cut ? { outcome: 'not_written' } : {});
}

/**
 * The process (EMFILE) or the system (ENFILE) is out of file descriptors: an open failed, so no write or
 * fsync ran and nothing is in doubt. The request that needed the file is refused (storage_error is
 * retriable); the log is not failed.
 */
export function isFdExhaustion(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return code === 'EMFILE' || code === 'ENFILE';
}

/** A failed fsync or fdatasync: the page cache may hold pages the disk lost (LogState.failSync cuts back to what one covered). */
export function isSyncFailure(err: unknown): boolean {
  const syscall = (err as NodeJS.ErrnoException | null)?.syscall;
  return syscall === 'fdatasync' || syscall === 'fsync';
}

/** Errors that say a directory cannot be fsynced here (the platform or filesystem), not that an fsync failed. */
const DIR_SYNC_UNSUPPORTED = new Set(['EINVAL', 'ENOTSUP', 'EOPNOTSUPP', 'EISDIR', 'EPERM', 'EACCES', 'EBADF']);

/**
 * fsyncs a directory, so entries created or renamed in it survive a power loss. Where the platform cannot
 * (DIR_SYNC_UNSUPPORTED) it does nothing; any other error, an EIO above all, is thrown. Within the bound of
 * small-file operations (atomic-file.ts): many partitions sync their directories at once.
 */
export function fsyncDir(dir: string): Promise<void> {
  return withFileSlot(() => syncDir(dir));
}

async function syncDir(dir: string): Promise<void> {
  let fh: Awaited<ReturnType<typeof open>> | null = null;
  try {
    fh = await open(dir, 'r');
    await fh.sync();
  } catch (err) {
    if (!DIR_SYNC_UNSUPPORTED.has((err as NodeJS.ErrnoException).code ?? '')) throw err;
  } finally {
    await fh?.close().catch(() => {});
  }
}

/** Log truncations holding their directory open at once (withDirOpen), broker-wide. */
export const MAX_DIRS_HELD_OPEN = 16;
const dirsHeld = new Slots(MAX_DIRS_HELD_OPEN);

/**
 * Runs `fn` with `dir` open for the fsync it calls (`sync`, as fsyncDir syncs): a log truncation opens every
 * file it needs before it changes anything (log-truncate.ts). The open is within the bound of small-file
 * operations; at most MAX_DIRS_HELD_OPEN are held at once, and `fn` waits for no other of them.
 */
export async function withDirOpen<T>(dir: string, fn: (sync: () => Promise<void>) => Promise<T>): Promise<T> {
  const unsupported = (err: unknown) => {
    if (!DIR_SYNC_UNSUPPORTED.has((err as NodeJS.ErrnoException).code ?? '')) throw err;
  };
  await dirsHeld.acquire();
  try {
    const fh = await withFileSlot(() => open(dir, 'r')).catch(unsupported);
    try {
      return await fn(async () => {
        await fh?.sync().catch(unsupported);
      });
    } finally {
      await fh?.close().catch(() => {});
    }
  } finally {
    dirsHeld.release();
  }
}

/**
 * `mkdir -p`; with `sync`, the entries of the directories it created are fsynced in their parents, so
 * files written into `dir` afterwards are found again after a power loss.
 */
export async function makeDir(dir: string, sync: boolean): Promise<void> {
  const created = await mkdir(dir, { recursive: true });
  if (!sync || created === undefined) return;
  for (let d = dir; d !== created; ) {
    d = dirname(d);
    await fsyncDir(d);
  }
  await fsyncDir(dirname(created));
}

/**
 * Suffix of a log directory being deleted (PartitionLog.release). The loader removes `<dir>.deleting`
 * before it opens `<dir>` and never adopts it.
 */
export const RELEASED_SUFFIX = '.deleting';

/**
 * Takes `dir` away in one step: renamed to `<dir>.deleting` (a leftover of that name removed first) and
 * the rename synced in the parent, before anything in it is deleted, so a crash leaves `dir` whole or
 * absent, never part of it. Returns the renamed path for the caller to remove, or null without a `dir`.
 */
export async function renameAway(dir: string): Promise<string | null> {
  const doomed = dir + RELEASED_SUFFIX;
  await rm(doomed, { recursive: true, force: true });
  try {
    await rename(dir, doomed);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  await fsyncDir(dirname(dir));
  return doomed;
}

/** Writes a new file and fsyncs it (within the bound of small-file operations). */
export function writeFileSynced(path: string, data: Buffer): Promise<void> {
  return withFileSlot(() => writeSynced(path, data));
}

async function writeSynced(path: string, data: Buffer): Promise<void> {
  const fh = await open(path, 'w');
  try {
    await fh.writeFile(data);
    await fh.sync();
  } finally {
    await fh.close();
  }
}
