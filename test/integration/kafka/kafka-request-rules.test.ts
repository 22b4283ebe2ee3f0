/**
 * Requests Apache Kafka refuses or answers per partition, against a running broker (docs/kafka.md, "What is
 * served"): a topic named twice in CreateTopics, CreatePartitions or DeleteTopics is INVALID_REQUEST and
 * nothing of it is applied; a DeleteTopics v6 entry with both a name and an id, or neither, is
 * INVALID_REQUEST; a partition twice in ListOffsets is INVALID_REQUEST for each entry; ApiVersions v3 checks
 * the client software name and version; Fetch and ListOffsets check `currentLeaderEpoch`; an incremental
 * fetch of a session this broker never handed out is FETCH_SESSION_ID_NOT_FOUND; an isolation level other
 * than 0 and 1 in Fetch or ListOffsets is INVALID_REQUEST in every partition; an offset or timestamp
 * beyond 2^53 is answered for its partition instead of closing the connection (a committed offset there, of
 * OffsetCommit or TxnOffsetCommit, with INVALID_COMMIT_OFFSET_SIZE), and a Fetch's logStartOffset or an
 * OffsetCommit's retentionTimeMs beyond it (fields the listener does not use) is read and the request served.
 * A CreateTopics retention.bytes beyond 2^53 is INVALID_CONFIG, also with validateOnly.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { apiByKey } from 'tributary-broker/kafka/protocol/apis.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import { decodeResponse, encodeRequest } from 'tributary-broker/kafka/protocol/headers.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawKafka } from '../../helpers/raw-kafka.js';

const INVALID_REQUEST = kafkaErrorCode('INVALID_REQUEST');
const OFFSET_OUT_OF_RANGE = kafkaErrorCode('OFFSET_OUT_OF_RANGE');

/** Stands for an int64 in an encoded request, to be replaced by any int64 (the encoder takes only safe numbers there). */
const SENTINEL = 0x1234_5678_9abc;

/** The request with every int64 SENTINEL replaced by `value`. */
function patched(key: number, version: number, body: KafkaStruct, value: bigint): Buffer {
  const frame = encodeRequest(apiByKey(key)!, version, 7, 'raw', body);
  const needle = Buffer.alloc(8);
  needle.writeBigInt64BE(BigInt(SENTINEL));
  let at = frame.indexOf(needle);
  if (at < 0) throw new Error('sentinel not found');
  for (; at >= 0; at = frame.indexOf(needle, at + 8)) frame.writeBigInt64BE(value, at);
  return frame;
}

/** Sends a raw request frame and decodes the answer; fails if the broker closed the connection instead. */
async function answer(raw: RawKafka, key: number, version: number, frame: Buffer): Promise<KafkaStruct> {
  raw.socket.write(frame);
  const got = await Promise.race([raw.next(), raw.closed.then(() => null)]);
  if (!got) throw new Error('the broker closed the connection');
  return decodeResponse(apiByKey(key)!, version, got).body;
}

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

    it('CreatePartitions: INVALID_REQUEST once for the name, its partitions unchanged; the other topic of the request grows', async () => {
      await c.command('CREATE', { topic: 'dup-grow', partitions: 1 });
      await c.command('CREATE', { topic: 'single-grow', partitions: 1 });
      const res = await raw.call(37, 1, {
        topics: [
          { name: 'dup-grow', count: 2, assignments: null },
          { name: 'single-grow', count: 2, assignments: null },
          { name: 'dup-grow', count: 4, assignments: null },
        ],
        timeoutMs: 5000,
        validateOnly: false,
      });
      expect((res.results as KafkaStruct[]).map((x) => [x.name, x.errorCode, x.errorMessage])).toEqual([
        ['dup-grow', INVALID_REQUEST, 'Duplicate topic name.'],
        ['single-grow', 0, null],
      ]);
      expect(await partitionCount('dup-grow')).toBe(1);
      expect(await partitionCount('single-grow')).toBe(2);
    });

    it('DeleteTopics v1: INVALID_REQUEST once for the name, the topic kept; the other topic of the request is deleted', async () => {
      await c.command('CREATE', { topic: 'dup-delete', partitions: 1 });
      await c.command('CREATE', { topic: 'single-delete', partitions: 1 });
      const res = await raw.call(20, 1, { topicNames: ['dup-delete', 'single-delete', 'dup-delete'], timeoutMs: 5000 });
      expect((res.responses as KafkaStruct[]).map((x) => [x.name, x.errorCode])).toEqual([
        ['dup-delete', INVALID_REQUEST],
        ['single-delete', 0],
      ]);
      expect(await exists('dup-delete')).toBe(true);
      expect(await exists('single-delete')).toBe(false);
    });
  });

  describe('CreateTopics configs', () => {
    it('a retention.bytes beyond 2^53 is INVALID_CONFIG, with validateOnly too (it would not be created), and nothing is created', async () => {
      const INVALID_CONFIG = 40;
      for (const value of ['9223372036854775807', '99999999999999999999', '9007199254740993']) {
        for (const validateOnly of [true, false]) {
          const topic = { name: 'huge-retention-bytes', numPartitions: 1, replicationFactor: 1, assignments: [], configs: [{ name: 'retention.bytes', value }] };
          const res = await raw.call(19, 4, { topics: [topic], timeoutMs: 5000, validateOnly });
          const result = (res.topics as KafkaStruct[])[0]!;
          expect([result.errorCode, result.errorMessage], `${value}, validateOnly ${validateOnly}`).toEqual([INVALID_CONFIG, expect.stringMatching(/retention\.bytes/)]);
          expect(await exists('huge-retention-bytes')).toBe(false);
        }
      }
    });
  });

  describe('DeleteTopics v6 entries KRaft refuses before deleting anything', () => {
    const ID = '0123abcd-0000-0000-0000-000000000001';
    const ZERO = '00000000-0000-0000-0000-000000000000';
    const call = async (topics: KafkaStruct[]) =>
      ((await raw.call(20, 6, { topics, timeoutMs: 5000 })).responses as KafkaStruct[]).map((x) => [x.name, x.topicId, x.errorCode, x.errorMessage]);

    it('both a name and an id: INVALID_REQUEST, the topic kept', async () => {
      await c.command('CREATE', { topic: 'both-named', partitions: 1 });
      expect(await call([{ name: 'both-named', topicId: ID }])).toEqual([
        ['both-named', ID, INVALID_REQUEST, 'You may not specify both topic name and topic id.'],
      ]);
      expect(await exists('both-named')).toBe(true);
    });

    it('neither a name nor an id: INVALID_REQUEST', async () => {
      expect(await call([{ name: null, topicId: ZERO }])).toEqual([[null, ZERO, INVALID_REQUEST, 'Neither topic name nor id were specified.']]);
    });

    it('a name twice, and an id twice: INVALID_REQUEST once each, the topic kept', async () => {
      await c.command('CREATE', { topic: 'dup-delete-v6', partitions: 1 });
      const name = { name: 'dup-delete-v6', topicId: ZERO };
      const id = { name: null, topicId: ID };
      expect(await call([name, id, name, id])).toEqual([
        ['dup-delete-v6', ZERO, INVALID_REQUEST, 'Duplicate topic name.'],
        [null, ID, INVALID_REQUEST, 'Duplicate topic id.'],
      ]);
      expect(await exists('dup-delete-v6')).toBe(true);
    });
  });

  describe('ApiVersions v3', () => {
    it("a client software name or version Kafka's pattern refuses is INVALID_REQUEST with no API list; the connection stays open", async () => {
      for (const [clientSoftwareName, clientSoftwareVersion] of [
        ['', '1.0'],
        ['raw', ''],
        ['raw', '!!bad version!!'],
        ['@platformatic/kafka', '1.35.0'],
        ['-raw', '1'],
        ['raw.', '1'],
        ['a b', '1'],
        ['raw', '1.0\n'],
      ]) {
        const res = await raw.call(18, 3, { clientSoftwareName, clientSoftwareVersion });
        expect([res.errorCode, (res.apiKeys as KafkaStruct[]).length], `${clientSoftwareName} ${clientSoftwareVersion}`).toEqual([INVALID_REQUEST, 0]);
      }
      // What the clients the interop tests use send (@platformatic/kafka, librdkafka, the Java client), and one letter.
      for (const [clientSoftwareName, clientSoftwareVersion] of [
        ['platformatic-kafka', '1.35.0'],
        ['librdkafka', '2.0.2'],
        ['apache-kafka-java', '3.7.0'],
        ['x', '1'],
      ]) {
        const res = await raw.call(18, 3, { clientSoftwareName, clientSoftwareVersion });
        expect(res.errorCode, `${clientSoftwareName} ${clientSoftwareVersion}`).toBe(0);
        expect((res.apiKeys as KafkaStruct[]).length).toBeGreaterThan(10);
      }
      // Before v3 there is no name to check.
      expect((await raw.call(18, 2, {})).errorCode).toBe(0);
    });
  });

  describe('ListOffsets', () => {
    it('a partition asked for twice (also under two entries of its topic): INVALID_REQUEST in each entry, the others answered', async () => {
      await c.command('CREATE', { topic: 'dup-list', partitions: 2 });
      await c.command('PUBLISH', { topic: 'dup-list', partition: 1, message: 'x' });
      const q = (partitionIndex: number) => ({ partitionIndex, currentLeaderEpoch: -1, timestamp: -1 });
      const res = await raw.call(2, 5, {
        replicaId: -1,
        isolationLevel: 0,
        topics: [
          { name: 'dup-list', partitions: [q(0), q(1), q(0)] },
          { name: 'dup-list', partitions: [q(0)] },
        ],
      });
      const answers = (res.topics as KafkaStruct[]).map((t) => (t.partitions as KafkaStruct[]).map((x) => [x.partitionIndex, x.errorCode, x.offset]));
      expect(answers).toEqual([
        [
          [0, INVALID_REQUEST, -1],
          [1, 0, 1],
          [0, INVALID_REQUEST, -1],
        ],
        [[0, INVALID_REQUEST, -1]],
      ]);
    });

    it('v4+ checks currentLeaderEpoch against the epoch Metadata reports (0): -1 is not checked, above is UNKNOWN_LEADER_EPOCH, below FENCED_LEADER_EPOCH', async () => {
      await c.command('CREATE', { topic: 'epoch-list', partitions: 1 });
      const meta = await raw.call(3, 9, { topics: [{ name: 'epoch-list' }], allowAutoTopicCreation: false, includeTopicAuthorizedOperations: false });
      expect(((meta.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!.leaderEpoch).toBe(0);
      const codes: number[] = [];
      for (const currentLeaderEpoch of [-1, 0, 7, -2]) {
        const res = await raw.call(2, 5, {
          replicaId: -1,
          isolationLevel: 0,
          topics: [{ name: 'epoch-list', partitions: [{ partitionIndex: 0, currentLeaderEpoch, timestamp: -1 }] }],
        });
        codes.push(((res.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!.errorCode as number);
      }
      expect(codes).toEqual([0, 0, kafkaErrorCode('UNKNOWN_LEADER_EPOCH'), kafkaErrorCode('FENCED_LEADER_EPOCH')]);
    });

    it('an isolation level other than 0 and 1 is INVALID_REQUEST for every partition, nothing looked up; the connection keeps serving', async () => {
      await c.command('CREATE', { topic: 'iso-list', partitions: 2 });
      await c.command('PUBLISH', { topic: 'iso-list', partition: 1, message: 'x' });
      const body = (isolationLevel: number) => ({
        replicaId: -1,
        isolationLevel,
        topics: [{ name: 'iso-list', partitions: [0, 1].map((partitionIndex) => ({ partitionIndex, currentLeaderEpoch: -1, timestamp: -1 })) }],
      });
      const answers = (res: KafkaStruct) => ((res.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[]).map((x) => [x.partitionIndex, x.errorCode, x.offset]);
      for (const isolationLevel of [2, -1, 127]) {
        expect(answers(await raw.call(2, 5, body(isolationLevel))), `isolationLevel ${isolationLevel}`).toEqual([
          [0, INVALID_REQUEST, -1],
          [1, INVALID_REQUEST, -1],
        ]);
      }
      expect(answers(await raw.call(2, 5, body(1)))).toEqual([
        [0, 0, 0],
        [1, 0, 1],
      ]);
    });
  });

  describe('Fetch', () => {
    const fetchBody = (topic: string, p: Partial<KafkaStruct>, session: { sessionId: number; sessionEpoch: number } = { sessionId: 0, sessionEpoch: -1 }) => ({
      replicaId: -1,
      maxWaitMs: 0,
      minBytes: 0,
      maxBytes: 1 << 20,
      isolationLevel: 0,
      ...session,
      topics: [{ topic, partitions: [{ partition: 0, currentLeaderEpoch: -1, fetchOffset: 0, logStartOffset: -1, partitionMaxBytes: 1 << 20, ...p }] }],
      forgottenTopicsData: [],
      rackId: '',
    });
    const partitionOf = (res: KafkaStruct) => ((res.responses as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!;

    it('v9+ checks currentLeaderEpoch against the epoch Metadata reports (0): negative is not checked, above is UNKNOWN_LEADER_EPOCH with no records', async () => {
      await c.command('CREATE', { topic: 'epoch-fetch', partitions: 1 });
      await c.command('PUBLISH', { topic: 'epoch-fetch', partition: 0, message: 'x' });
      const answers: [number, number][] = [];
      for (const currentLeaderEpoch of [-1, -2, 0, 7]) {
        const p = partitionOf(await raw.call(1, 11, fetchBody('epoch-fetch', { currentLeaderEpoch })));
        answers.push([p.errorCode as number, (p.records as Buffer | null)?.length ?? 0]);
      }
      expect(answers.slice(0, 3).every(([code, bytes]) => code === 0 && bytes > 0)).toBe(true);
      expect(answers[3]).toEqual([kafkaErrorCode('UNKNOWN_LEADER_EPOCH'), 0]);
    });

    it('an incremental fetch (session epoch other than 0 and -1) is FETCH_SESSION_ID_NOT_FOUND at once: this broker hands out no sessions', async () => {
      for (const session of [
        { sessionId: 12345, sessionEpoch: 3 },
        { sessionId: 0, sessionEpoch: 1 },
        { sessionId: 12345, sessionEpoch: -2 },
      ]) {
        const started = performance.now();
        const res = await raw.call(1, 11, { ...fetchBody('epoch-fetch', {}, session), maxWaitMs: 5000, minBytes: 1 << 20 });
        expect([res.errorCode, res.sessionId, (res.responses as KafkaStruct[]).length], JSON.stringify(session)).toEqual([
          kafkaErrorCode('FETCH_SESSION_ID_NOT_FOUND'),
          0,
          0,
        ]);
        expect(performance.now() - started).toBeLessThan(2500);
      }
      // Full fetches: epoch 0 (would open a session; none is handed out) and -1 (sessionless), any session id.
      for (const session of [
        { sessionId: 12345, sessionEpoch: 0 },
        { sessionId: 12345, sessionEpoch: -1 },
        { sessionId: 0, sessionEpoch: 0 },
      ]) {
        const res = await raw.call(1, 11, fetchBody('epoch-fetch', {}, session));
        expect([res.errorCode, res.sessionId, partitionOf(res).errorCode], JSON.stringify(session)).toEqual([0, 0, 0]);
      }
    });

    it('an isolation level other than 0 and 1 is INVALID_REQUEST at the top and for every partition, no records; the connection keeps serving', async () => {
      await c.command('CREATE', { topic: 'iso-fetch', partitions: 1 });
      await c.command('PUBLISH', { topic: 'iso-fetch', partition: 0, message: 'x' });
      for (const isolationLevel of [2, -1, 127]) {
        const res = await raw.call(1, 11, { ...fetchBody('iso-fetch', {}), isolationLevel });
        const p = partitionOf(res);
        expect([res.errorCode, p.errorCode, (p.records as Buffer | null)?.length ?? 0], `isolationLevel ${isolationLevel}`).toEqual([INVALID_REQUEST, INVALID_REQUEST, 0]);
      }
      for (const isolationLevel of [0, 1]) {
        const p = partitionOf(await raw.call(1, 11, { ...fetchBody('iso-fetch', {}), isolationLevel }));
        expect(p.errorCode).toBe(0);
        expect((p.records as Buffer).length).toBeGreaterThan(0);
      }
    });
  });

  describe('an int64 offset or timestamp beyond 2^53', () => {
    const fetchOf = (partitions: KafkaStruct[], maxBytes = 1 << 20) => ({
      replicaId: -1,
      maxWaitMs: 0,
      minBytes: 0,
      maxBytes,
      isolationLevel: 0,
      sessionId: 0,
      sessionEpoch: -1,
      topics: partitions,
      forgottenTopicsData: [],
      rackId: '',
    });
    const at = (topic: string, fetchOffset: number) => ({
      topic,
      partitions: [{ partition: 0, currentLeaderEpoch: -1, fetchOffset, logStartOffset: -1, partitionMaxBytes: 1 << 20 }],
    });
    const codes = (res: KafkaStruct) => (res.responses as KafkaStruct[]).map((t) => [t.topic, (t.partitions as KafkaStruct[])[0]!.errorCode as number]);

    it('Fetch at offset 2^60 or -2^60 is OFFSET_OUT_OF_RANGE for that partition, the others of the request served, the connection kept', async () => {
      await c.command('CREATE', { topic: 'big-fetch', partitions: 1 });
      await c.command('PUBLISH', { topic: 'big-fetch', partition: 0, message: 'x' });
      for (const value of [1n << 60n, -(1n << 60n), (1n << 63n) - 1n, 1n << 53n]) {
        const res = await answer(raw, 1, 11, patched(1, 11, fetchOf([at('big-fetch', SENTINEL), { ...at('big-fetch', 0), topic: 'no-such-topic' }]), value));
        expect(codes(res), String(value)).toEqual([
          ['big-fetch', OFFSET_OUT_OF_RANGE],
          ['no-such-topic', kafkaErrorCode('UNKNOWN_TOPIC_OR_PARTITION')],
        ]);
      }
      // Also once the response's byte budget is spent by an earlier partition, as Kafka's log read answers it.
      await c.command('CREATE', { topic: 'big-fetch-2', partitions: 1 });
      const res = await answer(raw, 1, 11, patched(1, 11, fetchOf([at('big-fetch', 0), at('big-fetch-2', SENTINEL)], 1), 1n << 60n));
      expect(codes(res)).toEqual([
        ['big-fetch', 0],
        ['big-fetch-2', OFFSET_OUT_OF_RANGE],
      ]);
    });

    it('Fetch with a logStartOffset (a follower field) beyond 2^53 is answered as any other, the connection kept', async () => {
      await c.command('CREATE', { topic: 'big-log-start', partitions: 1 });
      await c.command('PUBLISH', { topic: 'big-log-start', partition: 0, message: 'x' });
      const withLogStart = { topic: 'big-log-start', partitions: [{ partition: 0, currentLeaderEpoch: -1, fetchOffset: 0, logStartOffset: SENTINEL, partitionMaxBytes: 1 << 20 }] };
      for (const value of [1n << 60n, -(1n << 60n), (1n << 63n) - 1n, -(1n << 63n), 1n << 53n]) {
        const res = await answer(raw, 1, 11, patched(1, 11, fetchOf([withLogStart]), value));
        const p = (res.responses as KafkaStruct[])[0]!.partitions as KafkaStruct[];
        expect([p[0]!.errorCode, p[0]!.highWatermark, (p[0]!.records as Buffer).length > 0], String(value)).toEqual([0, 1, true]);
      }
    });

    /** The committed offsets of `group` in `topics` (partition 0 each), -1 where none is. */
    const committedOf = async (group: string, topics: string[]) => {
      const res = await raw.call(9, 4, { groupId: group, topics: topics.map((name) => ({ name, partitionIndexes: [0] })) });
      return (res.topics as KafkaStruct[]).map((t) => [t.name, Number((t.partitions as KafkaStruct[])[0]!.committedOffset)]);
    };
    const commitCodes = (res: KafkaStruct) => (res.topics as KafkaStruct[]).map((t) => [t.name, (t.partitions as KafkaStruct[])[0]!.errorCode as number]);
    /** 2^53 and past it: no offset Tributary can hold (INVALID_COMMIT_OFFSET_SIZE); below -2^53: negative, as -1 is (INVALID_REQUEST). */
    const BIG_OFFSETS: Array<[bigint, number]> = [
      [1n << 60n, kafkaErrorCode('INVALID_COMMIT_OFFSET_SIZE')],
      [(1n << 63n) - 1n, kafkaErrorCode('INVALID_COMMIT_OFFSET_SIZE')],
      [1n << 53n, kafkaErrorCode('INVALID_COMMIT_OFFSET_SIZE')],
      [-(1n << 60n), INVALID_REQUEST],
      [-(1n << 63n), INVALID_REQUEST],
      [-(1n << 53n), INVALID_REQUEST],
    ];

    it('OffsetCommit of offset 2^53 or more is INVALID_COMMIT_OFFSET_SIZE for its partition, of -2^60 INVALID_REQUEST; the request\'s other topic is committed, the connection kept', async () => {
      await c.command('CREATE', { topic: 'big-commit', partitions: 1 });
      await c.command('CREATE', { topic: 'big-commit-ok', partitions: 1 });
      await c.command('PUBLISH', { topic: 'big-commit', partition: 0, message: 'x' });
      await c.command('PUBLISH', { topic: 'big-commit-ok', partition: 0, message: 'x' });
      const at = (name: string, committedOffset: number) => ({ name, partitions: [{ partitionIndex: 0, committedOffset, committedLeaderEpoch: -1, committedMetadata: null }] });
      const topics = [at('big-commit', SENTINEL), at('big-commit-ok', 1)];
      for (const [version, body] of [
        [8, { groupId: 'big-commit-group', generationId: -1, memberId: '', groupInstanceId: null, topics }],
        [2, { groupId: 'big-commit-group', generationId: -1, memberId: '', retentionTimeMs: -1, topics }],
      ] as const) {
        for (const [value, code] of BIG_OFFSETS) {
          const res = await answer(raw, 8, version, patched(8, version, body, value));
          expect(commitCodes(res), `v${version} ${value}`).toEqual([
            ['big-commit', code],
            ['big-commit-ok', 0],
          ]);
        }
      }
      expect(await committedOf('big-commit-group', ['big-commit', 'big-commit-ok'])).toEqual([
        ['big-commit', -1],
        ['big-commit-ok', 1],
      ]);
    });

    it('OffsetCommit v2-4 with a retentionTimeMs (not used) beyond 2^53 commits as any other, the connection kept', async () => {
      await c.command('CREATE', { topic: 'big-retention', partitions: 1 });
      for (let i = 0; i < 4; i++) await c.command('PUBLISH', { topic: 'big-retention', partition: 0, message: 'x' });
      let offset = 0;
      for (const version of [2, 4]) {
        for (const value of [1n << 60n, -(1n << 60n), (1n << 63n) - 1n, -(1n << 63n)]) {
          offset = Math.min(offset + 1, 4);
          const body = {
            groupId: 'big-retention-group',
            generationId: -1,
            memberId: '',
            retentionTimeMs: SENTINEL,
            topics: [{ name: 'big-retention', partitions: [{ partitionIndex: 0, committedOffset: offset, committedMetadata: null }] }],
          };
          expect(commitCodes(await answer(raw, 8, version, patched(8, version, body, value))), `v${version} ${value}`).toEqual([['big-retention', 0]]);
          expect(await committedOf('big-retention-group', ['big-retention'])).toEqual([['big-retention', offset]]);
        }
      }
    });

    it('TxnOffsetCommit of offset 2^53 or more is INVALID_COMMIT_OFFSET_SIZE for its partition, of -2^60 INVALID_REQUEST; the other topic is staged and committed with the transaction', async () => {
      await c.command('CREATE', { topic: 'big-txn', partitions: 1 });
      await c.command('CREATE', { topic: 'big-txn-ok', partitions: 1 });
      await c.command('PUBLISH', { topic: 'big-txn-ok', partition: 0, message: 'x' });
      const init = await raw.call(22, 1, { transactionalId: 'big-txn-1', transactionTimeoutMs: 60_000 });
      expect(init.errorCode).toBe(0);
      const p = { producerId: init.producerId as bigint, producerEpoch: init.producerEpoch as number };
      expect((await raw.call(25, 1, { transactionalId: 'big-txn-1', ...p, groupId: 'big-txn-group' })).errorCode).toBe(0);
      const at = (name: string, committedOffset: number) => ({ name, partitions: [{ partitionIndex: 0, committedOffset, committedLeaderEpoch: -1, committedMetadata: null }] });
      const body = { transactionalId: 'big-txn-1', groupId: 'big-txn-group', ...p, generationId: -1, memberId: '', groupInstanceId: null, topics: [at('big-txn', SENTINEL), at('big-txn-ok', 1)] };
      for (const version of [0, 3]) {
        for (const [value, code] of BIG_OFFSETS) {
          expect(commitCodes(await answer(raw, 28, version, patched(28, version, body, value))), `v${version} ${value}`).toEqual([
            ['big-txn', code],
            ['big-txn-ok', 0],
          ]);
        }
      }
      expect((await raw.call(26, 1, { transactionalId: 'big-txn-1', ...p, committed: true })).errorCode).toBe(0);
      expect(await committedOf('big-txn-group', ['big-txn', 'big-txn-ok'])).toEqual([
        ['big-txn', -1],
        ['big-txn-ok', 1],
      ]);
    });

    it('ListOffsets for timestamp 2^62 finds no record (offset -1, error 0); -2^62 is answered as -1000 is', async () => {
      await c.command('CREATE', { topic: 'big-list', partitions: 1 });
      await c.command('PUBLISH', { topic: 'big-list', partition: 0, message: 'x' });
      const body = {
        replicaId: -1,
        isolationLevel: 0,
        topics: [{ name: 'big-list', partitions: [{ partitionIndex: 0, currentLeaderEpoch: -1, timestamp: SENTINEL }] }],
      };
      const partition = (res: KafkaStruct) => ((res.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!;
      for (const isolationLevel of [0, 1]) {
        const p = partition(await answer(raw, 2, 5, patched(2, 5, { ...body, isolationLevel }, 1n << 62n)));
        expect([p.errorCode, p.offset, p.timestamp]).toEqual([0, -1, -1]);
      }
      const negative = partition(await answer(raw, 2, 5, patched(2, 5, body, -(1n << 62n))));
      const small = partition(await answer(raw, 2, 5, patched(2, 5, body, -1000n)));
      expect(negative.errorCode).toBe(small.errorCode);
      // Below -2, not a lookup this broker serves (docs/kafka.md, "ListOffsets").
      expect([small.errorCode, small.offset]).toEqual([INVALID_REQUEST, -1]);
      // Timestamp 0 still finds the record (the patching itself changes nothing else).
      const now = partition(await answer(raw, 2, 5, patched(2, 5, body, 0n)));
      expect([now.errorCode, now.offset]).toEqual([0, 0]);
    });
  });
});
