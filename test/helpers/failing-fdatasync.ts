/**
 * node:fs with an fdatasync that fails with EIO while `state.on` (a disk that lost the pages it could not
 * write), for `vi.mock('node:fs', ...)` in tests of failed fsyncs. The journal's own writes are O_DSYNC
 * writes, not fdatasyncs, so they go on.
 */
type Fs = typeof import('node:fs');

export function withFailingFdatasync(fs: Fs, state: { on: boolean }): Fs {
  return {
    ...fs,
    fdatasync: (fd: number, cb: (err: NodeJS.ErrnoException | null) => void) => {
      if (state.on) {
        process.nextTick(() => cb(Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO', syscall: 'fdatasync' })));
        return;
      }
      fs.fdatasync(fd, cb);
    },
  } as Fs;
}
