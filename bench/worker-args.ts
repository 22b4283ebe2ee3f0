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
