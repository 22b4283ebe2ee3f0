// A consumer-group member in its own process, for multi-process SDK tests.
//
//   node consumer-worker.mjs '<json config>'
//
// config: { name, options: ConsumerOptions, handlerDelayMs?, randomDelayMs?, concurrency?, trace? }
//   trace: also print join, rebalance.start, assigned and heartbeat lines
//   randomDelayMs: each handler also sleeps a random 0..randomDelayMs ms
//   concurrency: passed to run() (docs/sdk.md, "Concurrency"); then a 'done' line follows each 'msg'
// It imports the compiled SDK (packages/client/dist/index.js), runs `run({ eachMessage })` and prints one JSON
// line per event on stdout (writes to a pipe are synchronous on Linux, so a line printed before a
// kill -9 is never lost):
//   {type:'ready', memberId, generation, assignment}
//   {type:'msg', id, partition, offset, at}            one per processed record (id: the value up to '|')
//   {type:'done', partition, offset, key, at}          with concurrency: the handler of that record returned
//   {type:'commit', offsets:[{partition, offset}], generation, at}   after the broker acknowledged it
//   {type:'rebalance', generation, assigned, revoked, kept, owned, at}
//   {type:'crash', code, message, fatal, at}
//   {type:'signal', partition, code, at}              a partition assignment's signal fired (code: its reason's)
//   {type:'lost', partitions, at}                     partitions.lost
//   {type:'closed', at}                               after SIGTERM → close() finished
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const { Consumer } = await import(pathToFileURL(path.join(root, 'packages', 'client', 'dist', 'index.js')).href);

const cfg = JSON.parse(process.argv[2] ?? '{}');
const out = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);

const consumer = new Consumer(cfg.options);
consumer.on('commit', (e) => out({ type: 'commit', offsets: e.offsets, generation: e.generation, at: Date.now() }));
consumer.on('rebalance.end', (e) =>
  out({ type: 'rebalance', generation: e.generation, assigned: e.assigned, revoked: e.revoked, kept: e.kept, owned: consumer.assignment(), at: Date.now() }),
);
consumer.on('partitions.lost', (e) => out({ type: 'lost', partitions: e.partitions, at: Date.now() }));
if (cfg.trace) {
  // Diagnostics for fault tests: the membership steps behind the events above.
  consumer.on('group.join', (e) => out({ type: 'join', memberId: e.memberId, generation: e.generation, assignments: e.assignments, at: Date.now() }));
  consumer.on('rebalance.start', (e) => out({ type: 'rebalance.start', reason: e.reason, generation: e.generation, at: Date.now() }));
  consumer.on('partitions.assigned', (e) => out({ type: 'assigned', partitions: e.partitions, generation: e.generation, ag: e.assignmentGeneration, at: Date.now() }));
  consumer.on('heartbeat', (e) => out({ type: 'heartbeat', memberId: e.memberId, generation: e.generation, at: Date.now() }));
}
consumer.on('crash', (e) => out({ type: 'crash', code: e.error?.code, message: e.error?.message, fatal: e.fatal, at: Date.now() }));

let closing = false;
process.on('SIGTERM', () => {
  if (closing) return;
  closing = true;
  consumer.close().then(
    () => {
      out({ type: 'closed', state: consumer.state, at: Date.now() });
      process.exit(0);
    },
    (err) => {
      out({ type: 'error', message: String(err), at: Date.now() });
      process.exit(1);
    },
  );
});

// Every partition assignment's signal, reported once when it fires (fenced reads: docs/sdk.md).
const watched = new WeakSet();
const running = consumer.run({
  eachMessage: async ({ message, signal }) => {
    if (!watched.has(signal)) {
      watched.add(signal);
      const partition = message.partition;
      signal.addEventListener('abort', () => out({ type: 'signal', partition, code: signal.reason?.code ?? null, at: Date.now() }), { once: true });
    }
    const value = message.value.toString();
    const bar = value.indexOf('|');
    out({ type: 'msg', id: bar >= 0 ? value.slice(0, bar) : value, partition: message.partition, offset: message.offset, ag: message.assignmentGeneration, at: Date.now() });
    if (cfg.handlerDelayMs) await sleep(cfg.handlerDelayMs);
    if (cfg.randomDelayMs) await sleep(Math.floor(Math.random() * (cfg.randomDelayMs + 1)));
    if (cfg.concurrency) out({ type: 'done', partition: message.partition, offset: message.offset, key: message.key?.toString() ?? null, at: Date.now() });
  },
  ...(cfg.concurrency ? { concurrency: cfg.concurrency } : {}),
});
running.catch((err) => {
  out({ type: 'error', code: err?.code, message: String(err), at: Date.now() });
  process.exit(2);
});
// run() starts the consumer: report once the first assignment is installed
await consumer.start();
out({ type: 'ready', memberId: consumer.memberId, generation: consumer.generation, assignment: consumer.assignment(), at: Date.now() });
