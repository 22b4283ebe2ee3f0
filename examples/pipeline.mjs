// A consume → transform → produce pipeline: reads orders from an input topic, enriches each one, writes
// it to an output topic and commits the input offsets only after the output records are acknowledged.
//
// Run against a local broker:
//   npm start                                  # terminal 1: compiles dist/ if needed, then a broker on 127.0.0.1:9000
//   node examples/producer.mjs 1000 orders                        # input records
//   node examples/pipeline.mjs [input] [output] [group]           # Ctrl-C to stop
//   npx tributary consume orders-enriched --from-beginning --max 5
//
// Delivery is AT LEAST ONCE: if the pipeline dies after a produce was acknowledged but before the commit,
// the restarted pipeline reads those input records again and writes them to the output a second time.
// Exactly-once (the output records and the input offsets committed atomically) arrives with transactions.
import { Admin, Consumer, Producer } from 'tributary-client';

const bootstrap = process.env.TRIBUTARY_BOOTSTRAP || '127.0.0.1:9000';
const input = process.argv[2] ?? 'orders';
const output = process.argv[3] ?? `${input}-enriched`;
const groupId = process.argv[4] ?? 'order-enricher';

const admin = new Admin({ brokers: [bootstrap] });
try {
  const partitions = (await admin.describeTopic(input)).partitions.length;
  await admin.createTopic({ topic: output, partitions }).catch((err) => {
    if (err.code !== 'topic_already_exists') throw err;
  });
} finally {
  await admin.close();
}

const producer = new Producer({ brokers: [bootstrap], clientId: 'order-enricher', acks: 'all' });
const consumer = new Consumer({
  brokers: [bootstrap],
  topic: input,
  groupId,
  clientId: 'order-enricher',
  autoOffsetReset: 'earliest',
  autoCommit: false, // committed by hand, after the output is acknowledged
});

function enrich(value) {
  let order;
  try {
    order = JSON.parse(value.toString());
  } catch {
    order = { raw: value.toString() };
  }
  return JSON.stringify({ ...order, amountCents: Math.round((order.amount ?? 0) * 100), enrichedAt: new Date().toISOString() });
}

let stopping = false;
const stop = (signal) => {
  if (stopping) return; // already stopping: close() finishes on its own
  stopping = true;
  console.log(`${signal}: finishing the current batch and stopping...`);
  void consumer.close();
};
// `on`, not `once`: a repeated signal (a second Ctrl-C, or `timeout` signalling the process and its group)
// must not fall back to the default action and kill the process in the middle of its final commit.
process.on('SIGINT', () => stop('SIGINT'));
process.on('SIGTERM', () => stop('SIGTERM'));

let total = 0;
console.log(`pipeline ${input} -> ${output} (group ${groupId}, bootstrap ${bootstrap})`);
try {
  await consumer.run({
    eachBatch: async ({ partition, messages, resolveOffset, signal }) => {
      // 1. transform and produce the whole fetched batch; the key is kept, so per-key order is kept too
      await producer.send(
        {
          topic: output,
          messages: messages.map((m) => ({
            key: m.key,
            value: enrich(m.value),
            headers: [...m.headers, { key: 'source-offset', value: `${m.topic}/${m.partition}/${m.offset}` }],
          })),
        },
        { signal },
      );
      // 2. the output is acknowledged (durable): only now are the inputs processed
      resolveOffset(messages[messages.length - 1].offset);
      // 3. commit the input offsets
      await consumer.commit();
      total += messages.length;
      console.log(`p${partition}: ${messages.length} records (offsets ${messages[0].offset}..${messages[messages.length - 1].offset}), ${total} in total`);
    },
  });
} catch (err) {
  if (!(stopping && err.code === 'client_closed')) {
    console.error(`pipeline failed: ${err.message}`);
    process.exitCode = 1;
  }
} finally {
  await producer.close();
}
console.log(`stopped after ${total} records`);
