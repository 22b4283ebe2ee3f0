/**
 * Partition logs in a fresh temporary directory per test, closed and removed after it (and any spy
 * restored): `logs.dir` is the test's directory, `logs.open(sub)` opens a log in `<dir>/<sub>`.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, vi } from 'vitest';
import { type LogOptions, PartitionLog } from 'tributary-broker/storage/partition-log.js';
import { removeDir, tempDir } from './util.js';

export interface TempLogs {
  readonly dir: string;
  open(sub: string, opts?: Partial<LogOptions>): Promise<PartitionLog>;
  /** Closed after the test with the logs open() made. */
  track<T extends { close(): Promise<unknown> }>(x: T): T;
  /** Not closed after the test (the test closed it). */
  forget(x: { close(): Promise<unknown> }): void;
}

export function useTempLogs(prefix: string, defaults: Partial<LogOptions>): TempLogs {
  let dir = '';
  const opened: Array<{ close(): Promise<unknown> }> = [];
  beforeEach(async () => {
    dir = await tempDir(prefix);
  });
  afterEach(async () => {
    vi.restoreAllMocks();
    for (const l of opened.splice(0)) await l.close().catch(() => {});
    await removeDir(dir);
  });
  return {
    get dir() {
      return dir;
    },
    async open(sub, opts = {}) {
      const l = await PartitionLog.open(join(dir, sub), { ...defaults, ...opts });
      opened.push(l);
      return l;
    },
    track(x) {
      opened.push(x);
      return x;
    },
    forget(x) {
      const i = opened.indexOf(x);
      if (i >= 0) opened.splice(i, 1);
    },
  };
}
