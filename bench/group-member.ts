/**
 * One consumer group member in its own process, for the rebalance benchmark and the group soak test.
 * It joins on the `start` line of stdin and closes cleanly on `close`, and reports on stdout, one JSON
 * object per line: ready, assigned / revoked (with the partitions and a wall-clock time in ms),
 * records (with --log-records), closed, crash.
 *
 *   node dist/bench/group-member.js --brokers 127.0.0.1:9000 --group g --topic t --id m1 [--session-ms 3000] [--log-records]
 */
import { createInterface } from 'node:readline';
import { Consumer } from 'tributary-client/consumer.js';

function arg(name: string, fallback?: string): string {
  const i = process.argv.indexOf(`--${name}`);
  const v = i >= 0 ? process.argv[i + 1] : fallback;
  if (v === undefined) throw new Error(`missing --${name}`);
  return v;
}

const now = () => performance.timeOrigin + performance.now();
const out = (o: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(o)}\n`);
const logRecords = process.argv.includes('--log-records');

const consumer = new Consumer({
  brokers: [arg('brokers')],
  groupId: arg('group'),
  topic: arg('topic'),
  clientId: arg('id'),
  sessionTimeoutMs: Number(arg('session-ms', '3000')),
  heartbeatIntervalMs: Math.max(100, Math.floor(Number(arg('session-ms', '3000')) / 3)),
  autoOffsetReset: 'earliest',
  autoCommitIntervalMs: 200,
  partitionsConsumedConcurrently: 64,
  maxWaitMs: 500,
});
consumer.on('partitions.assigned', (e) => out({ ev: 'assigned', partitions: e.partitions, generation: e.generation, t: now() }));
consumer.on('partitions.revoked', (e) => out({ ev: 'revoked', partitions: e.partitions, generation: e.generation, t: now() }));
consumer.on('crash', (e) => out({ ev: 'crash', error: e.error.message, fatal: e.fatal, t: now() }));

let running: Promise<void> | undefined;
const rl = createInterface({ input: process.stdin });
rl.on('line', (line) => {
  const cmd = line.trim();
  if (cmd === 'start' && !running) {
    out({ ev: 'starting', t: now() });
    running = consumer.run({
      eachMessage: ({ message }) => {
        if (logRecords) out({ ev: 'record', p: message.partition, o: message.offset, t: now() });
      },
    });
    running.catch((err: Error) => out({ ev: 'crash', error: err.message, fatal: true, t: now() }));
  } else if (cmd === 'close') {
    out({ ev: 'closing', t: now() });
    void consumer.close().then(() => {
      out({ ev: 'closed', t: now() });
      rl.close();
      process.exit(0);
    });
  }
});
process.on('SIGTERM', () => {
  void consumer.close().then(() => process.exit(0));
});
out({ ev: 'ready', pid: process.pid, t: now() });
