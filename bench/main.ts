/**
 * Benchmark dispatcher: `npm run bench -- <name> [options]` runs `dist/bench/main.js <name> ...`.
 * Each benchmark is a module exporting `description` and `run(argv): Promise<exit code>`.
 */
interface BenchModule {
  description: string;
  run(argv: string[]): Promise<number>;
}

const BENCHMARKS: Record<string, () => Promise<BenchModule>> = {
  failover: () => import('./failover.js'),
  kafka: () => import('./kafka.js'),
  latency: () => import('./latency.js'),
  parallel: () => import('./parallel.js'),
  'produce-consume': () => import('./produce-consume.js'),
  reassign: () => import('./reassign.js'),
  rebalance: () => import('./rebalance.js'),
  'record-batch': () => import('./record-batch.js'),
  scale: () => import('./scale.js'),
  'scale-cluster': () => import('./scale-cluster.js'),
  transactions: () => import('./transactions.js'),
};

async function list(): Promise<string> {
  const lines = await Promise.all(Object.entries(BENCHMARKS).map(async ([name, load]) => `  ${name.padEnd(18)} ${(await load()).description}`));
  return `usage: npm run bench -- <benchmark> [options]   (<benchmark> --help for its options)\n\nbenchmarks:\n${lines.join('\n')}\n`;
}

async function main(): Promise<number> {
  const [name, ...rest] = process.argv.slice(2);
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(await list());
    return name === undefined ? 2 : 0;
  }
  const load = Object.hasOwn(BENCHMARKS, name) ? BENCHMARKS[name] : undefined;
  if (!load) {
    process.stderr.write(`unknown benchmark: ${name}\n\n${await list()}`);
    return 2;
  }
  return (await load()).run(rest);
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  },
);
