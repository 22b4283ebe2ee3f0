/**
 * Requests Apache Kafka refuses or answers per partition, against a running broker (docs/kafka.md, "What is
 * served"): a topic named twice in CreateTopics, CreatePartitions or DeleteTopics is INVALID_REQUEST and
 * nothing of it is applied; a DeleteTopics v6 entry with both a name and an id, or neither, is
 * INVALID_REQUEST; a partition twice in ListOffsets is INVALID_REQUEST for each entry; ApiVersions v3 checks
 * the client software name and version; Fetch and ListOffsets check `currentLeaderEpoch`; an incremental
 * fetch of a session this broker never handed out is FETCH_SESSION_ID_NOT_FOUND; an offset or timestamp
 * beyond 2^53 is answered for its partition instead of closing the connection.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawKafka } from '../../helpers/raw-kafka.js';

const INVALID_REQUEST = kafkaErrorCode('INVALID_REQUEST');

describe('Kafka request rules', () => {
  let broker: BrokerProcess;
  let c: Connection;
  let raw: RawKafka;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--kafka-port', '0', '--offsets-topic-partitions', '1'] });
    c = await broker.connect();
    raw = await RawKafka.connect(broker.kafkaPort);
  });
  afterAll(async () => {
    raw?.socket.destroy();
    await broker?.dispose();
  });

  const exists = async (topic: string) => {
    const meta = await raw.call(3, 1, { topics: [{ name: topic }] });
    return (meta.topics as KafkaStruct[])[0]!.errorCode === 0;
  };
  const partitionCount = async (topic: string) => {
    const meta = await raw.call(3, 1, { topics: [{ name: topic }] });
    return ((meta.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[]).length;
  };

  describe('a topic named twice in one request', () => {
    it('CreateTopics: INVALID_REQUEST once for the name, nothing created; the other topic of the request is', async () => {
      const t = { name: 'dup-create', numPartitions: 1, replicationFactor: 1, assignments: [], configs: [] };
      for (const validateOnly of [true, false]) {
        const res = await raw.call(19, 4, { topics: [t, { ...t, name: 'single-create' }, { ...t, numPartitions: 3 }], timeoutMs: 5000, validateOnly });
        const results = (res.topics as KafkaStruct[]).map((x) => [x.name, x.errorCode]);
        expect(results, `validateOnly ${validateOnly}`).toEqual([
          ['dup-create', INVALID_REQUEST],
          ['single-create', 0],
        ]);
        expect((res.topics as KafkaStruct[])[0]!.errorMessage).toBe('Duplicate topic name.');
      }
      expect(await exists('dup-create')).toBe(false);
      expect(await exists('single-create')).toBe(true);
    });
  });
});
