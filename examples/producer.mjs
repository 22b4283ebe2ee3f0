// Sends N keyed messages with the SDK's batching Producer and prints where they landed.
//
// Run against a local broker:
//   npm start                                  # terminal 1: compiles dist/ if needed, then a broker on 127.0.0.1:9000
//   node examples/producer.mjs [count] [topic] # terminal 2 (TRIBUTARY_BOOTSTRAP=host:port for another broker)
//
// Records with the same key always land on the same partition (FNV-1a 64 of the key, the broker's own
// partitioner), so per-key order is kept. Delivery is at least once: a batch retried after a lost reply
// may be written twice (unless the producer is idempotent: new Producer({ idempotent: true, ... })).
import { Admin, Producer } from 'tributary-client';

const bootstrap = process.env.TRIBUTARY_BOOTSTRAP || '127.0.0.1:9000';
const count = Number(process.argv[2] ?? 1000);
const topic = process.argv[3] ?? 'orders';
if (!Number.isSafeInteger(count) || count < 1) {
  console.error('usage: node examples/producer.mjs [count >= 1] [topic]');
  process.exit(2);
}

// Topics are not created on first use: create it (a no-op when it exists with the same definition).
const admin = new Admin({ brokers: [bootstrap] });
try {
  const t = await admin.createTopic({ topic, partitions: 4 });
  console.log(`topic ${t.topic}: ${t.partitions} partitions${t.created ? ' (created)' : ''}`);
} catch (err) {
  // A topic of that name with another definition is fine for this example.
  if (err.code !== 'topic_already_exists') throw err;
} finally {
  await admin.close();
}

const producer = new Producer({ brokers: [bootstrap], clientId: 'example-producer', lingerMs: 5, acks: 'all' });
const started = Date.now();
const perPartition = new Map();
try {
  // send() resolves once its records are acknowledged; many sends in flight at once are batched per
  // partition and pipelined. Ten customers: each customer's orders stay in order on one partition.
  const sends = [];
  for (let i = 0; i < count; i++) {
    const customer = `customer-${i % 10}`;
    sends.push(
      producer.send({
        topic,
        messages: [{ key: customer, value: JSON.stringify({ order: i, customer, amount: (i * 7) % 100 }), headers: { source: 'examples/producer.mjs' } }],
      }),
    );
  }
  for (const [meta] of await Promise.all(sends)) perPartition.set(meta.partition, (perPartition.get(meta.partition) ?? 0) + 1);
} finally {
  await producer.close(); // flushes whatever is still buffered
}
const ms = Date.now() - started;
console.log(`sent ${count} messages to ${topic} in ${ms} ms`);
for (const [p, n] of [...perPartition].sort((a, b) => a[0] - b[0])) console.log(`  partition ${p}: ${n}`);
