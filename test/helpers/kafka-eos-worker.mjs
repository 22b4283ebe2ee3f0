// A consume-process-produce member on the Kafka port, in its own process, for exactly-once tests with kafkajs.
//
//   node kafka-eos-worker.mjs '<json config>'
//
// config: { name, bootstrap, groupId, input, output, transactionalId, holdMs?, freezeAfter?, maxBytesPerPartition? }
// For each batch of `input` it runs one transaction: the records transformed to `out:<value>` sent to
// `output`, the batch's next offset sent to the transaction for `groupId` (sendOffsets), then commit.
// `holdMs` waits inside each transaction (between the send and the offsets); after `freezeAfter`
// committed transactions the next one stops there for good (its records sent, not committed), so a test
// can kill the process inside a transaction.
// One JSON line per event on stdout (a line printed before a kill -9 is never lost):
//   {type:'producer'}                       the transactional producer is initialized (older epochs fenced)
//   {type:'running'}                        the consumer runs
//   {type:'committed', partition, offset, count, at}   a transaction committed, offset = the next input offset
//   {type:'frozen', partition, count}       inside a transaction whose records were sent (freezeAfter)
//   {type:'error', message}                 a transaction failed (aborted; the batch is read again)
import { setTimeout as sleep } from 'node:timers/promises';
import { Kafka, logLevel } from 'kafkajs';

const cfg = JSON.parse(process.argv[2] ?? '{}');
const out = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);

const kafka = new Kafka({ brokers: [cfg.bootstrap], clientId: cfg.name, logLevel: logLevel.NOTHING });
const producer = kafka.producer({ transactionalId: cfg.transactionalId, idempotent: true, maxInFlightRequests: 1 });
// InitProducerId: a predecessor with the same transactional id is fenced and its open transaction aborted.
await producer.connect();
out({ type: 'producer' });

const consumer = kafka.consumer({
  groupId: cfg.groupId,
  sessionTimeout: 6000,
  rebalanceTimeout: 6000,
  heartbeatInterval: 300,
  readUncommitted: false,
  maxBytesPerPartition: cfg.maxBytesPerPartition ?? 2048,
});
let committed = 0;
await consumer.connect();
await consumer.subscribe({ topic: cfg.input, fromBeginning: true });
await consumer.run({
  autoCommit: false,
  eachBatch: async ({ batch, heartbeat }) => {
    if (batch.messages.length === 0) return;
    const txn = await producer.transaction();
    try {
      await txn.send({ topic: cfg.output, messages: batch.messages.map((m) => ({ key: m.key, value: `out:${m.value.toString()}` })) });
      if (cfg.holdMs) await sleep(cfg.holdMs);
      if (cfg.freezeAfter !== undefined && committed >= cfg.freezeAfter) {
        out({ type: 'frozen', partition: batch.partition, count: batch.messages.length });
        await new Promise(() => {});
      }
      const next = Number(batch.lastOffset()) + 1;
      await txn.sendOffsets({ consumerGroupId: cfg.groupId, topics: [{ topic: cfg.input, partitions: [{ partition: batch.partition, offset: String(next) }] }] });
      await txn.commit();
      committed++;
      out({ type: 'committed', partition: batch.partition, offset: next, count: batch.messages.length, at: Date.now() });
    } catch (err) {
      out({ type: 'error', message: String(err) });
      await txn.abort().catch(() => {});
      throw err;
    }
    // After a commit, a heartbeat that fails (its coordinator just died) must not have kafkajs deliver the
    // committed batch again from its own position: the commit stands, the next batch rejoins if need be.
    await heartbeat().catch(() => {});
  },
});
out({ type: 'running' });

process.on('SIGTERM', () => {
  Promise.allSettled([consumer.disconnect(), producer.disconnect()]).then(() => process.exit(0));
});
