// A worker whose handler fails some messages: they are parked on retry topics (handled again after
// 200 ms, then 400 ms) and, after the last attempt, on a dead-letter topic; each park commits together
// with its source offset, so a message is never lost or parked twice however often workers crash.
//
// Run against a local broker:
//   npm start                                               # terminal 1: a broker on 127.0.0.1:9000
//   node examples/producer.mjs 1000 orders                  # input records
//   node examples/retry-dlq-worker.mjs [topic] [group]      # terminals 2, 3, ...: as many workers as you like
//   npx tributary consume orders.order-retry.dlq --from-beginning --max 5    # what failed 3 times
//   npx tributary dlq replay orders.order-retry.dlq         # once fixed: back to orders
//
// The handler fails a message at random with probability TRIBUTARY_FAIL_RATE (default 0.3), decided by
// a hash of (TRIBUTARY_FAIL_SEED, message, attempt): the same attempt of a message always fails or always
// succeeds, whichever worker runs it, so a run can be checked afterwards (test/fault/retry-dlq-kill9.test.ts).
// It prints one JSON line per attempt on stdout: {type:'try', id, attempt, ok, at, dueAt, partition, offset}.
import { createHash } from 'node:crypto';
import { Consumer } from 'tributary-client';

const bootstrap = process.env.TRIBUTARY_BOOTSTRAP || '127.0.0.1:9000';
const topic = process.argv[2] ?? 'orders';
const groupId = process.argv[3] ?? 'order-retry';
const failRate = Number(process.env.TRIBUTARY_FAIL_RATE ?? 0.3);
const seed = process.env.TRIBUTARY_FAIL_SEED ?? 'example';
const sessionTimeoutMs = Number(process.env.TRIBUTARY_SESSION_TIMEOUT_MS || 10_000);
const out = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);

/** Whether this attempt of this message fails: a hash, so every worker decides the same. */
function fails(id, attempt) {
  const h = createHash('sha256').update(`${seed}:${id}:${attempt}`).digest();
  return h.readUInt32BE(0) / 2 ** 32 < failRate;
}

const consumer = new Consumer({
  brokers: [bootstrap],
  topic,
  groupId,
  clientId: 'order-retry',
  autoOffsetReset: 'earliest',
  sessionTimeoutMs,
  heartbeatIntervalMs: Math.max(100, Math.floor(sessionTimeoutMs / 5)),
  autoCommitIntervalMs: 200,
});
consumer.on('crash', (e) => console.error(`${e.fatal ? 'fatal' : 'handler'} error: ${e.error.code ?? ''} ${e.error.message}`));
consumer.on('retry.parked', (e) => console.error(`parked ${e.source.topic}/${e.source.partition}/${e.source.offset} attempt ${e.attempt} on ${e.topic}`));

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  void consumer.close();
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);

await consumer.run({
  retryTopics: {
    delays: ['200ms', '400ms'],
    maxAttempts: 3,
    // a crashed worker's open park holds its partition at most this long
    transactionTimeoutMs: Number(process.env.TRIBUTARY_PARK_TIMEOUT_MS || 10_000),
  },
  eachMessage: async ({ message, retry }) => {
    let id;
    try {
      id = JSON.parse(message.value.toString()).id;
    } catch {
      id = message.value.toString();
    }
    const ok = !fails(id, retry.attempt);
    // Written before the handler returns: a line printed before a kill -9 is never lost.
    out({ type: 'try', id, attempt: retry.attempt, ok, at: Date.now(), dueAt: retry.dueAt ?? null, partition: retry.partition, offset: retry.offset });
    if (!ok) throw new Error(`attempt ${retry.attempt} of ${id} failed`);
  },
});
