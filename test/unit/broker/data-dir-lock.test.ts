/**
 * The data directory lock: live holders refuse, dead ones (or a reused pid) are taken over, a lock file
 * caught between create and write is waited for, and of several starts taking over one stale lock at once
 * exactly one wins, in one process and across processes.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import readline from 'node:readline';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DataDirInUseError, type DataDirLock, LOCK_FILE, lockDataDir } from 'tributary-broker/broker/data-dir-lock.js';
import { track, untilReal, useFakeTimersForIo } from '../../helpers/fake-timers.js';
import { ROOT } from '../../helpers/launcher.js';
import { trackChild } from '../../helpers/process-registry.js';
import { removeDir, sleep, tempDir } from '../../helpers/util.js';

const HAS_PROC = existsSync('/proc/self/stat');

let dir: string;
let lockFile: string;
const locks: DataDirLock[] = [];
const children: ChildProcess[] = [];

beforeEach(async () => {
  dir = await tempDir('trib-lock-');
  lockFile = path.join(dir, LOCK_FILE);
});
afterEach(async () => {
  vi.useRealTimers();
  for (const l of locks.splice(0)) await l.release().catch(() => {});
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await removeDir(dir);
});

async function lock(d = dir): Promise<DataDirLock> {
  const l = await lockDataDir(d);
  locks.push(l);
  return l;
}

/** A process that stays alive until killed. */
function sleeper(): ChildProcess {
  const c = trackChild(spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' }), 'lock-test sleeper');
  children.push(c);
  return c;
}

/** The pid of a process that has exited. */
async function deadPid(): Promise<number> {
  const c = trackChild(spawn(process.execPath, ['-e', ''], { stdio: 'ignore' }), 'lock-test');
  await new Promise((r) => c.once('exit', r));
  return c.pid!;
}

const writeHolder = (file: string, holder: object) => fs.writeFile(file, JSON.stringify(holder));
const readHolder = async (file = lockFile) => JSON.parse(await fs.readFile(file, 'utf8')) as { pid: number; token: string; started?: string };

async function inUse(p: Promise<unknown>): Promise<DataDirInUseError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(DataDirInUseError);
  return err as DataDirInUseError;
}

describe('data directory lock', () => {
  it('creates the directory and a lock file with the pid, a token and the start time; release removes it', async () => {
    const sub = path.join(dir, 'new', 'data');
    const l = await lock(sub);
    const h = await readHolder(path.join(sub, LOCK_FILE));
    expect(h.pid).toBe(process.pid);
    expect(h.token).toBe(l.holder.token);
    if (HAS_PROC) expect(h.started).toMatch(/\/\d+$/);
    await l.release();
    expect(existsSync(path.join(sub, LOCK_FILE))).toBe(false);
    await l.release(); // idempotent
    // and it can be taken again
    await lock(sub);
  });

  it('refuses while the holder lives: another lock in this process, or another live process', async () => {
    await lock();
    const err = await inUse(lockDataDir(dir));
    expect(err.holder.pid).toBe(process.pid);
    expect(err.message).toContain('in use');
    expect(err.message).toContain(`pid ${process.pid}`);

    const other = await tempDir('trib-lock-live-');
    try {
      const s = sleeper();
      await writeHolder(path.join(other, LOCK_FILE), { pid: s.pid, token: 'someone-else' });
      const e2 = await inUse(lockDataDir(other));
      expect(e2.message).toMatch(new RegExp(`in use .*pid ${s.pid}\\b`));
      expect((await readHolder(path.join(other, LOCK_FILE))).token).toBe('someone-else'); // untouched
    } finally {
      await removeDir(other);
    }
  });

  it('takes over, with a warning, a live lock copied along with its directory (a backup taken with cp -a)', async () => {
    const a = await lock();
    const copy = await tempDir('trib-lock-copy-');
    try {
      await fs.cp(dir, copy, { recursive: true, preserveTimestamps: true });
      // Before: "in use by another broker (pid <the original's>)", as the copy's lock names a live pid.
      const warnings: string[] = [];
      const b = await lockDataDir(copy, { warn: (msg) => warnings.push(msg) });
      locks.push(b);
      expect(warnings).toEqual([expect.stringMatching(new RegExp(`is the lock of another directory \\(pid ${process.pid}\\), copied along with this one: taken over`))]);
      expect((await readHolder(path.join(copy, LOCK_FILE))).token).toBe(b.holder.token);
      expect((await readHolder(lockFile)).token).toBe(a.holder.token); // the original's lock untouched
      await inUse(lockDataDir(dir)); // and still in force there
    } finally {
      await removeDir(copy);
    }
  });

  it('takes over a lock whose holder is dead', async () => {
    await writeHolder(lockFile, { pid: await deadPid(), token: 'dead-holder' });
    const l = await lock();
    expect(await readHolder()).toMatchObject({ pid: process.pid, token: l.holder.token });
  });

  it.skipIf(!HAS_PROC)('takes over a lock whose pid now belongs to another process (start time differs)', async () => {
    const s = sleeper();
    await writeHolder(lockFile, { pid: s.pid, token: 'reused-pid', started: 'another-boot/1' });
    const l = await lock();
    expect((await readHolder()).token).toBe(l.holder.token);
  });

  it('takes over a lock from an earlier run of this very pid (a restarted container)', async () => {
    await writeHolder(lockFile, { pid: process.pid, token: 'earlier-run' });
    const l = await lock();
    expect((await readHolder()).token).toBe(l.holder.token);
  });

  it('waits for a lock file that is created but not yet written; takes over one that stays empty', async () => {
    // Fresh and empty: a starter between open and write. It writes 100 ms later and wins.
    await fs.writeFile(lockFile, '');
    const s = sleeper();
    setTimeout(() => void writeHolder(lockFile, { pid: s.pid, token: 'slow-writer' }), 100);
    const err = await inUse(lockDataDir(dir));
    expect(err.holder.pid).toBe(s.pid);

    // Empty and old: its writer died (or a power loss cut it): taken over at once.
    await fs.writeFile(lockFile, '');
    const old = new Date(Date.now() - 60_000);
    await fs.utimes(lockFile, old, old);
    // With the clock stopped, any wait of lockDataDir (for a writer, between looks) would never end.
    useFakeTimersForIo();
    const taking = track(lock());
    await untilReal(() => taking.settled, 'the empty old lock to be taken over without waiting');
    const l = await taking.promise;
    expect((await readHolder()).token).toBe(l.holder.token);
  });

  it('release never removes a lock that is no longer its own', async () => {
    const l = await lock();
    await writeHolder(lockFile, { pid: process.pid, token: 'a-later-holder' });
    await l.release();
    expect((await readHolder()).token).toBe('a-later-holder');
  });

  it('breaks a takeover marker left by a starter that died mid-takeover, then removes it', async () => {
    await writeHolder(lockFile, { pid: await deadPid(), token: 'dead-holder' });
    await writeHolder(`${lockFile}.takeover-dead-holder`, { pid: await deadPid(), token: 'dead-taker' });
    const l = await lock();
    expect((await readHolder()).token).toBe(l.holder.token);
    expect((await fs.readdir(dir)).filter((n) => n.includes('takeover'))).toEqual([]);
  });

  it('waits while a live starter is taking over, and does not delete the lock under it', async () => {
    await writeHolder(lockFile, { pid: await deadPid(), token: 'dead-holder' });
    const marker = `${lockFile}.takeover-dead-holder`;
    const s = sleeper();
    await writeHolder(marker, { pid: s.pid, token: 'live-taker' });
    let settled = false;
    const attempt = lockDataDir(dir).finally(() => {
      settled = true;
    });
    await sleep(300);
    expect(settled).toBe(false);
    expect((await readHolder()).token).toBe('dead-holder'); // only the marker's owner may delete it
    await fs.rm(marker);
    const l = await attempt;
    locks.push(l);
    expect((await readHolder()).token).toBe(l.holder.token);
  });

  it('of many concurrent takeovers of one stale lock in one process, exactly one wins', async () => {
    for (let round = 0; round < 20; round++) {
      await writeHolder(lockFile, { pid: await deadPid(), token: `dead-${round}` });
      const results = await Promise.allSettled(Array.from({ length: 8 }, () => lockDataDir(dir)));
      const won = results.filter((r): r is PromiseFulfilledResult<DataDirLock> => r.status === 'fulfilled').map((r) => r.value);
      expect(won, `round ${round}`).toHaveLength(1);
      for (const r of results) if (r.status === 'rejected') expect(r.reason).toBeInstanceOf(DataDirInUseError);
      expect((await readHolder()).token).toBe(won[0]!.holder.token);
      await won[0]!.release();
      expect(existsSync(lockFile)).toBe(false);
    }
  });

  // Across processes, on the compiled module (the child processes cannot load TypeScript).
  it('of several processes taking over one stale lock at the same instant, exactly one wins', { timeout: 60_000 }, async () => {
    const mod = pathToFileURL(path.join(ROOT, 'packages', 'broker', 'dist', 'broker', 'data-dir-lock.js')).href;
    // Waits for a common instant, tries once, reports; the winner holds the lock until its stdin closes.
    const script = `
      const [mod, dir, at] = process.argv.slice(-3);
      const { lockDataDir } = await import(mod);
      await new Promise((r) => setTimeout(r, Math.max(0, Number(at) - Date.now() - 5)));
      while (Date.now() < Number(at)) {}
      try {
        const l = await lockDataDir(dir);
        console.log(JSON.stringify({ won: true }));
        process.stdin.resume();
        process.stdin.on('end', async () => { await l.release(); process.exit(0); });
      } catch (e) {
        console.log(JSON.stringify({ won: false, name: e.name, pid: e.holder?.pid, message: e.message }));
        process.exit(0);
      }`;
    for (let round = 0; round < 3; round++) {
      await writeHolder(lockFile, { pid: await deadPid(), token: `dead-${round}` });
      const at = Date.now() + 2000;
      const procs = Array.from({ length: 5 }, () => {
        const c = trackChild(
          spawn(process.execPath, ['--input-type=module', '-e', script, mod, dir, String(at)], { stdio: ['pipe', 'pipe', 'inherit'] }),
          'lock-test contender',
        );
        children.push(c);
        return c;
      });
      const results = await Promise.all(
        procs.map(
          (c) =>
            new Promise<{ pid: number; won: boolean; name?: string; holder?: number }>((resolve, reject) => {
              readline.createInterface({ input: c.stdout! }).once('line', (line) => {
                const r = JSON.parse(line) as { won: boolean; name?: string; pid?: number };
                resolve({ pid: c.pid!, won: r.won, name: r.name, holder: r.pid });
              });
              // 'close', not 'exit': a contender that printed and exited at once may exit before its line is read.
              c.once('close', (code) => reject(new Error(`contender exited with ${code} without a result`)));
            }),
        ),
      );
      const winners = results.filter((r) => r.won);
      expect(winners, `round ${round}: ${JSON.stringify(results)}`).toHaveLength(1);
      const winner = winners[0]!;
      for (const r of results.filter((x) => !x.won)) expect(r).toMatchObject({ name: 'DataDirInUseError', holder: winner.pid });
      expect((await readHolder()).pid).toBe(winner.pid);
      const w = procs.find((c) => c.pid === winner.pid)!;
      const exited = new Promise((r) => w.once('exit', r));
      w.stdin!.end();
      await exited;
      expect(existsSync(lockFile)).toBe(false);
      for (const c of procs) if (c.exitCode === null) await new Promise((r) => c.once('exit', r));
    }
  });
});
