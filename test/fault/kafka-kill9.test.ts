/**
 * kill -9 under a kafkajs idempotent producer with acks -1 on the Kafka port (docs/kafka.md): every record
 * kafkajs saw acknowledged is in the log after the restart, at the offset it was acknowledged at, and no
 * record is stored twice.
 */
import { Kafka, logLevel } from 'kafkajs';
import { afterEach, describe, expect, it } from 'vitest';
import { BrokerProcess } from '../helpers/launcher.js';

const TOPIC = 'kk9';
const PARTITIONS = 3;
const LANES = 6;

describe('Kafka port: kill -9 under an acks -1 producer', () => {
  let broker: BrokerProcess | undefined;
  afterEach(async () => {
    await broker?.dispose();
    broker = undefined;
  });

  it('loses no acknowledged record and stores none twice', async () => {
    broker = await BrokerProcess.start({ args: ['--kafka-port', '0', '--offsets-topic-partitions', '1', '--flush', 'always'] });
    const c = await broker.connect();
    await c.command('CREATE', { topic: TOPIC, partitions: PARTITIONS });
    const kafka = new Kafka({ brokers: [`127.0.0.1:${broker.kafkaPort}`], clientId: 'k9', logLevel: logLevel.NOTHING, retry: { retries: 0 } });
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, retry: { retries: 1, initialRetryTime: 50, maxRetryTime: 100 } });
    await producer.connect();
    const acked = new Map<string, { partition: number; offset: number }>();
    let killed = false;
    let reachedTarget: () => void = () => {};
    const target = new Promise<void>((r) => (reachedTarget = r));
    // Each lane sends one record at a time to its partition, until a send fails (the broker is gone).
    const lanes = Array.from({ length: LANES }, async (_, lane) => {
      for (let n = 0; !killed; n++) {
        const value = `${lane}-${n}`;
        const partition = lane % PARTITIONS;
        try {
          const [meta] = await producer.send({ topic: TOPIC, acks: -1, messages: [{ value, partition }] });
          acked.set(value, { partition, offset: Number(meta!.baseOffset) });
          if (acked.size >= 300) reachedTarget();
        } catch {
          return;
        }
      }
    });
    await target;
    await broker.kill('SIGKILL');
    killed = true;
    await Promise.all(lanes);
    await producer.disconnect().catch(() => {});
    const before = acked.size;
    expect(before).toBeGreaterThanOrEqual(300);

    await broker.restart();
    const after = await broker.connect();
    const stored = new Map<string, { partition: number; offset: number }>();
    for (let p = 0; p < PARTITIONS; p++) {
      for (let offset = 0; ; ) {
        const { records } = await after.consume({ topic: TOPIC, partition: p, offset, batch: 1000 });
        if (records.length === 0) break;
        for (const r of records) {
          const v = r.value.toString();
          expect(stored.has(v), `${v} stored twice`).toBe(false);
          stored.set(v, { partition: p, offset: r.offset });
        }
        offset = records[records.length - 1]!.offset + 1;
      }
    }
    for (const [value, at] of acked) expect(stored.get(value), `acknowledged ${value}`).toEqual(at);
  }, 120_000);
});
