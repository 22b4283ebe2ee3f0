// Side effects that are not commits (an HTTP call, an email, a write to another store), stopped the moment
// this worker loses the message's partition (docs/sdk.md, "Fenced reads").
//
// A worker paused past its session (a long GC pause, a stopped VM, SIGSTOP) has lost its partitions when
// it resumes: another worker is already processing them. Its reads are fenced by the broker, it hands
// nothing fetched before the pause to its handler, and every message carries `signal`, which aborts as
// soon as the partition is lost (or revoked, or the consumer closes). Pass it to whatever the handler
// waits on, and check `message.fenced` before each step that cannot be taken back.
//
// Run against a local broker:
//   npm start                                               # terminal 1: a broker on 127.0.0.1:9000
//   node examples/producer.mjs 1000                         # some messages in "orders"
//   node examples/fenced-side-effects.mjs [topic] [group]   # terminals 2, 3: two workers
//   kill -STOP <pid of one>; sleep 15; kill -CONT <pid>     # the resumed worker reports its partitions lost
import { setTimeout as sleep } from 'node:timers/promises';
import { Consumer } from 'tributary-client';

const bootstrap = process.env.TRIBUTARY_BOOTSTRAP || '127.0.0.1:9000';
const topic = process.argv[2] ?? 'orders';
const groupId = process.argv[3] ?? 'notifiers';
const tag = `[${process.pid}]`;

const consumer = new Consumer({ brokers: [bootstrap], topic, groupId, clientId: `notifier-${process.pid}`, autoOffsetReset: 'earliest' });
consumer.on('rebalance.end', (e) => console.log(`${tag} generation ${e.generation}: assigned [${e.assigned}] revoked [${e.revoked}] kept [${e.kept}]`));
consumer.on('partitions.lost', (e) => console.log(`${tag} lost partitions [${e.partitions}]: another worker owns them now`));

// Stands for an external call that takes a while (fetch(url, { signal }) takes the signal the same way).
async function notify(message, signal) {
  await sleep(50, undefined, { signal });
  console.log(`${tag} notified for p${message.partition}@${message.offset}`);
}

let stopping = false;
const stop = () => {
  stopping = true;
  void consumer.close();
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);

try {
  await consumer.run({
    eachMessage: async ({ message }) => {
      // Checked before the step that cannot be taken back: the new owner will process this message.
      if (message.fenced) return;
      try {
        await notify(message, message.signal);
      } catch (err) {
        if (!message.signal.aborted) throw err; // a real failure: the consumer delivers the message again
        // Aborted: the reason says why (member_not_found, NOT_OWNER, consumer_rebalancing, or closing).
        console.log(`${tag} stopped p${message.partition}@${message.offset}: ${message.signal.reason?.code ?? 'closing'}`);
      }
    },
  });
} catch (err) {
  if (!(stopping && err.code === 'client_closed')) {
    console.error(`${tag} consumer failed: ${err.message}`);
    process.exitCode = 1;
  }
}
