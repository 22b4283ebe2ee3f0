/**
 * node:fs with an fdatasync that fails with EIO while `state.on` (a disk that lost the pages it could not
 * write), and is held while `state.hold` (its calls queued in `state.held`, run when the test says), for
 * `vi.mock('node:fs', ...)` in tests of failed fsyncs. The journal's own writes are O_DSYNC writes, not
 * fdatasyncs, so they go on.
 */
type Fs = typeof import('node:fs');

export interface FdatasyncState {
  on: boolean;
  hold?: boolean;
  held?: Array<() => void>;
}

export function withFailingFdatasync(fs: Fs, state: FdatasyncState): Fs {
  return {
    ...fs,
    fdatasync: (fd: number, cb: (err: NodeJS.ErrnoException | null) => void) => {
      const run = () => {
        if (state.on) cb(Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO', syscall: 'fdatasync' }));
        else fs.fdatasync(fd, cb);
      };
      if (state.hold) (state.held ??= []).push(run);
      else if (state.on) process.nextTick(run);
      else run();
    },
  } as Fs;
}

/** Back to a disk that works: fdatasyncs neither fail nor are held (none left queued). */
export function resetFailing(state: FdatasyncState): void {
  Object.assign(state, { on: false, hold: false, held: [] });
}
