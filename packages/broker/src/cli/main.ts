#!/usr/bin/env node
import { run } from './program.js';

/** Resolves once everything written so far has been handed to the OS (or after a short grace period). */
function flushed(stream: NodeJS.WriteStream): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, 1000);
    stream.write('', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

// A reader that went away (`tributary group describe g | head`) is a normal end, not a crash with a
// stack: stop quietly. Any other output error is reported once, without a stack.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE' && stream === process.stdout) process.stderr.write(`error: cannot write output: ${err.message}\n`);
    process.exit(err.code === 'EPIPE' ? 0 : 1);
  });
}

const code = await run(process.argv);
await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
// Explicit exit: half-closed sockets or a stdin reader must not keep a finished command alive.
process.exit(code);
