/**
 * kill -9 under a kafkajs idempotent producer with acks -1 on the Kafka port (docs/kafka.md). The broker
 * comes back on the same Kafka port and the same producer carries on: sends that failed around the kill are
 * retried (a batch appended before the kill whose answer was lost must be recognised as a duplicate, from
 * the producer state rebuilt from the log). Every record kafkajs saw acknowledged is in the log at the
 * offset it was acknowledged at, and no record is stored twice.
 */
import { Kafka, logLevel } from 'kafkajs';
import { afterEach, describe, expect, it } from 'vitest';
import { BrokerProcess } from '../helpers/launcher.js';
import { type StoredAt, expectAcknowledgedStored, readValues } from '../helpers/acked-records.js';
import { freePort } from '../helpers/scripted-server.js';
import { until } from '../helpers/util.js';

const TOPIC = 'kk9';
const PARTITIONS = 3;
/**
 * One sender per partition. kafkajs 2.2.4 gives a failed request's sequence numbers back
 * (src/producer/sendMessages.js), so when a batch was appended but its answer lost in the kill, the next
 * send() to that partition reuses its numbers: the broker rightly answers that one as a duplicate of the
 * appended batch (with its offset), and the first is resent under new numbers and stored again. Seen here
 * with two senders per partition; with one, the failed send is the one retried, and is deduplicated.
 */
const LANES = PARTITIONS;

describe('Kafka port: kill -9 under an acks -1 idempotent producer', () => {
  let broker: BrokerProcess | undefined;
  afterEach(async () => {
    await broker?.dispose();
    broker = undefined;
  });

  it('loses no acknowledged record and stores none twice, the producer retrying across the restart', async () => {
    const kafkaPort = await freePort();
    broker = await BrokerProcess.start({ args: ['--kafka-port', String(kafkaPort), '--offsets-topic-partitions', '1', '--flush', 'always'] });
    const c = await broker.connect();
    await c.command('CREATE', { topic: TOPIC, partitions: PARTITIONS });
    const kafka = new Kafka({ brokers: [`127.0.0.1:${kafkaPort}`], clientId: 'k9', logLevel: logLevel.NOTHING });
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, retry: { retries: 30, initialRetryTime: 100, maxRetryTime: 500 } });
    await producer.connect();
    const acked = new Map<string, StoredAt>();
    let restarted = false;
    let afterRestart = 0;
    // Each lane sends one record at a time to its partition; a failed send is sent again (the same value)
    // until it is acknowledged, so values sent around the kill are retried against the restarted broker.
    const lanes = Array.from({ length: LANES }, async (_, lane) => {
      const partition = lane % PARTITIONS;
      for (let n = 0; !(restarted && afterRestart >= 300); n++) {
        const value = `${lane}-${n}`;
        for (;;) {
          try {
            const [meta] = await producer.send({ topic: TOPIC, acks: -1, messages: [{ value, partition }] });
            acked.set(value, { partition, offset: Number(meta!.baseOffset) });
            if (restarted) afterRestart++;
            break;
          } catch {
            await until(() => restarted, 60_000, 'the broker to come back');
          }
        }
      }
    });
    await until(() => acked.size >= 300, 30_000, '300 acknowledged records');
    await broker.kill('SIGKILL');
    await broker.relaunch();
    restarted = true;
    await Promise.all(lanes);
    await producer.disconnect();

    const after = await broker.connect();
    const stored = new Map<string, StoredAt>();
    for (let p = 0; p < PARTITIONS; p++) await readValues(after, TOPIC, p, stored);
    expectAcknowledgedStored(acked, stored);
    expect(afterRestart).toBeGreaterThanOrEqual(300);
  }, 180_000);
});
