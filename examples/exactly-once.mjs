// An exactly-once consume → transform → produce pipeline: every input record's output is written, and
// its input offset committed, in one transaction, so a read_committed reader of the output sees each
// input record exactly once however often the pipeline crashes and restarts.
//
// Run against a local broker:
//   npm start                                                        # terminal 1: a broker on 127.0.0.1:9000
//   node examples/producer.mjs 1000 orders                           # input records
//   node examples/exactly-once.mjs [input] [output] [group] [id]     # terminals 2, 3, ...: one id per worker
//   npx tributary consume orders-eos --from-beginning --max 5
//
// How it stays exactly once:
// - The output records and the input offsets go into one transaction (txn.send + txn.sendOffsets) and
//   commit together: a crash before the commit leaves neither, and the next owner of the partition
//   reads those input records again.
// - The transactional id is stable per worker (4th argument): a restarted worker fences its previous
//   incarnation and aborts whatever transaction that one left open, instead of waiting for its timeout.
// - sendOffsets is fenced like a commit: a worker that lost the partition in a rebalance cannot move its
//   offsets, so its transaction cannot commit work that now belongs to someone else.
// - Consumers of the output use isolation read_committed (the SDK default).
import { hostname } from 'node:os';
import { Admin, Consumer, Producer, ProducerFencedError } from 'tributary-client';

const bootstrap = process.env.TRIBUTARY_BOOTSTRAP || '127.0.0.1:9000';
const input = process.argv[2] ?? 'orders';
const output = process.argv[3] ?? `${input}-eos`;
const groupId = process.argv[4] ?? 'order-eos';
const transactionalId = process.argv[5] ?? `${groupId}-${hostname()}-${process.pid}`;
const sessionTimeoutMs = Number(process.env.TRIBUTARY_SESSION_TIMEOUT_MS || 10_000);

const admin = new Admin({ brokers: [bootstrap] });
try {
  const partitions = (await admin.describeTopic(input)).partitions.length;
  await admin.createTopic({ topic: output, partitions }).catch((err) => {
    if (err.code !== 'topic_already_exists') throw err;
  });
} finally {
  await admin.close();
}

const producer = new Producer({ brokers: [bootstrap], clientId: 'order-eos', transactionalId, transactionTimeoutMs: 10_000 });
const consumer = new Consumer({
  brokers: [bootstrap],
  topic: input,
  groupId,
  clientId: 'order-eos',
  autoOffsetReset: 'earliest',
  autoCommit: false, // offsets move only inside transactions
  sessionTimeoutMs,
  heartbeatIntervalMs: Math.max(100, Math.floor(sessionTimeoutMs / 5)),
});

function transform(message) {
  let order;
  try {
    order = JSON.parse(message.value.toString());
  } catch {
    order = { raw: message.value.toString() };
  }
  // `source` names the input record: downstream can check that each appears once.
  return JSON.stringify({ ...order, source: `${input}/${message.partition}/${message.offset}` });
}

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  void consumer.close().then(() => producer.close());
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);

consumer.on('rebalance.end', (e) => console.log(JSON.stringify({ event: 'rebalance', generation: e.generation, owned: consumer.assignment() })));
consumer.on('crash', (e) => console.error(`[${transactionalId}] ${e.fatal ? 'fatal' : 'batch'} error: ${e.error.code ?? ''} ${e.error.message}`));

// Fence the previous worker with this id now: its open transaction is aborted at once.
await producer.initTransactions();

let committed = 0;
await consumer.run({
  eachBatch: async ({ partition, messages }) => {
    const txn = await producer.transaction();
    try {
      await txn.send({ topic: output, messages: messages.map((m) => ({ key: m.key ?? undefined, value: transform(m), partition })) });
      await txn.sendOffsets({ consumer, offsets: [{ partition, offset: messages[messages.length - 1].offset + 1 }] });
      await txn.commit();
    } catch (err) {
      // Nothing of this batch is visible and its offsets did not move: throwing makes the consumer read
      // it again (or, after a rebalance, its new owner does).
      await txn.abort().catch(() => {});
      if (err instanceof ProducerFencedError) {
        // A newer worker with our transactional id exists (or our transaction timed out): this process
        // can never commit again. Leave; a supervisor restarts it with a fresh producer.
        console.error(`[${transactionalId}] fenced: ${err.message}`);
        process.exitCode = 1;
        stop();
      }
      throw err;
    }
    committed += messages.length;
    console.log(JSON.stringify({ event: 'committed', partition, records: messages.length, total: committed }));
  },
});
