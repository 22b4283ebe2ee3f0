// A consumer-group worker: joins a group, processes each message, commits automatically, and leaves the
// group cleanly on Ctrl-C (SIGINT) or SIGTERM so its partitions move to the other workers at once.
//
// Run against a local broker:
//   npm start                                  # terminal 1: compiles dist/ if needed, then a broker on 127.0.0.1:9000
//   node examples/producer.mjs 1000                            # some messages in "orders"
//   node examples/consumer-group-worker.mjs [topic] [group]    # terminals 2, 3, ...: start several workers
//   npx tributary group describe order-workers     # members, assignments and lag
//
// Offsets are committed after a message's handler returned (at least once: a crash between the
// handler and the next commit makes the message be processed again by whoever gets the partition).
import { Consumer } from 'tributary-client';

const bootstrap = process.env.TRIBUTARY_BOOTSTRAP || '127.0.0.1:9000';
const topic = process.argv[2] ?? 'orders';
const groupId = process.argv[3] ?? 'order-workers';

const consumer = new Consumer({
  brokers: [bootstrap],
  topic,
  groupId,
  clientId: `worker-${process.pid}`,
  autoOffsetReset: 'earliest', // a new group starts at the beginning of the topic
  autoCommit: true,
  autoCommitIntervalMs: 1000,
});

consumer.on('rebalance.end', (e) => console.log(`[${process.pid}] generation ${e.generation}: assigned [${e.assigned}] revoked [${e.revoked}] kept [${e.kept}]`));
consumer.on('crash', (e) => console.error(`[${process.pid}] ${e.fatal ? 'fatal' : 'handler'} error: ${e.error.message}`));

let processed = 0;
let stopping = false;
const stop = (signal) => {
  if (stopping) return; // already stopping: close() finishes on its own
  stopping = true;
  console.log(`[${process.pid}] ${signal}: committing and leaving the group...`);
  // close() stops the readers, waits for running handlers, commits what was processed and leaves.
  void consumer.close();
};
// `on`, not `once`: a repeated signal (a second Ctrl-C, or `timeout` signalling the process and its group)
// must not fall back to the default action and kill the process in the middle of its final commit.
process.on('SIGINT', () => stop('SIGINT'));
process.on('SIGTERM', () => stop('SIGTERM'));

console.log(`[${process.pid}] consuming ${topic} as a member of ${groupId} (bootstrap ${bootstrap})`);
try {
  // run() resolves when the consumer is closed.
  await consumer.run({
    eachMessage: async ({ message }) => {
      const value = message.value.toString();
      processed++;
      if (processed <= 5 || processed % 100 === 0) {
        console.log(`[${process.pid}] p${message.partition}@${message.offset} key=${message.key?.toString() ?? '-'} ${value.slice(0, 80)}`);
      }
    },
  });
} catch (err) {
  // Stopped before the first assignment arrived: start() reports client_closed, which is no failure.
  if (!(stopping && err.code === 'client_closed')) {
    console.error(`[${process.pid}] consumer failed: ${err.message}`);
    process.exitCode = 1;
  }
}
console.log(`[${process.pid}] stopped after ${processed} messages`);
