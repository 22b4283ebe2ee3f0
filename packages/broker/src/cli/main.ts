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

const code = await run(process.argv);
await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
// Explicit exit: half-closed sockets or a stdin reader must not keep a finished command alive.
process.exit(code);
