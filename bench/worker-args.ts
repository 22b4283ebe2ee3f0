/**
 * Command-line flags of the produce-consume benchmark's worker processes: the ones they all take (where
 * the broker is, the topic, how many records of what size, which target) plus each worker's own, and the
 * checked integer parsing and fatal exits they share.
 */
import { parseArgs } from 'node:util';

type Options = Record<string, { type: 'string'; default?: string }>;

const COMMON: Options = {
  host: { type: 'string', default: '127.0.0.1' },
  port: { type: 'string' },
  topic: { type: 'string', default: 'bench' },
  partitions: { type: 'string', default: '12' },
  count: { type: 'string' },
  size: { type: 'string' },
  target: { type: 'string', default: 'broker' },
};

export function workerArgs(name: string, own: Options, defaultMin: number) {
  const { values } = parseArgs({ options: { ...COMMON, ...own } });
  const a = values as Record<string, string | undefined>;
  /** A flag as an integer >= min; a bad one ends the process with exit code 2. */
  const int = (flag: string, v: string | undefined, min = defaultMin): number => {
    const n = Number(v);
    if (!Number.isSafeInteger(n) || n < min) {
      process.stderr.write(`${name}: --${flag} must be an integer >= ${min} (got ${v})\n`);
      process.exit(2);
    }
    return n;
  };
  const fail = (msg: string): never => {
    process.stderr.write(`${name}: ${msg}\n`);
    process.exit(1);
  };
  return { a, int, fail };
}

/** The producers' warm-up flags (`--warmup N --warmup-topic T`); see waitForGo. */
export const WARMUP_FLAGS: Options = {
  warmup: { type: 'string', default: '0' },
  'warmup-topic': { type: 'string' },
};

/**
 * A producer's warm-up, then its hold: it reports {"event":"warm"} and waits for a line `go` on stdin
 * before the measured pass, so the orchestrator can retire the warm-up's consumer and start the measured
 * one first (a relay forwards every frame to whichever consumer is subscribed).
 */
export function waitForGo(): Promise<void> {
  return new Promise((resolve, reject) => {
    let buffered = '';
    const onData = (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      if (!buffered.split('\n').some((l) => l.trim() === 'go')) return;
      process.stdin.off('data', onData);
      // Nothing more comes: a stdin left open would keep the worker from exiting when it is done.
      process.stdin.destroy();
      resolve();
    };
    process.stdin.on('data', onData);
    process.stdin.once('end', () => reject(new Error('stdin closed before go')));
    process.stdin.once('error', reject);
  });
}
