/**
 * tributary_request_errors_total counts the Kafka port's error replies too (docs/operations.md, "Metrics"):
 * command `kafka_<Api>` as in the duration histogram, code the Kafka error's name.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawKafka } from '../../helpers/raw-kafka.js';

describe('Kafka error replies in the metrics', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--kafka-port', '0', '--offsets-topic-partitions', '1'] });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('a Produce to an unknown topic is one kafka_Produce error UNKNOWN_TOPIC_OR_PARTITION', async () => {
    const raw = await RawKafka.connect(broker.kafkaPort);
    try {
      const records = encodeRecordBatch({ records: [{ key: null, value: Buffer.from('x'), timestamp: Date.now() }] });
      const res = await raw.call(0, 7, { transactionalId: null, acks: 1, timeoutMs: 5000, topicData: [{ name: 'no-such-topic', partitionData: [{ index: 0, records }] }] });
      expect(((res.responses as KafkaStruct[])[0]!.partitionResponses as KafkaStruct[])[0]!.errorCode).toBe(3);
    } finally {
      raw.socket.destroy();
    }
    const { body } = await broker.health('/metrics');
    const line = body.split('\n').find((l) => l.startsWith('tributary_request_errors_total{') && l.includes('command="kafka_Produce"') && l.includes('code="UNKNOWN_TOPIC_OR_PARTITION"'));
    expect(line?.split(' ').at(-1)).toBe('1');
  });
});
