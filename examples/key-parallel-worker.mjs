// A consumer-group worker whose handler is slow (an I/O call of 5-20 ms) and runs many at once inside
// each partition: records with different keys in parallel, each key's records one at a time in offset
// order (docs/sdk.md, "Concurrency"). Prints the rate every second and leaves cleanly on Ctrl-C.
//
// Run against a local broker:
//   npm start                                             # terminal 1: a broker on 127.0.0.1:9000
//   node examples/producer.mjs 5000                       # keyed messages in "orders"
//   node examples/key-parallel-worker.mjs [perPartition] [topic] [group]
//
// Offsets are committed up to the first record not yet handled, never past it: a crash makes the next
// owner of the partition handle again what was handled since the last commit plus at most the in-flight
// window (maxBuffered records, 10 x perPartition by default), never skip one.
import { setTimeout as sleep } from 'node:timers/promises';
import { Consumer } from 'tributary-client';

const bootstrap = process.env.TRIBUTARY_BOOTSTRAP || '127.0.0.1:9000';
const perPartition = Number(process.argv[2] ?? 16);
const topic = process.argv[3] ?? 'orders';
const groupId = process.argv[4] ?? 'order-parallel-workers';

const consumer = new Consumer({ brokers: [bootstrap], topic, groupId, clientId: `pworker-${process.pid}`, autoOffsetReset: 'earliest' });
consumer.on('rebalance.end', (e) => console.log(`[${process.pid}] generation ${e.generation}: assigned [${e.assigned}] revoked [${e.revoked}]`));
consumer.on('crash', (e) => console.error(`[${process.pid}] ${e.fatal ? 'fatal' : 'handler'} error: ${e.error.message}`));

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  // close() aborts the handlers' signal, waits for the running ones, commits the handled prefix and leaves.
  void consumer.close();
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);

// Per key, the last offset handled: a key's records must arrive in offset order.
const lastOffset = new Map();
let handled = 0;
let running = 0;
let mostAtOnce = 0;
const ticker = setInterval(() => {
  console.log(`[${process.pid}] ${handled} records/s, up to ${mostAtOnce} handlers at once`);
  handled = 0;
  mostAtOnce = 0;
}, 1000);

console.log(`[${process.pid}] consuming ${topic} as ${groupId}, up to ${perPartition} handlers per partition (bootstrap ${bootstrap})`);
try {
  await consumer.run({
    concurrency: { perPartition, ordering: 'key' },
    eachMessage: async ({ message, signal }) => {
      running++;
      mostAtOnce = Math.max(mostAtOnce, running);
      try {
        // the slow part: a database write or an HTTP call; it should give up when the partition is revoked
        await sleep(5 + Math.random() * 15, undefined, { signal });
        const key = `${message.partition}/${message.key?.toString() ?? '(no key)'}`;
        if ((lastOffset.get(key) ?? -1) > message.offset) console.error(`[${process.pid}] out of order: ${key} ${message.offset}`);
        lastOffset.set(key, message.offset);
        handled++;
      } finally {
        running--;
      }
    },
  });
} catch (err) {
  if (!(stopping && err.code === 'client_closed')) {
    console.error(`[${process.pid}] consumer failed: ${err.message}`);
    process.exitCode = 1;
  }
} finally {
  clearInterval(ticker);
}
console.log(`[${process.pid}] stopped`);
