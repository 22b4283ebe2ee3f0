/**
 * The Kafka listener (docs/kafka.md) against unmodified clients: kcat (librdkafka) and kafkajs produce and
 * read through it, Tributary's own clients read what they wrote and the other way round, and bad input on
 * the Kafka port gets the proper error code or a closed connection, the broker healthy, nothing stored.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { ConfigResourceTypes, Kafka, logLevel } from 'kafkajs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { crc32cRange } from 'tributary-protocol/record-batch/crc32c.js';
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';
import { splitRecordBatches } from 'tributary-protocol/record-batch/split.js';
import { apiByKey } from 'tributary-broker/kafka/protocol/apis.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import { decodeResponse, encodeRequest } from 'tributary-broker/kafka/protocol/headers.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { Producer } from 'tributary-client/producer.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { kcat, RawKafka, ZERO_UUID } from '../../helpers/raw-kafka.js';
import { freePort } from '../../helpers/scripted-server.js';
import { removeDir, tempDir, until } from '../../helpers/util.js';

describe('the Kafka listener', () => {
  let broker: BrokerProcess;
  let c: Connection;
  let bootstrap: string;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--kafka-port', '0', '--offsets-topic-partitions', '1'] });
    expect(broker.kafkaPort).toBeGreaterThan(0);
    bootstrap = `127.0.0.1:${broker.kafkaPort}`;
    c = await broker.connect();
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('kcat lists the broker and topics, produces plain, gzip, snappy and lz4 records, and reads them back; Tributary reads them too', async () => {
    await c.command('CREATE', { topic: 'kc', partitions: 2 });
    const list = await kcat(['-b', bootstrap, '-L', '-J']);
    const meta = JSON.parse(list) as { brokers: { id: number; name: string }[]; topics: { topic: string; partitions: unknown[] }[] };
    expect(meta.brokers).toEqual([{ id: 0, name: bootstrap }]);
    expect(meta.topics.map((t) => [t.topic, t.partitions.length])).toEqual([['kc', 2]]); // internal topics are not listed
    await kcat(['-b', bootstrap, '-P', '-t', 'kc', '-p', '0', '-K', ':'], 'k1:one\nk2:two\n');
    await kcat(['-b', bootstrap, '-P', '-t', 'kc', '-p', '0', '-z', 'gzip', '-H', 'h1=v1'], 'three\n');
    await kcat(['-b', bootstrap, '-P', '-t', 'kc', '-p', '0', '-z', 'snappy'], 'four\n');
    await kcat(['-b', bootstrap, '-P', '-t', 'kc', '-p', '0', '-z', 'lz4'], 'five\n');
    const read = await kcat(['-b', bootstrap, '-C', '-t', 'kc', '-p', '0', '-o', 'beginning', '-e', '-f', '%o|%k|%s|%h\\n']);
    expect(read.trim().split('\n')).toEqual(['0|k1|one|', '1|k2|two|', '2||three|h1=v1', '3||four|', '4||five|']);
    const recs = (await c.consume({ topic: 'kc', partition: 0, offset: 0, batch: 10 })).records;
    expect(recs.map((r) => [r.key?.toString() ?? null, r.value.toString(), r.headers.map((h) => `${h.key}=${h.value.toString()}`).join()])).toEqual([
      ['k1', 'one', ''],
      ['k2', 'two', ''],
      [null, 'three', 'h1=v1'],
      [null, 'four', ''],
      [null, 'five', ''],
    ]);
  });

  it("kcat reads what Tributary's SDK produced, keys, values and headers, from where it asks", async () => {
    await c.command('CREATE', { topic: 'sdk-to-kafka', partitions: 1 });
    const p = new Producer({ brokers: [broker.address], idempotent: true });
    try {
      await p.send({ topic: 'sdk-to-kafka', messages: Array.from({ length: 5 }, (_, i) => ({ key: `k${i}`, value: `v${i}`, headers: { n: String(i) } })) });
    } finally {
      await p.close();
    }
    const read = await kcat(['-b', bootstrap, '-C', '-t', 'sdk-to-kafka', '-p', '0', '-o', '2', '-e', '-f', '%o|%k|%s|%h\\n']);
    expect(read.trim().split('\n')).toEqual(['2|k2|v2|n=2', '3|k3|v3|n=3', '4|k4|v4|n=4']);
  });

  it('kafkajs: admin creates a topic once, an idempotent producer writes with acks -1, offsets and timestamps are listed', async () => {
    const kafka = new Kafka({ brokers: [bootstrap], clientId: 'listener-test', logLevel: logLevel.NOTHING, retry: { retries: 2 } });
    const admin = kafka.admin();
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await admin.connect();
    try {
      expect(await admin.createTopics({ topics: [{ topic: 'kj', numPartitions: 3 }] })).toBe(true);
      expect(await admin.createTopics({ topics: [{ topic: 'kj', numPartitions: 3 }] })).toBe(false); // exists
      // A config Tributary has no counterpart for is refused, not ignored.
      const refused = await admin
        .createTopics({ topics: [{ topic: 'kj-bad', numPartitions: 1, configEntries: [{ name: 'segment.ms', value: '1000' }] }] })
        .catch((e: unknown) => e);
      expect(refused).toMatchObject({ errors: [expect.objectContaining({ type: 'INVALID_CONFIG' })] });
      // delete.retention.ms is the topic's tombstone retention: 0 or more, stored with it.
      const negative = await admin
        .createTopics({ topics: [{ topic: 'kj-bad', numPartitions: 1, configEntries: [{ name: 'delete.retention.ms', value: '-1' }] }] })
        .catch((e: unknown) => e);
      expect(negative).toMatchObject({ errors: [expect.objectContaining({ type: 'INVALID_CONFIG' })] });
      // message.timestamp.type: CreateTime is what the broker does; LogAppendTime is not served.
      const appendTime = await admin
        .createTopics({ topics: [{ topic: 'kj-bad', numPartitions: 1, configEntries: [{ name: 'message.timestamp.type', value: 'LogAppendTime' }] }] })
        .catch((e: unknown) => e);
      expect(appendTime).toMatchObject({ errors: [expect.objectContaining({ type: 'INVALID_CONFIG' })] });
      expect((await admin.fetchTopicMetadata({ topics: [] })).topics.map((t) => t.name)).not.toContain('kj-bad');
      expect(await admin.createTopics({ topics: [{ topic: 'kj-dr', numPartitions: 1, configEntries: [{ name: 'delete.retention.ms', value: '5000' }, { name: 'message.timestamp.type', value: 'CreateTime' }] }] })).toBe(true);
      expect(await c.json('DESCRIBE', { topic: 'kj-dr' })).toMatchObject({ delete_retention_ms: 5000 });
      await producer.connect();
      const before = Date.now();
      const sent = await producer.send({
        topic: 'kj',
        acks: -1,
        messages: Array.from({ length: 30 }, (_, i) => ({ key: `key-${i % 5}`, value: `value-${i}`, headers: { i: String(i) } })),
      });
      expect(sent.every((s) => s.errorCode === 0)).toBe(true);
      const offsets = await admin.fetchTopicOffsets('kj');
      expect(offsets.reduce((n, o) => n + Number(o.high), 0)).toBe(30);
      // Every record is in Tributary's log, keyed as kafkajs partitioned it, with its header.
      const seen: string[] = [];
      for (const o of offsets) {
        const recs = (await c.consume({ topic: 'kj', partition: o.partition, offset: 0, batch: 100 })).records;
        for (const r of recs) {
          expect(r.headers.map((h) => `${h.key}=${h.value.toString()}`)).toEqual([`i=${r.value.toString().slice(6)}`]);
          seen.push(`${r.key!.toString()}/${r.value.toString()}`);
        }
      }
      expect(seen.sort()).toEqual(Array.from({ length: 30 }, (_, i) => `key-${i % 5}/value-${i}`).sort());
      const byTime = await admin.fetchTopicOffsetsByTimestamp('kj', before - 60_000);
      expect(byTime.every((o) => Number(o.offset) === 0)).toBe(true);
      const configs = await admin.describeConfigs({
        includeSynonyms: false,
        resources: [
          { type: ConfigResourceTypes.TOPIC, name: 'kj', configNames: ['retention.ms', 'cleanup.policy', 'delete.retention.ms', 'message.timestamp.type'] },
          { type: ConfigResourceTypes.TOPIC, name: 'kj-dr', configNames: ['delete.retention.ms'] },
        ],
      });
      const byTopic = new Map(configs.resources.map((r) => [r.resourceName, r.configEntries.map((e) => [e.configName, e.configValue]).sort()]));
      expect(byTopic.get('kj')).toEqual([
        ['cleanup.policy', 'delete'],
        ['delete.retention.ms', '86400000'], // the broker's default
        ['message.timestamp.type', 'CreateTime'],
        ['retention.ms', String(168 * 3_600_000)],
      ]);
      expect(byTopic.get('kj-dr')).toEqual([['delete.retention.ms', '5000']]);
      await admin.createPartitions({ topicPartitions: [{ topic: 'kj', count: 4 }] });
      expect((await admin.fetchTopicOffsets('kj')).length).toBe(4);
      await admin.deleteTopics({ topics: ['kj'] });
      expect(await admin.listTopics()).not.toContain('kj');
    } finally {
      await producer.disconnect();
      await admin.disconnect();
    }
  });

  it("counts its produced and fetched records in the broker's records and bytes counters, and its requests' durations", async () => {
    const kafka = new Kafka({ brokers: [bootstrap], clientId: 'listener-metrics', logLevel: logLevel.NOTHING, retry: { retries: 2 } });
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    const consumer = kafka.consumer({ groupId: 'kmetrics', maxWaitTimeInMs: 100 });
    await c.command('CREATE', { topic: 'kmetrics', partitions: 1 });
    const series = async (name: string) => {
      const m = new RegExp(`^${name}\\{topic="kmetrics"\\} (\\d+)`, 'm').exec((await broker.health('/metrics')).body);
      return m ? Number(m[1]) : 0;
    };
    try {
      await producer.connect();
      await producer.send({ topic: 'kmetrics', acks: -1, messages: Array.from({ length: 7 }, (_, i) => ({ value: `v${i}-xx` })) });
      expect(await series('tributary_records_in_total')).toBe(7);
      expect(await series('tributary_bytes_in_total')).toBe(7 * 5);
      // Request durations too, beside the main port's commands.
      const count = /^tributary_request_duration_seconds_count\{command="kafka_Produce"\} (\d+)/m.exec((await broker.health('/metrics')).body);
      expect(Number(count?.[1] ?? 0)).toBeGreaterThanOrEqual(1);
      await consumer.connect();
      await consumer.subscribe({ topic: 'kmetrics', fromBeginning: true });
      let got = 0;
      await consumer.run({ eachMessage: async () => void got++ });
      await until(() => got === 7, 15_000, 'the 7 records consumed');
      expect(await series('tributary_records_out_total')).toBeGreaterThanOrEqual(7);
      expect(await series('tributary_bytes_out_total')).toBeGreaterThanOrEqual(7 * 5);
    } finally {
      await consumer.disconnect();
      await producer.disconnect();
    }
  });

  it('counts its connections in tributary_connections, with the main port\'s (as --max-connections does)', async () => {
    // A broker of its own: this file's other clients come and go on the shared one.
    const own = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--kafka-port', String(await freePort())] });
    try {
      const open = async () => Number(/^tributary_connections (\d+)/m.exec((await own.health('/metrics')).body)?.[1]);
      expect(await open()).toBe(0);
      const main = await own.connect();
      const raws = [await RawKafka.connect(own.kafkaPort), await RawKafka.connect(own.kafkaPort)];
      try {
        await until(async () => (await open()) === 3, 5000, 'one main-port and two Kafka connections counted');
      } finally {
        for (const r of raws) r.socket.destroy();
      }
      await until(async () => (await open()) === 1, 5000, 'the closed Kafka connections no longer counted');
      main.close();
    } finally {
      await own.dispose();
    }
  });

  it('answers every advertised version of every served API with a response that version decodes', async () => {
    await c.command('CREATE', { topic: 'versions', partitions: 1 });
    await c.command('PUBLISH', { topic: 'versions', partition: 0, message: 'r0' });
    const raw = await RawKafka.connect(broker.kafkaPort);
    const batch = encodeRecordBatch({ records: [{ key: null, value: Buffer.from('v') }] });
    // Group APIs: each version gets a group of its own with one member where it needs one (joined with v0,
    // which needs no member id first; synced, so Stable, except for the SyncGroup calls themselves).
    const protocols = [{ name: 'range', metadata: Buffer.from([0, 0, 0, 0, 0, 0, 0, 0, 0, 0]) }];
    const joinBody = (groupId: string, memberId = '', groupInstanceId: string | null = null) => ({
      groupId,
      sessionTimeoutMs: 30_000,
      rebalanceTimeoutMs: 30_000,
      memberId,
      groupInstanceId,
      protocolType: 'consumer',
      protocols,
      reason: null,
    });
    const solo = async (groupId: string, sync: boolean) => {
      const joined = await raw.call(11, 0, joinBody(groupId));
      expect(joined.errorCode).toBe(0);
      const m = { memberId: joined.memberId as string, generationId: joined.generationId as number };
      if (sync) expect((await raw.call(14, 0, { groupId, ...m, assignments: [{ memberId: m.memberId, assignment: Buffer.alloc(0) }] })).errorCode).toBe(0);
      return m;
    };
    const members: Record<string, { memberId: string; generationId: number }> = {};
    for (let v = 0; v <= 6; v++) {
      for (const [api, sync] of [
        ['sync', false],
        ['hb', true],
        ['leave', true],
      ] as const)
        if (v <= 4) members[`${api}-${v}`] = await solo(`${api}-${v}`, sync);
    }
    // JoinGroup v4 (no static membership) asks for a member id first (KIP-394): this is the one it handed out.
    const v4Id = (await raw.call(11, 4, joinBody('join-4'))).memberId as string;
    // Transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v<n> act on transactional id versions-txn-<n>
    // (called in that order, they open, join and commit its transaction); TxnOffsetCommit v<n> sends offsets
    // to versions-offsets-<n>, whose transaction is opened here (an EndTxn before it would have closed it).
    const producers: Record<string, { producerId: bigint; producerEpoch: number }> = {};
    for (let v = 0; v <= 3; v++) {
      for (const id of [`versions-txn-${v}`, `versions-offsets-${v}`]) {
        const init = await raw.call(22, 1, { transactionalId: id, transactionTimeoutMs: 60_000 });
        expect(init.errorCode).toBe(0);
        producers[id] = { producerId: init.producerId as bigint, producerEpoch: init.producerEpoch as number };
      }
      expect(
        (await raw.call(25, 1, { transactionalId: `versions-offsets-${v}`, ...producers[`versions-offsets-${v}`], groupId: `txn-group-${v}` })).errorCode,
      ).toBe(0);
    }
    const txnBodies: Record<number, (v: number) => KafkaStruct> = {
      24: (v) => ({ transactionalId: `versions-txn-${v}`, ...producers[`versions-txn-${v}`], topics: [{ name: 'versions', partitions: [0] }] }),
      25: (v) => ({ transactionalId: `versions-txn-${v}`, ...producers[`versions-txn-${v}`], groupId: `txn-group-${v}` }),
      26: (v) => ({ transactionalId: `versions-txn-${v}`, ...producers[`versions-txn-${v}`], committed: true }),
      28: (v) => ({
        transactionalId: `versions-offsets-${v}`,
        groupId: `txn-group-${v}`,
        ...producers[`versions-offsets-${v}`],
        generationId: -1,
        memberId: '',
        groupInstanceId: null,
        topics: [{ name: 'versions', partitions: [{ partitionIndex: 0, committedOffset: 1, committedLeaderEpoch: -1, committedMetadata: null }] }],
      }),
    };
    const groupBodies: Record<number, (v: number) => KafkaStruct> = {
      8: () => ({
        groupId: 'committed',
        generationId: -1,
        memberId: '',
        groupInstanceId: null,
        retentionTimeMs: -1,
        topics: [{ name: 'versions', partitions: [{ partitionIndex: 0, committedOffset: 1, committedLeaderEpoch: -1, committedMetadata: null }] }],
      }),
      9: () => ({
        groupId: 'committed',
        topics: [{ name: 'versions', partitionIndexes: [0] }],
        groups: [{ groupId: 'committed', topics: null }],
        requireStable: true,
      }),
      10: () => ({ key: 'committed', keyType: 0, coordinatorKeys: ['committed'] }),
      11: (v) => (v === 4 ? joinBody('join-4', v4Id) : joinBody(`join-${v}`, '', v >= 5 ? `static-${v}` : null)),
      12: (v) => ({ groupId: `hb-${v}`, ...members[`hb-${v}`], groupInstanceId: null }),
      13: (v) => ({
        groupId: `leave-${v}`,
        memberId: members[`leave-${v}`]!.memberId,
        members: [{ memberId: members[`leave-${v}`]!.memberId, groupInstanceId: null, reason: null }],
      }),
      14: (v) => ({
        groupId: `sync-${v}`,
        ...members[`sync-${v}`],
        groupInstanceId: null,
        protocolType: null,
        protocolName: null,
        assignments: [{ memberId: members[`sync-${v}`]!.memberId, assignment: Buffer.alloc(0) }],
      }),
      15: () => ({ groups: ['committed', 'hb-0'], includeAuthorizedOperations: false }),
      16: () => ({ statesFilter: [], typesFilter: [] }),
    };
    const bodies: Record<number, (v: number) => KafkaStruct> = {
      ...groupBodies,
      ...txnBodies,
      0: () => ({ transactionalId: null, acks: 1, timeoutMs: 1000, topicData: [{ name: 'versions', partitionData: [{ index: 0, records: batch }] }] }),
      1: () => ({
        maxWaitMs: 0,
        minBytes: 1,
        maxBytes: 1 << 20,
        isolationLevel: 1,
        topics: [{ topic: 'versions', partitions: [{ partition: 0, fetchOffset: 0, partitionMaxBytes: 1 << 20 }] }],
      }),
      2: () => ({ isolationLevel: 0, topics: [{ name: 'versions', partitions: [{ partitionIndex: 0, timestamp: -2 }] }] }),
      3: () => ({ topics: [{ name: 'versions' }] }),
      18: () => ({ clientSoftwareName: 'raw', clientSoftwareVersion: '1' }),
      19: (v) => ({
        topics: [{ name: `created-v${v}`, numPartitions: 1, replicationFactor: -1, assignments: [], configs: [] }],
        timeoutMs: 1000,
        validateOnly: false,
      }),
      22: () => ({ transactionalId: null, transactionTimeoutMs: 1000 }),
      20: (v) => (v >= 6 ? { topics: [{ name: `doomed-v${v}`, topicId: ZERO_UUID }], timeoutMs: 1000 } : { topicNames: [`doomed-v${v}`], timeoutMs: 1000 }),
      37: (v) => ({ topics: [{ name: 'growing', count: 2 + v, assignments: null }], timeoutMs: 1000, validateOnly: false }),
      32: () => ({ resources: [{ resourceType: 2, resourceName: 'versions', configurationKeys: null }], includeSynonyms: false, includeDocumentation: false }),
      33: () => ({ resources: [{ resourceType: 2, resourceName: 'versions', configs: [{ name: 'retention.ms', value: '-1' }] }], validateOnly: true }),
      44: () => ({ resources: [{ resourceType: 2, resourceName: 'versions', configs: [{ name: 'retention.bytes', configOperation: 0, value: '-1' }] }], validateOnly: true }),
      17: () => ({ mechanism: 'PLAIN' }),
      36: () => ({ authBytes: Buffer.from('\0u\0p') }),
    };
    // Without --authentication there is no SASL to do: both answer ILLEGAL_SASL_STATE, as a plain Kafka listener does.
    const expectedCode = (key: number) => (key === 17 || key === 36 ? kafkaErrorCode('ILLEGAL_SASL_STATE') : 0);
    for (let v = 0; v <= 6; v++) await c.command('CREATE', { topic: `doomed-v${v}`, partitions: 1 });
    await c.command('CREATE', { topic: 'growing', partitions: 1 });
    const served = (await raw.call(18, 0, {})).apiKeys as KafkaStruct[];
    let calls = 0;
    for (const a of served) {
      const key = a.apiKey as number;
      for (let v = a.minVersion as number; v <= (a.maxVersion as number); v++) {
        const res = await raw.call(key, v, bodies[key]!(v));
        calls++;
        const codes =
          JSON.stringify(res, (_k, x: unknown) => (typeof x === 'bigint' ? Number(x) : Buffer.isBuffer(x) ? x.length : x)).match(/"errorCode":-?\d+/g) ?? [];
        expect(codes.length, `${apiByKey(key)!.name} v${v}`).toBeGreaterThan(0);
        expect(
          codes.every((e) => e === `"errorCode":${expectedCode(key)}`),
          `${apiByKey(key)!.name} v${v}: ${codes.join()}`,
        ).toBe(true);
      }
    }
    // Metadata 0-9, Fetch 4-12, ListOffsets 1-5, Produce 3-9, ApiVersions 0-3, CreateTopics 0-7, DeleteTopics 0-6, InitProducerId 0-4,
    // DescribeConfigs 0-4, CreatePartitions 0-3, AlterConfigs 0-2, IncrementalAlterConfigs 0-1, SaslHandshake 0-1, SaslAuthenticate 0-2; OffsetCommit 2-8, OffsetFetch 1-8,
    // FindCoordinator 0-4, JoinGroup 0-6, Heartbeat 0-4, LeaveGroup 0-4, SyncGroup 0-4, DescribeGroups 0-5, ListGroups 0-4;
    // AddPartitionsToTxn 0-3, AddOffsetsToTxn 0-3, EndTxn 0-3, TxnOffsetCommit 0-3
    expect(calls).toBe(10 + 9 + 5 + 7 + 4 + 8 + 7 + 5 + 5 + 4 + 3 + 2 + 2 + 3 + 7 + 8 + 5 + 7 + 5 + 5 + 5 + 6 + 5 + 4 + 4 + 4 + 4);
    expect((await c.command('LIST')).match(/doomed/g)).toBeNull();
    expect((await c.json<{ partitions: unknown[] }>('DESCRIBE', { topic: 'growing' })).partitions).toHaveLength(5);
    raw.socket.destroy();
  });

  describe('reads', () => {
    const fetchBody = (topic: string, offset: number, isolationLevel: number, maxWaitMs = 0) => ({
      maxWaitMs,
      minBytes: 1,
      maxBytes: 1 << 20,
      isolationLevel,
      sessionId: 0,
      sessionEpoch: -1,
      topics: [{ topic, partitions: [{ partition: 0, fetchOffset: offset, partitionMaxBytes: 1 << 20 }] }],
      forgottenTopicsData: [],
      rackId: '',
    });
    const partitionOf = (res: KafkaStruct) => ((res.responses as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!;
    const valuesOf = (res: KafkaStruct) => {
      const records = partitionOf(res).records as Buffer;
      return splitRecordBatches(records).batches.flatMap((b) => b.decode().records.map((r) => `${r.offset}:${r.value!.toString()}`));
    };
    const listOffset = async (raw: RawKafka, topic: string, timestamp: number, isolationLevel: number) =>
      (
        ((await raw.call(2, 5, { isolationLevel, topics: [{ name: topic, partitions: [{ partitionIndex: 0, timestamp }] }] })).topics as KafkaStruct[])[0]!
          .partitions as KafkaStruct[]
      )[0]!;

    it('waits for minBytes (within maxWaitMs): one record below it is not answered until a second one comes', async () => {
      await c.command('CREATE', { topic: 'min-bytes', partitions: 1 });
      await c.command('PUBLISH', { topic: 'min-bytes', partition: 0, message: 'one' });
      const raw = await RawKafka.connect(broker.kafkaPort);
      try {
        const single = (partitionOf(await raw.call(1, 12, fetchBody('min-bytes', 0, 0))).records as Buffer).length;
        // Asks for one byte more than the record there: answered only once the second one is in.
        const fetching = raw.call(1, 12, { ...fetchBody('min-bytes', 0, 0, 10_000), minBytes: single + 1 });
        await c.command('PUBLISH', { topic: 'min-bytes', partition: 0, message: 'two' });
        expect(valuesOf(await fetching)).toEqual(['0:one', '1:two']);
      } finally {
        raw.socket.destroy();
      }
    });

    it('minBytes 0 is answered at once, empty when there is nothing to read (not held for maxWaitMs)', { timeout: 20_000 }, async () => {
      await c.command('CREATE', { topic: 'min-bytes-zero', partitions: 1 });
      const raw = await RawKafka.connect(broker.kafkaPort);
      try {
        // maxWaitMs 25 s is past this test's timeout: only an answer that does not wait lets it pass.
        const res = await raw.call(1, 12, { ...fetchBody('min-bytes-zero', 0, 0, 25_000), minBytes: 0 });
        expect(partitionOf(res).errorCode).toBe(0);
        expect((partitionOf(res).records as Buffer | null)?.length ?? 0).toBe(0);
      } finally {
        raw.socket.destroy();
      }
    });

    it('a backlog larger than one read is answered at once, whatever minBytes asks: no wait for data already there', { timeout: 20_000 }, async () => {
      await c.command('CREATE', { topic: 'backlog', partitions: 1 });
      const raw = await RawKafka.connect(broker.kafkaPort);
      try {
        for (let b = 0; b < 2; b++) {
          const records = encodeRecordBatch({ records: Array.from({ length: 10_000 }, (_, i) => ({ key: null, value: Buffer.from(`v${b}-${i}`) })) });
          await raw.call(0, 7, { transactionalId: null, acks: 1, timeoutMs: 1000, topicData: [{ name: 'backlog', partitionData: [{ index: 0, records }] }] });
        }
        // 10,000 small records (one read) are far below minBytes; the maxWaitMs (25 s, past this test's
        // timeout) must not be waited while the rest of the backlog is there.
        const res = await raw.call(1, 12, { ...fetchBody('backlog', 0, 0, 25_000), minBytes: 8 << 20, maxBytes: 50 << 20 });
        const n = splitRecordBatches(partitionOf(res).records as Buffer).batches.reduce((k, b) => k + b.recordCount, 0);
        expect(n).toBe(10_000);
      } finally {
        raw.socket.destroy();
      }
    });

    it('only the first partition with records may exceed the response maxBytes; the next ones wait for another fetch', async () => {
      await c.command('CREATE', { topic: 'big-records', partitions: 3 });
      const raw = await RawKafka.connect(broker.kafkaPort);
      try {
        for (let p = 0; p < 3; p++) {
          const records = encodeRecordBatch({ records: [{ key: null, value: Buffer.alloc(600_000, 0x61 + p) }] });
          await raw.call(0, 7, { transactionalId: null, acks: 1, timeoutMs: 1000, topicData: [{ name: 'big-records', partitionData: [{ index: p, records }] }] });
        }
        const res = await raw.call(1, 12, {
          ...fetchBody('big-records', 0, 0),
          maxBytes: 700_000,
          topics: [{ topic: 'big-records', partitions: [0, 1, 2].map((p) => ({ partition: p, fetchOffset: 0, partitionMaxBytes: 1 << 20 })) }],
        });
        const sizes = ((res.responses as KafkaStruct[])[0]!.partitions as KafkaStruct[]).map((x) => (x.records as Buffer).length);
        expect(sizes[0]).toBeGreaterThan(600_000);
        expect(sizes.slice(1)).toEqual([0, 0]);
      } finally {
        raw.socket.destroy();
      }
    });

    it('read_committed hides an open transaction and, once it ends, its aborted records; read_uncommitted shows them', async () => {
      await c.command('CREATE', { topic: 'txn-read', partitions: 1 });
      const raw = await RawKafka.connect(broker.kafkaPort);
      const p = new Producer({ brokers: [broker.address], transactionalId: 'kafka-read-txn' });
      try {
        await c.command('PUBLISH', { topic: 'txn-read', partition: 0, message: 'before' });
        const aborted = await p.transaction();
        await aborted.send({ topic: 'txn-read', messages: [{ value: 'aborted', partition: 0 }] });
        await aborted.abort();
        const open = await p.transaction();
        await open.send({ topic: 'txn-read', messages: [{ value: 'pending', partition: 0 }] });
        // Open: read_uncommitted sees it, read_committed stops at the last stable offset before it.
        expect(valuesOf(await raw.call(1, 12, fetchBody('txn-read', 0, 0)))).toEqual(['0:before', '1:aborted', '3:pending']);
        expect(valuesOf(await raw.call(1, 12, fetchBody('txn-read', 0, 1)))).toEqual(['0:before']);
        const lso = Number((await listOffset(raw, 'txn-read', -1, 1)).offset);
        const hwm = Number((await listOffset(raw, 'txn-read', -1, 0)).offset);
        expect(lso).toBe(3);
        expect(hwm).toBe(4);
        expect(partitionOf(await raw.call(1, 12, fetchBody('txn-read', 0, 1))).lastStableOffset).toBe(3);
        await open.commit();
        expect(valuesOf(await raw.call(1, 12, fetchBody('txn-read', 0, 1)))).toEqual(['0:before', '3:pending']);
      } finally {
        await p.close();
        raw.socket.destroy();
      }
    });

    it('a Fetch with maxWaitMs is answered as soon as a record arrives; past the log end is OFFSET_OUT_OF_RANGE', async () => {
      await c.command('CREATE', { topic: 'long-poll', partitions: 1 });
      const raw = await RawKafka.connect(broker.kafkaPort);
      try {
        const waiting = raw.call(1, 12, fetchBody('long-poll', 0, 0, 60_000));
        await c.command('PUBLISH', { topic: 'long-poll', partition: 0, message: 'woken' });
        expect(valuesOf(await waiting)).toEqual(['0:woken']); // a 60 s wait would time the test out
        const beyond = partitionOf(await raw.call(1, 12, fetchBody('long-poll', 5, 0)));
        expect(beyond.errorCode).toBe(kafkaErrorCode('OFFSET_OUT_OF_RANGE'));
      } finally {
        raw.socket.destroy();
      }
    });

    it('pipelined produces append in request order, a gzip batch first and a plain one right behind it', async () => {
      await c.command('CREATE', { topic: 'pipelined', partitions: 1 });
      const raw = await RawKafka.connect(broker.kafkaPort);
      try {
        const api = apiByKey(0)!;
        const produce = (id: number, records: Buffer) =>
          encodeRequest(api, 7, id, 'raw', {
            transactionalId: null,
            acks: 1,
            timeoutMs: 1000,
            topicData: [{ name: 'pipelined', partitionData: [{ index: 0, records }] }],
          });
        const frames: Buffer[] = [];
        for (let i = 0; i < 10; i++) {
          // The gzip batch takes the thread pool to inflate; the plain one could overtake it if appends did not wait their turn.
          const big = Buffer.alloc(256 * 1024, i);
          frames.push(
            produce(
              2 * i,
              encodeRecordBatch({
                records: [
                  { key: null, value: big },
                  { key: null, value: Buffer.from(`gz-${i}`) },
                ],
                compression: 'gzip',
              }),
            ),
          );
          frames.push(produce(2 * i + 1, encodeRecordBatch({ records: [{ key: null, value: Buffer.from(`plain-${i}`) }] })));
        }
        raw.socket.write(Buffer.concat(frames)); // one write: every request is read before any is answered
        for (let i = 0; i < 20; i++) expect(decodeResponse(api, 7, await raw.next()).correlationId).toBe(i);
        const recs = (await c.consume({ topic: 'pipelined', partition: 0, offset: 0, batch: 100, max_bytes: 64 * 1024 * 1024 })).records;
        const small = recs.filter((r) => r.value.length < 100).map((r) => r.value.toString());
        expect(small).toEqual(Array.from({ length: 10 }, (_, i) => [`gz-${i}`, `plain-${i}`]).flat());
      } finally {
        raw.socket.destroy();
      }
    });

    it('Produce with acks 0 gets no response and is stored; the next request on the connection is answered in order', async () => {
      await c.command('CREATE', { topic: 'acks0', partitions: 1 });
      const raw = await RawKafka.connect(broker.kafkaPort);
      try {
        const batch = encodeRecordBatch({ records: [{ key: null, value: Buffer.from('fire-and-forget') }] });
        raw.socket.write(
          encodeRequest(apiByKey(0)!, 7, 41, 'raw', {
            transactionalId: null,
            acks: 0,
            timeoutMs: 1000,
            topicData: [{ name: 'acks0', partitionData: [{ index: 0, records: batch }] }],
          }),
        );
        const api = apiByKey(18)!;
        raw.socket.write(encodeRequest(api, 0, 42, 'raw', {}));
        expect(decodeResponse(api, 0, await raw.next()).correlationId).toBe(42); // no response for 41
        expect(valuesOf(await raw.call(1, 12, fetchBody('acks0', 0, 0)))).toEqual(['0:fire-and-forget']);
      } finally {
        raw.socket.destroy();
      }
    });
    it('Produce with acks 0 that fails (an unknown partition) ends the connection once the responses before it went out, as Kafka does; nothing is stored', async () => {
      await c.command('CREATE', { topic: 'acks0-fail', partitions: 1 });
      const raw = await RawKafka.connect(broker.kafkaPort);
      try {
        const api = apiByKey(18)!;
        const batch = encodeRecordBatch({ records: [{ key: null, value: Buffer.from('lost') }] });
        // ApiVersions, then the failing Produce, then ApiVersions again, in one write.
        raw.socket.write(
          Buffer.concat([
            encodeRequest(api, 0, 50, 'raw', {}),
            encodeRequest(apiByKey(0)!, 7, 51, 'raw', { transactionalId: null, acks: 0, timeoutMs: 1000, topicData: [{ name: 'acks0-fail', partitionData: [{ index: 7, records: batch }] }] }),
            encodeRequest(api, 0, 52, 'raw', {}),
          ]),
        );
        expect(decodeResponse(api, 0, await raw.next()).correlationId).toBe(50);
        // Before: the failure was only logged, the connection went on and 52 was answered; the client never knew.
        await raw.closed;
        expect(raw.socket.destroyed || raw.socket.readableEnded).toBe(true);
      } finally {
        raw.socket.destroy();
      }
      expect(await c.command('LIST_OFFSETS', { topic: 'acks0-fail', partition: 0 })).toContain('leo=0');
    });
  });

  describe('bad input on the Kafka port', () => {
    const leo = async (topic: string) => (await c.command('LIST_OFFSETS', { topic, partition: 0 })).match(/leo=(\d+)/)![1];

    beforeAll(async () => {
      await c.command('CREATE', { topic: 'bad', partitions: 1 });
    });

    it('a produce batch with a bad CRC, cut short, an unknown producer id or unsupported acks gets its error code, and nothing is stored', async () => {
      const raw = await RawKafka.connect(broker.kafkaPort);
      try {
        const good = encodeRecordBatch({ records: [{ key: null, value: Buffer.from('x') }] });
        const corrupt = Buffer.from(good);
        corrupt[corrupt.length - 1]! ^= 0xff; // the CRC covers the records
        const forged = encodeRecordBatch({ records: [{ key: null, value: Buffer.from('y') }], producerId: 9_000_000, producerEpoch: 0, baseSequence: 0 });
        const produce = (records: Buffer, acks = -1) =>
          raw.call(0, 7, { transactionalId: null, acks, timeoutMs: 1000, topicData: [{ name: 'bad', partitionData: [{ index: 0, records }] }] });
        const codeOf = (r: KafkaStruct) => ((r.responses as KafkaStruct[])[0]!.partitionResponses as KafkaStruct[])[0]!.errorCode;
        expect(codeOf(await produce(corrupt))).toBe(kafkaErrorCode('CORRUPT_MESSAGE'));
        expect(codeOf(await produce(forged))).toBe(kafkaErrorCode('UNKNOWN_PRODUCER_ID'));
        expect(codeOf(await produce(good, 2))).toBe(kafkaErrorCode('INVALID_REQUIRED_ACKS'));
        expect(codeOf(await produce(Buffer.concat([good, good])))).toBe(kafkaErrorCode('INVALID_RECORD')); // one batch per partition
        // A batch cut short is no batch at all, as Kafka's batch reader finds it: INVALID_RECORD (not retriable,
        // the same request fails again), not CORRUPT_MESSAGE; a batch length beyond any batch's stays corrupt.
        for (const cut of [good.subarray(0, good.length - 3), good.subarray(0, 12), good.subarray(0, 5)]) {
          expect(codeOf(await produce(cut)), `${cut.length} of ${good.length} bytes`).toBe(kafkaErrorCode('INVALID_RECORD'));
        }
        const huge = Buffer.from(good);
        huge.writeInt32BE(0x7fff_ffff, 8);
        expect(codeOf(await produce(huge))).toBe(kafkaErrorCode('CORRUPT_MESSAGE'));
        const missing = await raw.call(0, 7, {
          transactionalId: null,
          acks: 1,
          timeoutMs: 1000,
          topicData: [{ name: 'nope', partitionData: [{ index: 0, records: good }] }],
        });
        expect(codeOf(missing)).toBe(kafkaErrorCode('UNKNOWN_TOPIC_OR_PARTITION'));
        expect(await leo('bad')).toBe('0');
        expect(codeOf(await produce(good))).toBe(0);
        expect(await leo('bad')).toBe('1');
      } finally {
        raw.socket.destroy();
      }
    });

    it('a batch whose CRC holds but whose records do not (a bad record, a lastOffsetDelta that lies, an old magic) is INVALID_RECORD; more records than a request may take is MESSAGE_TOO_LARGE; nothing is stored', async () => {
      const raw = await RawKafka.connect(broker.kafkaPort);
      try {
        const produce = (records: Buffer) => raw.call(0, 7, { transactionalId: null, acks: -1, timeoutMs: 1000, topicData: [{ name: 'bad', partitionData: [{ index: 0, records }] }] });
        const codeOf = (r: KafkaStruct) => ((r.responses as KafkaStruct[])[0]!.partitionResponses as KafkaStruct[])[0]!.errorCode;
        /** A copy of `b` changed by `edit`, its CRC-32C (attributes..end) made right again. */
        const resealed = (b: Buffer, edit: (x: Buffer) => void) => {
          const x = Buffer.from(b);
          edit(x);
          x.writeUInt32BE(crc32cRange(x, 21, x.length), 17);
          return x;
        };
        const two = encodeRecordBatch({ records: [{ key: null, value: Buffer.from('a') }, { key: null, value: Buffer.from('b') }] });
        const before = await leo('bad');
        // The first record's length (a zigzag varint right after the 61-byte header) past the batch's end.
        expect(codeOf(await produce(resealed(two, (x) => void (x[61] = 0x7e))))).toBe(kafkaErrorCode('INVALID_RECORD'));
        expect(codeOf(await produce(resealed(two, (x) => x.writeInt32BE(5, 23))))).toBe(kafkaErrorCode('INVALID_RECORD'));
        // A magic 0 message: offset, size 14, crc, magic 0, attributes, null key, null value.
        const v0 = Buffer.alloc(26);
        v0.writeInt32BE(14, 8);
        v0.writeInt32BE(-1, 18);
        v0.writeInt32BE(-1, 22);
        expect(codeOf(await produce(v0))).toBe(kafkaErrorCode('INVALID_RECORD'));
        // 300,000 empty records: 2 MB of records (0.4 MB gzipped), within the 64 MB a request may inflate
        // to, but past what decoding one request may take in records.
        const many = encodeRecordBatch({ records: Array.from({ length: 300_000 }, () => ({ key: null, value: Buffer.alloc(0) })), compression: 'gzip' });
        expect(codeOf(await produce(many))).toBe(kafkaErrorCode('MESSAGE_TOO_LARGE'));
        expect(await leo('bad')).toBe(before);
        expect(codeOf(await produce(two))).toBe(0);
      } finally {
        raw.socket.destroy();
      }
    });

    it('ApiVersions of a newer version gets the downgrade reply; an unknown API key, an unserved version and a truncated request close the connection', async () => {
      const raw = await RawKafka.connect(broker.kafkaPort);
      const v4 = encodeRequest(apiByKey(18)!, 3, 11, 'raw', { clientSoftwareName: 'x', clientSoftwareVersion: '1' });
      v4.writeInt16BE(4, 6); // api version
      raw.socket.write(v4);
      const reply = decodeResponse(apiByKey(18)!, 0, await raw.next()).body;
      expect(reply.errorCode).toBe(kafkaErrorCode('UNSUPPORTED_VERSION'));
      expect(reply.apiKeys).toEqual([{ apiKey: 18, minVersion: 0, maxVersion: 3 }]);
      const served = (await raw.call(18, 3, { clientSoftwareName: 'x', clientSoftwareVersion: '1' })).apiKeys as KafkaStruct[];
      expect(served.map((a) => a.apiKey)).toEqual([0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22, 24, 25, 26, 28, 32, 33, 36, 37, 44]);
      raw.socket.destroy();

      const closes = async (bytes: Buffer) => {
        const r = await RawKafka.connect(broker.kafkaPort);
        r.socket.write(bytes);
        await r.closed;
      };
      const frame = (body: Buffer) => {
        const size = Buffer.alloc(4);
        size.writeInt32BE(body.length);
        return Buffer.concat([size, body]);
      };
      await closes(frame(Buffer.from([0x27, 0x10, 0, 0, 0, 0, 0, 1, 0xff, 0xff]))); // api key 10000
      const deleteRecords = encodeRequest(apiByKey(21)!, 0, 1, 'raw', {
        topics: [{ name: 'bad', partitions: [{ partitionIndex: 0, offset: 0 }] }],
        timeoutMs: 1000,
      });
      await closes(deleteRecords); // known to the codecs, not served
      const metadata = encodeRequest(apiByKey(3)!, 9, 1, 'raw', { topics: null });
      await closes(frame(metadata.subarray(4, metadata.length - 3))); // cut inside its body
      await closes(Buffer.from([0x7f, 0xff, 0xff, 0xff])); // a 2 GiB frame is refused before it is buffered
      // Still serving.
      const after = await RawKafka.connect(broker.kafkaPort);
      const md = await after.call(3, 9, { topics: [{ name: 'bad' }], allowAutoTopicCreation: false });
      expect(((md.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[]).length).toBe(1);
      after.socket.destroy();
      expect((await broker.health('/live')).status).toBe(200);
    });
  });
});

describe('the Kafka listener with @platformatic/kafka', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--kafka-port', '0', '--offsets-topic-partitions', '1'] });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('its admin creates a topic and its idempotent producer writes with acks -1; Tributary reads the records', async () => {
    const pk = await importPlatformatic();
    const bootstrapBrokers = [`127.0.0.1:${broker.kafkaPort}`];
    const admin = new pk.Admin({ clientId: 'pk-admin', bootstrapBrokers });
    try {
      const created = await admin.createTopics({ topics: ['pk'], partitions: 2, replicas: 1 });
      expect(created.map((t) => [t.name, t.partitions])).toEqual([['pk', 2]]);
    } finally {
      await admin.close();
    }
    const producer = new pk.Producer({ clientId: 'pk-producer', bootstrapBrokers, serializers: pk.stringSerializers, idempotent: true, acks: -1 });
    try {
      const res = await producer.send({
        messages: Array.from({ length: 10 }, (_, i) => ({ topic: 'pk', key: `k${i}`, value: `v${i}`, partition: i % 2, headers: new Map([['n', String(i)]]) })),
      });
      expect(res.offsets?.map((o) => [o.partition, Number(o.offset)]).sort()).toEqual([
        [0, 0],
        [1, 0],
      ]);
    } finally {
      await producer.close();
    }
    const c = await broker.connect();
    const recs = (await c.consume({ topic: 'pk', partition: 1, offset: 0, batch: 100 })).records;
    expect(recs.map((r) => `${r.key!.toString()}=${r.value.toString()};${r.headers.map((h) => `${h.key}:${h.value.toString()}`).join()}`)).toEqual(
      [1, 3, 5, 7, 9].map((i) => `k${i}=v${i};n:${i}`),
    );
  });
});

describe('Kafka listener settings', () => {
  it('keeps the per-address connection limit (shared with the main port) and closes a frame left unfinished', async () => {
    const broker = await BrokerProcess.start({
      args: ['--kafka-port', '0', '--offsets-topic-partitions', '1', '--max-connections-per-address', '2', '--frame-timeout-ms', '300'],
    });
    try {
      const main = await broker.connect(); // one of the address's two
      const first = await RawKafka.connect(broker.kafkaPort);
      expect(((await first.call(18, 3, { clientSoftwareName: 'x', clientSoftwareVersion: '1' })).apiKeys as KafkaStruct[]).length).toBeGreaterThan(0);
      const third = await RawKafka.connect(broker.kafkaPort);
      await third.closed; // over the limit: closed at once
      first.socket.destroy();
      await first.closed;
      await main.close();
      // A frame that announces 100 bytes and sends 5 is closed after the frame timeout; nothing else changed.
      const slow = await RawKafka.connect(broker.kafkaPort);
      slow.socket.write(Buffer.from([0, 0, 0, 100, 0, 18, 0, 0, 0]));
      await slow.closed;
      const again = await RawKafka.connect(broker.kafkaPort);
      expect((await again.call(3, 9, { topics: [], allowAutoTopicCreation: false })).brokers).toHaveLength(1);
      again.socket.destroy();
    } finally {
      await broker.dispose();
    }
  });

  it("--kafka-port-if-free (npm start's 9092): on that port when free; when taken the broker starts without it and says so", async () => {
    const port = await freePort();
    const first = await BrokerProcess.start({ args: ['--kafka-port-if-free', String(port), '--offsets-topic-partitions', '1'] });
    try {
      expect(first.kafkaPort).toBe(port);
      const second = await BrokerProcess.start({ args: ['--kafka-port-if-free', String(port), '--offsets-topic-partitions', '1'] });
      try {
        expect(second.stdout).toMatch(new RegExp(`Kafka protocol off: port ${port} in use\\)`));
        expect(second.kafkaPort).toBe(0);
        expect(await (await second.connect()).command('LIST')).toMatch(/^OK /);
      } finally {
        await second.dispose();
      }
      // Still the first broker's.
      const raw = await RawKafka.connect(port);
      expect(
        ((await raw.call(3, 9, { topics: null, allowAutoTopicCreation: false, includeTopicAuthorizedOperations: false })).brokers as KafkaStruct[])[0]!.port,
      ).toBe(port);
      raw.socket.destroy();
    } finally {
      await first.dispose();
    }
  });

  it('tells clients --kafka-advertised-port (a proxy in front of the listener) instead of the bound port, in Metadata and FindCoordinator', async () => {
    const advertised = await freePort();
    const broker = await BrokerProcess.start({ args: ['--kafka-port', '0', '--kafka-advertised-port', String(advertised), '--offsets-topic-partitions', '1'] });
    const raw = await RawKafka.connect(broker.kafkaPort);
    try {
      expect(broker.kafkaPort).not.toBe(advertised);
      const meta = await raw.call(3, 9, { topics: null, allowAutoTopicCreation: false, includeTopicAuthorizedOperations: false });
      expect((meta.brokers as KafkaStruct[]).map((b) => b.port)).toEqual([advertised]);
      const found = await raw.call(10, 3, { key: 'g', keyType: 0 });
      expect([found.errorCode, found.port]).toEqual([0, advertised]);
    } finally {
      raw.socket.destroy();
      await broker.dispose();
    }
  });

  it("counts its connections with the main port's in --max-connections", async () => {
    const broker = await BrokerProcess.start({ args: ['--kafka-port', '0', '--offsets-topic-partitions', '1', '--max-connections', '2'] });
    try {
      const main = await broker.connect();
      const kafka = await RawKafka.connect(broker.kafkaPort);
      expect((await kafka.call(18, 3, { clientSoftwareName: 'x', clientSoftwareVersion: '1' })).errorCode).toBe(0);
      // Both slots taken, one per port: a third connection on either port is turned away.
      const third = await RawKafka.connect(broker.kafkaPort);
      await third.closed;
      await expect(broker.connect()).rejects.toThrow(/too_many_connections/);
      kafka.socket.destroy();
      await kafka.closed;
      // A slot freed on the Kafka port admits a main-port client.
      await until(
        async () =>
          await broker.connect().then(
            (c) => c.close().then(() => true),
            () => false,
          ),
        5000,
        'a freed slot',
      );
      await main.close();
    } finally {
      await broker.dispose();
    }
  });

  it('closes a client that pipelines Fetches and never reads its responses (--write-stall-timeout-ms); others are served', async () => {
    const broker = await BrokerProcess.start({
      args: ['--kafka-port', '0', '--offsets-topic-partitions', '1', '--max-pending-reply-bytes', '65536', '--write-stall-timeout-ms', '1000'],
    });
    try {
      const c = await broker.connect();
      await c.command('CREATE', { topic: 'big', partitions: 1 });
      const producer = new Producer({ brokers: [broker.address] });
      try {
        await producer.send({ topic: 'big', messages: Array.from({ length: 1000 }, (_, i) => ({ value: `${i} ${'v'.repeat(1000)}`, partition: 0 })) });
      } finally {
        await producer.close();
      }
      const stalled = await RawKafka.connect(broker.kafkaPort);
      stalled.socket.pause(); // never reads a response
      const fetch = encodeRequest(apiByKey(1)!, 12, 1, 'raw', {
        maxWaitMs: 0,
        minBytes: 1,
        maxBytes: 4 << 20,
        isolationLevel: 0,
        sessionId: 0,
        sessionEpoch: -1,
        topics: [
          {
            topic: 'big',
            partitions: [{ partition: 0, currentLeaderEpoch: -1, fetchOffset: 0, lastFetchedEpoch: -1, logStartOffset: -1, partitionMaxBytes: 4 << 20 }],
          },
        ],
        forgottenTopicsData: [],
        rackId: '',
      });
      stalled.socket.write(Buffer.concat(Array.from({ length: 100 }, () => fetch)));
      await until(() => broker.stderr.includes('the client does not read its responses'), 15_000, 'the stalled client closed');
      // Everyone else is served meanwhile and after.
      const other = await RawKafka.connect(broker.kafkaPort);
      expect(
        (await other.call(3, 9, { topics: [{ name: 'big' }], allowAutoTopicCreation: false, includeTopicAuthorizedOperations: false })).brokers,
      ).toHaveLength(1);
      other.socket.destroy();
      stalled.socket.resume();
      await stalled.closed;
    } finally {
      await broker.dispose();
    }
  });

  it('throttles a connection past --max-requests-per-second-per-connection as Kafka quotas do: answered, with a throttle time, reading paused', async () => {
    const broker = await BrokerProcess.start({
      args: ['--kafka-port', '0', '--offsets-topic-partitions', '1', '--max-requests-per-second-per-connection', '2'],
    });
    try {
      const raw = await RawKafka.connect(broker.kafkaPort);
      const api = apiByKey(18)!;
      const body = { clientSoftwareName: 'x', clientSoftwareVersion: '1' };
      // Six pipelined requests: the budget (2) answers the first two unthrottled, the rest with rising throttle times.
      raw.socket.write(Buffer.concat(Array.from({ length: 6 }, (_, i) => encodeRequest(api, 3, 100 + i, 'raw', body))));
      const replies = [];
      for (let i = 0; i < 6; i++) replies.push(decodeResponse(api, 3, await raw.next()));
      expect(replies.map((r) => r.correlationId)).toEqual([100, 101, 102, 103, 104, 105]);
      expect(replies.every((r) => r.body.errorCode === 0)).toBe(true);
      const throttles = replies.map((r) => r.body.throttleTimeMs as number);
      expect(throttles.slice(0, 2)).toEqual([0, 0]);
      expect(throttles.slice(2).every((t, i, all) => t > 0 && (i === 0 || t > all[i - 1]!))).toBe(true);
      // Another connection has its own budget.
      const other = await RawKafka.connect(broker.kafkaPort);
      expect((await other.call(18, 3, body)).throttleTimeMs).toBe(0);
      other.socket.destroy();
      raw.socket.destroy();
    } finally {
      await broker.dispose();
    }
  });

  it('bounds what the compressed batches of a request may inflate to by --max-batch-bytes, not by the record counts they claim', async () => {
    const broker = await BrokerProcess.start({ args: ['--kafka-port', '0', '--offsets-topic-partitions', '1', '--max-batch-bytes', '65536'] });
    try {
      const c = await broker.connect();
      await c.command('CREATE', { topic: 'inflate', partitions: 1 });
      const raw = await RawKafka.connect(broker.kafkaPort);
      // 10 records of 20 KB zeros: a few KB on the wire, 200 KB inflated.
      const bomb = encodeRecordBatch({ records: Array.from({ length: 10 }, () => ({ key: null, value: Buffer.alloc(20_000) })), compression: 'gzip' });
      expect(bomb.length).toBeLessThan(65536);
      const res = await raw.call(0, 7, {
        transactionalId: null,
        acks: 1,
        timeoutMs: 1000,
        topicData: [{ name: 'inflate', partitionData: [{ index: 0, records: bomb }] }],
      });
      expect(((res.responses as KafkaStruct[])[0]!.partitionResponses as KafkaStruct[])[0]!.errorCode).toBe(kafkaErrorCode('MESSAGE_TOO_LARGE'));
      expect((await c.command('LIST_OFFSETS', { topic: 'inflate', partition: 0 })).match(/leo=(\d+)/)![1]).toBe('0');
      // The bound is per request, not per batch: four batches of 20 KB inflated each fit, together they do not.
      await c.command('CREATE', { topic: 'inflate4', partitions: 4 });
      const small = encodeRecordBatch({ records: [{ key: null, value: Buffer.alloc(20_000) }], compression: 'gzip' });
      const res4 = await raw.call(0, 7, {
        transactionalId: null,
        acks: 1,
        timeoutMs: 1000,
        topicData: [{ name: 'inflate4', partitionData: [0, 1, 2, 3].map((index) => ({ index, records: small })) }],
      });
      const codes = ((res4.responses as KafkaStruct[])[0]!.partitionResponses as KafkaStruct[]).map((p) => p.errorCode);
      expect(codes).toEqual([0, 0, 0, kafkaErrorCode('MESSAGE_TOO_LARGE')]);
      // DescribeConfigs says so: the largest batch is that bound, not --max-record-bytes (8 MiB here).
      const described = await raw.call(32, 1, {
        resources: [
          { resourceType: 2, resourceName: 'inflate', configurationKeys: ['max.message.bytes'] },
          { resourceType: 4, resourceName: '', configurationKeys: ['message.max.bytes'] },
        ],
        includeSynonyms: false,
      });
      const values = (described.results as KafkaStruct[]).map((r) => (r.configs as KafkaStruct[]).map((e) => [e.name, e.value]));
      expect(values).toEqual([[['max.message.bytes', '65536']], [['message.max.bytes', '65536']]]);
      raw.socket.destroy();
    } finally {
      await broker.dispose();
    }
  });

  it("speaks TLS with the main port's certificate: kafkajs with the CA produces, a plain client gets nothing", async () => {
    const dir = await tempDir('tributary-kafka-tls-');
    const key = path.join(dir, 'broker.key');
    const cert = path.join(dir, 'broker.crt');
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-keyout',
        key,
        '-out',
        cert,
        '-days',
        '1',
        '-subj',
        '/CN=localhost',
        '-addext',
        'subjectAltName=IP:127.0.0.1,DNS:localhost',
      ],
      { stdio: 'ignore' },
    );
    const broker = await BrokerProcess.start({
      args: ['--kafka-port', '0', '--offsets-topic-partitions', '1', '--tls-cert', cert, '--tls-key', key],
      clientTls: { ca: readFileSync(cert) },
    });
    try {
      const kafka = new Kafka({
        brokers: [`127.0.0.1:${broker.kafkaPort}`],
        clientId: 'tls',
        logLevel: logLevel.NOTHING,
        ssl: { ca: [readFileSync(cert, 'utf8')] },
      });
      const admin = kafka.admin();
      await admin.connect();
      const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
      try {
        expect(await admin.createTopics({ topics: [{ topic: 'over-tls', numPartitions: 1 }] })).toBe(true);
        await producer.connect();
        await producer.send({ topic: 'over-tls', acks: -1, messages: [{ value: 'secret' }] });
      } finally {
        await producer.disconnect();
        await admin.disconnect();
      }
      const c = await broker.connect();
      expect((await c.consume({ topic: 'over-tls', partition: 0, offset: 0, batch: 10 })).records.map((r) => r.value.toString())).toEqual(['secret']);
      // A plain Kafka request is not a TLS handshake: the connection is closed unanswered.
      const plain = await RawKafka.connect(broker.kafkaPort);
      plain.socket.write(encodeRequest(apiByKey(18)!, 0, 1, 'plain', {}));
      await plain.closed;
    } finally {
      await broker.dispose();
      await removeDir(dir);
    }
  });
});

interface PlatformaticClients {
  Admin: new (o: {
    clientId: string;
    bootstrapBrokers: string[];
  }) => {
    createTopics(o: { topics: string[]; partitions: number; replicas: number }): Promise<{ name: string; partitions: number }[]>;
    close(): Promise<void>;
  };
  Producer: new (
    o: Record<string, unknown>,
  ) => {
    send(o: { messages: Record<string, unknown>[] }): Promise<{ offsets?: { topic: string; partition: number; offset: bigint }[] }>;
    close(): Promise<void>;
  };
  stringSerializers: unknown;
}

/** @platformatic/kafka, after the Promise.withResolvers stand-in it needs on Node 20. */
async function importPlatformatic(): Promise<PlatformaticClients> {
  await import('../../helpers/with-resolvers.js');
  return (await import('@platformatic/kafka')) as unknown as PlatformaticClients;
}
