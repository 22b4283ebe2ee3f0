/**
 * An exclusive lock on a broker's data directory: `<dataDir>/broker.lock`, created with O_EXCL, holding
 * the holder's pid, a random token and (on Linux) the boot id and start time of its process. Two brokers
 * appending to the same logs would hand out the same offsets twice; a lock whose holder is gone (kill -9,
 * power loss) is taken over, so a crash never needs a manual clean-up.
 *
 * Taking over a stale lock is the racy part: two starts that both see the same dead holder must not both
 * delete "the" lock (the second delete would remove the first one's fresh lock). So the right to delete a
 * stale file goes to whoever creates `<file>.takeover-<its token>` with O_EXCL; that marker is itself a
 * lock file, and a marker left by a starter that crashed mid-takeover is broken the same way.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync, type Stats } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';

export const LOCK_FILE = 'broker.lock';

export interface LockHolder {
  pid: number;
  token: string;
  /** `<boot id>/<start time>` of the process where /proc has them: a reused pid is not the holder. */
  started?: string;
  /**
   * `<device>:<inode>` of the data directory the lock was taken in. A copy of the directory (`cp -a` for a
   * backup) carries the file along: a lock naming another directory is not this one's (docs/operations.md, "Backups").
   */
  dir?: string;
}

export interface DataDirLock {
  readonly file: string;
  readonly holder: LockHolder;
  /** Removes the lock file if it is still this holder's. Idempotent. */
  release(): Promise<void>;
}

export class DataDirInUseError extends Error {
  constructor(
    readonly dataDir: string,
    readonly holder: LockHolder,
  ) {
    super(`data directory ${dataDir} is in use by another broker (pid ${holder.pid}, lock file ${path.join(dataDir, LOCK_FILE)}); stop it first or use another --data-dir`);
    this.name = 'DataDirInUseError';
  }
}

/** A lock file that exists but does not parse is taken to be mid-write for this long after its mtime. */
const WRITE_GRACE_MS = 2_000;
/** Bounds the retry loop (a live takeover marker, a clock that makes an empty file look fresh forever). */
const ACQUIRE_TIMEOUT_MS = 10_000;

/** Tokens of the locks this process holds: a holder with our own pid is live only if it is one of them. */
const held = new Set<string>();

let bootId: string | null | undefined;

/**
 * `<boot id>/<start time>` of a process, `undefined` where /proc cannot tell, `null` if the process is
 * gone or a zombie.
 */
export function processStartTime(pid: number): string | null | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // ENOENT with a /proc present: the process is gone.
    return code === 'ENOENT' && procMounted() ? null : undefined;
  }
  // The command name (field 2) may hold spaces and parentheses: fields after it follow the last ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  if (fields[0] === 'Z' || fields[0] === 'X') return null;
  if (bootId === undefined) {
    try {
      bootId = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    } catch {
      bootId = null;
    }
  }
  return `${bootId ?? '-'}/${fields[19]}`;
}

function procMounted(): boolean {
  try {
    readFileSync('/proc/self/stat');
    return true;
  } catch {
    return false;
  }
}

function isRunning(holder: LockHolder): boolean {
  if (holder.pid === process.pid) return held.has(holder.token);
  try {
    process.kill(holder.pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false; // EPERM: alive, another user's
  }
  const started = processStartTime(holder.pid);
  if (started === null) return false;
  return holder.started === undefined || started === undefined || started === holder.started;
}

function parseHolder(text: string): LockHolder | undefined {
  try {
    const v = JSON.parse(text) as Partial<LockHolder>;
    // pid 0 or a negative pid would signal process groups; the token becomes part of a file name.
    if (!Number.isSafeInteger(v.pid) || (v.pid as number) <= 0) return undefined;
    if (typeof v.token !== 'string' || !/^[\w-]{1,64}$/.test(v.token)) return undefined;
    const dir = typeof v.dir === 'string' && /^\d+:\d+$/.test(v.dir) ? v.dir : undefined;
    return { pid: v.pid as number, token: v.token, started: typeof v.started === 'string' ? v.started : undefined, dir };
  } catch {
    return undefined;
  }
}

type Seen =
  | { state: 'gone' }
  | { state: 'writing' }
  | { state: 'live'; holder: LockHolder }
  /** `key` names this very file: the holder's token, or inode and mtime when it has none. */
  | { state: 'stale'; key: string; copiedFrom?: LockHolder };

/** `<device>:<inode>` of a directory, the identity a lock records (undefined if it cannot be read). */
async function dirIdentity(dir: string): Promise<string | undefined> {
  const st = await fs.stat(dir, { bigint: true }).catch(() => undefined);
  return st ? `${st.dev}:${st.ino}` : undefined;
}

async function inspect(file: string): Promise<Seen> {
  let text: string;
  let st: Stats;
  try {
    const fh = await fs.open(file, 'r');
    try {
      st = await fh.stat();
      if (!st.isFile()) throw new LockFileError(file, `${file} is not a regular file (${kindOf(st)}): remove it if no broker runs on ${path.dirname(file)}`);
      text = await fh.readFile('utf8');
    } finally {
      await fh.close();
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { state: 'gone' };
    if (err instanceof LockFileError) throw err;
    // The path and what failed: a bare "EISDIR: illegal operation on a directory, read" named neither.
    throw new Error(`cannot read the data directory's lock file ${file}: ${(err as Error).message}`, { cause: err });
  }
  const holder = parseHolder(text);
  if (!holder) {
    // Created but not yet written (a starter between open and write), or cut short by a power loss.
    return Date.now() - st.mtimeMs < WRITE_GRACE_MS ? { state: 'writing' } : { state: 'stale', key: `i${st.ino}-${Math.floor(st.mtimeMs)}` };
  }
  if (!isRunning(holder)) return { state: 'stale', key: holder.token };
  // A live holder of another directory: this file was copied along with the directory (a backup).
  const here = holder.dir === undefined ? undefined : await dirIdentity(path.dirname(file));
  if (here !== undefined && here !== holder.dir) return { state: 'stale', key: holder.token, copiedFrom: holder };
  return { state: 'live', holder };
}

/** A lock file the broker cannot use as one (a directory, say); the message names it. */
class LockFileError extends Error {
  constructor(
    readonly file: string,
    message: string,
  ) {
    super(`cannot lock the data directory: ${message}`);
    this.name = 'LockFileError';
  }
}

function kindOf(st: Stats): string {
  if (st.isDirectory()) return 'a directory';
  if (st.isSymbolicLink()) return 'a symbolic link';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isSocket()) return 'a socket';
  return 'a device';
}

/** O_EXCL create with the holder's JSON; false if the file exists. */
async function createExclusive(file: string, holder: LockHolder): Promise<boolean> {
  let fh: fs.FileHandle;
  try {
    fh = await fs.open(file, 'wx');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  }
  let written = false;
  try {
    await fh.writeFile(`${JSON.stringify(holder)}\n`);
    written = true;
  } catch (err) {
    // The path, so a full disk says where (docs/operations.md, "A full disk").
    throw new Error(`cannot write the data directory's lock file ${file}: ${(err as Error).message}`, { cause: err });
  } finally {
    await fh.close().catch(() => {});
    if (!written) await fs.rm(file, { force: true }); // an empty lock would block starts for a while
  }
  return true;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Deletes the stale `file` named `key`, unless another starter has the right to and does it. */
async function breakStale(file: string, key: string, me: LockHolder): Promise<void> {
  const marker = `${file}.takeover-${key}`;
  if (await createExclusive(marker, me)) {
    try {
      // Nobody else may delete this file now, so it is still the stale one unless it is gone.
      const again = await inspect(file);
      if (again.state === 'stale' && again.key === key) await fs.rm(file, { force: true });
    } finally {
      await fs.rm(marker, { force: true });
    }
    return;
  }
  const m = await inspect(marker);
  if (m.state === 'stale') await breakStale(marker, m.key, me); // its owner died mid-takeover
  else await sleep(10 + Math.random() * 20); // another starter is taking over: look again
}

/** Takes the lock on `dataDir` (created if missing); throws DataDirInUseError if a live broker holds it. */
export async function lockDataDir(dataDir: string, opts: { warn?: (msg: string, holder: LockHolder) => void } = {}): Promise<DataDirLock> {
  try {
    await fs.mkdir(dataDir, { recursive: true });
  } catch (err) {
    // A file at the path or above it: 'EEXIST: file already exists, mkdir' said nothing of which setting.
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') throw new Error(`invalid config: dataDir: ${dataDir} is not a directory (a file is there)`);
    if (code === 'ENOTDIR') throw new Error(`invalid config: dataDir: ${dataDir} is not a directory (a file is on its path)`);
    throw err;
  }
  const file = path.join(dataDir, LOCK_FILE);
  const me: LockHolder = { pid: process.pid, token: randomUUID() };
  const started = processStartTime(process.pid);
  if (started) me.started = started;
  const dir = await dirIdentity(dataDir);
  if (dir) me.dir = dir;
  const deadline = performance.now() + ACQUIRE_TIMEOUT_MS;
  held.add(me.token); // before the file exists: another lock attempt in this process must see it live
  try {
    for (;;) {
      if (await createExclusive(file, me)) break;
      const seen = await inspect(file);
      if (seen.state === 'live') throw new DataDirInUseError(dataDir, seen.holder);
      if (performance.now() > deadline) throw new Error(`could not lock data directory ${dataDir}: ${file} stayed ${seen.state}`);
      if (seen.state === 'stale' && seen.copiedFrom) {
        opts.warn?.(`${file} is the lock of another directory (pid ${seen.copiedFrom.pid}), copied along with this one: taken over`, seen.copiedFrom);
      }
      if (seen.state === 'stale') await breakStale(file, seen.key, me);
      else if (seen.state === 'writing') await sleep(20);
    }
  } catch (err) {
    held.delete(me.token);
    throw err;
  }
  await removeLeftoverMarkers(dataDir);
  let released = false;
  return {
    file,
    holder: me,
    async release() {
      if (released) return;
      released = true;
      try {
        // Never someone else's: only a lock judged stale is taken over, and ours was live until now.
        const text = await fs.readFile(file, 'utf8').catch(() => '');
        if (parseHolder(text)?.token === me.token) await fs.rm(file, { force: true });
      } finally {
        held.delete(me.token);
      }
    },
  };
}

/** Markers whose owner crashed after its takeover are garbage once we hold the lock. */
async function removeLeftoverMarkers(dataDir: string): Promise<void> {
  const names = await fs.readdir(dataDir).catch(() => [] as string[]);
  for (const name of names) {
    if (!name.startsWith(`${LOCK_FILE}.takeover-`)) continue;
    const marker = path.join(dataDir, name);
    if ((await inspect(marker).catch(() => undefined))?.state === 'stale') await fs.rm(marker, { force: true });
  }
}
