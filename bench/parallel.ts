/**
 * `npm run bench -- parallel`: records/s of run({ eachMessage, concurrency }) against perPartition (N)
 * and the number of distinct keys, with a handler that sleeps ~5 ms (an I/O-bound handler: a database
 * or HTTP call), all records in one partition (the hot partition the feature is for; docs/sdk.md,
 * "Concurrency").
 *
 * A broker process (defaults: flush=always); per key count, a topic of --records keyed records produced
 * up front; per N, an SDK Consumer in this process, alone in a fresh group, reads it from the start.
 * Rate: records over the time from the first handler call to the last one returning. N=1 runs with
 * `concurrency: { perPartition: 1 }`, the reference for the ratios; `--with-serial` also runs without
 * `concurrency` (the one-at-a-time path). Every run checks that each record was handled once and each
 * key's records in offset order, and prints the most handlers seen at once; a violation exits 1.
 */
import { Admin } from 'tributary-client/admin.js';
import { parseArgs } from 'node:util';
import { Consumer } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import { fmtFixed, fmtInt, installCleanupHandlers, makeTempDir, nowMs, startBroker, table } from './lib.js';

export const description = 'records/s of run() with concurrency against perPartition and distinct keys (handler sleeps ~5 ms)';

const USAGE = 'usage: npm run bench -- parallel [--records 2000] [--n 1,4,16,64] [--keys 1,16,1000] [--sleep-ms 5] [--with-serial]\n';

/** The options, or a message for a bad one (unknown options and non-numbers are refused, never ignored). */
function parseOptions(argv: string[]): { records: number; ns: number[]; keyCounts: number[]; sleepMs: number; withSerial: boolean; help: boolean } | string {
  let v: Record<string, string | boolean | undefined>;
  try {
    v = parseArgs({
      args: argv,
      options: {
        records: { type: 'string', default: '2000' },
        n: { type: 'string', default: '1,4,16,64' },
        keys: { type: 'string', default: '1,16,1000' },
        'sleep-ms': { type: 'string', default: '5' },
        'with-serial': { type: 'boolean', default: false },
        help: { type: 'boolean', default: false },
      },
      strict: true,
    }).values as Record<string, string | boolean | undefined>;
  } catch (err) {
    return `${(err as Error).message}\n${USAGE}`;
  }
  const num = (name: string, min: number): number | string => {
    const x = Number(v[name]);
    return Number.isSafeInteger(x) && x >= min ? x : `--${name} must be an integer >= ${min}\n${USAGE}`;
  };
  const list = (name: string): number[] | string => {
    const xs = String(v[name]).split(',').filter(Boolean).map(Number);
    return xs.length > 0 && xs.every((x) => Number.isSafeInteger(x) && x >= 1) ? xs : `--${name} takes a comma-separated list of positive integers\n${USAGE}`;
  };
  const records = num('records', 1);
  const sleepMs = num('sleep-ms', 0);
  const ns = list('n');
  const keyCounts = list('keys');
  for (const x of [records, sleepMs, ns, keyCounts]) if (typeof x === 'string') return x;
  return { records: records as number, ns: ns as number[], keyCounts: keyCounts as number[], sleepMs: sleepMs as number, withSerial: v['with-serial'] === true, help: v.help === true };
}

interface Result {
  keys: number;
  n: number | 'serial';
  rate: number;
  maxRunning: number;
  violations: number;
}

async function consume(address: string, topic: string, records: number, n: number | 'serial', sleepMs: number): Promise<Omit<Result, 'keys'>> {
  const consumer = new Consumer({ brokers: [address], groupId: `bench-${topic}-${n}`, topic, autoOffsetReset: 'earliest', maxWaitMs: 100 });
  const handled = new Set<number>();
  const lastByKey = new Map<string, number>();
  let violations = 0;
  let running = 0;
  let maxRunning = 0;
  let first = 0;
  let last = 0;
  let finish: () => void = () => {};
  const allDone = new Promise<void>((r) => {
    finish = r;
  });
  const run = consumer.run({
    ...(n === 'serial' ? {} : { concurrency: { perPartition: n } }),
    eachMessage: async ({ message }) => {
      if (first === 0) first = nowMs();
      running++;
      maxRunning = Math.max(maxRunning, running);
      await new Promise((r) => setTimeout(r, sleepMs));
      running--;
      const key = message.key!.toString();
      if ((lastByKey.get(key) ?? -1) > message.offset || handled.has(message.offset)) violations++;
      lastByKey.set(key, message.offset);
      handled.add(message.offset);
      if (handled.size === records) {
        last = nowMs();
        finish();
      }
    },
  });
  await allDone;
  await consumer.close();
  await run;
  return { n, rate: (records * 1000) / (last - first), maxRunning, violations };
}

export async function run(argv: string[]): Promise<number> {
  const o = parseOptions(argv);
  if (typeof o === 'string') {
    process.stderr.write(o);
    return 2;
  }
  if (o.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  installCleanupHandlers();
  const { records, ns, keyCounts, sleepMs, withSerial } = o;
  if (!ns.includes(1)) ns.unshift(1); // the reference of the ratios
  const broker = await startBroker(makeTempDir('tributary-bench-parallel-'));
  const address = `${broker.host}:${broker.port}`;
  const producer = new Producer({ brokers: [address], lingerMs: 5 });
  const results: Result[] = [];
  try {
    for (const keys of keyCounts) {
      const topic = `par-k${keys}`;
      // one partition: every record of the topic goes to partition 0 whatever its key
      const messages = Array.from({ length: records }, (_, i) => ({ key: `key-${i % keys}`, value: `r${i}`, partition: 0 }));
      const admin = new Admin({ brokers: [address] });
      await admin.createTopic({ topic, partitions: 1 });
      await admin.close();
      await producer.send({ topic, messages });
      for (const n of withSerial ? ['serial' as const, ...ns] : ns) {
        const r = await consume(address, topic, records, n, sleepMs);
        results.push({ keys, ...r });
        process.stderr.write(`keys ${keys} N ${n}: ${fmtInt(r.rate)} records/s, up to ${r.maxRunning} at once\n`);
      }
    }
  } finally {
    await producer.close();
    await broker.child.stop();
  }
  const rows = results.map((r) => {
    const ref = results.find((x) => x.keys === r.keys && x.n === 1)!;
    return [String(r.keys), String(r.n), fmtInt(r.rate), fmtFixed(r.rate / ref.rate, 2), String(r.maxRunning), String(r.violations)];
  });
  process.stdout.write(
    `\nparallel: ${records} records in one partition per key count, handler sleeps ${sleepMs} ms, ordering 'key', default maxBuffered (10 × N)\n\n${table(
      ['keys', 'N', 'records/s', 'ratio to N=1', 'max at once', 'order/duplicate violations'],
      rows,
    )}\n`,
  );
  return results.some((r) => r.violations > 0) ? 1 : 0;
}
