/**
 * The bytes of requests one Kafka connection may have read and not yet answered (docs/kafka.md, "Bad
 * input"): past MAX_PENDING_REQUEST_BYTES the broker stops reading the connection until responses went
 * out, so a client pipelining large requests behind one that takes long (a long-poll Fetch here; a slow
 * disk or a replication wait alike) cannot make it buffer them all: its writes back up in its own socket
 * instead. Nothing is dropped or reordered: once the first request is answered and the client reads, every
 * request is answered, in order. A request larger than the bound is still read whole, and handled alone.
 * `tributary_kafka_pending_request_bytes` shows what the broker holds.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { MAX_PENDING_REQUEST_BYTES } from 'tributary-broker/kafka/kafka-connection.js';
import { apiByKey } from 'tributary-broker/kafka/protocol/apis.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import { decodeResponse, encodeRequest } from 'tributary-broker/kafka/protocol/headers.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawKafka } from '../../helpers/raw-kafka.js';
import { until } from '../../helpers/util.js';

const MiB = 1024 * 1024;
/** The empty partitions the long-poll Fetches wait on, one per test. */
const HELD = 'pipeline-held';
const UNKNOWN_TOPIC = kafkaErrorCode('UNKNOWN_TOPIC_OR_PARTITION');
/** What one socket read may add past the bound before the broker pauses the socket (libuv reads 64 KiB). */
const READ_SLACK = 64 * 1024;

/** Fetch v11 of HELD's empty `partition` that waits up to 30 s for a record. */
function longPoll(correlationId: number, partition: number): Buffer {
  return encodeRequest(apiByKey(1)!, 11, correlationId, 'raw', {
    replicaId: -1,
    maxWaitMs: 30_000,
    minBytes: 1,
    maxBytes: MiB,
    isolationLevel: 0,
    sessionId: 0,
    sessionEpoch: -1,
    topics: [{ topic: HELD, partitions: [{ partition, currentLeaderEpoch: -1, fetchOffset: 0, logStartOffset: -1, partitionMaxBytes: MiB }] }],
    forgottenTopicsData: [],
    rackId: '',
  });
}

/** Produce v7 of `bytes` of records to a topic that does not exist: answered UNKNOWN_TOPIC_OR_PARTITION, nothing written. */
function largeProduce(correlationId: number, bytes: number): Buffer {
  return encodeRequest(apiByKey(0)!, 7, correlationId, 'raw', {
    transactionalId: null,
    acks: 1,
    timeoutMs: 30_000,
    topicData: [{ name: 'pipeline-nowhere', partitionData: [{ index: 0, records: Buffer.alloc(bytes, 7) }] }],
  });
}

describe('bytes of Kafka requests in flight per connection', () => {
  let broker: BrokerProcess;
  let c: Connection;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--kafka-port', '0', '--offsets-topic-partitions', '1'] });
    c = await broker.connect();
    await c.command('CREATE', { topic: HELD, partitions: 2 });
  });
  afterAll(async () => {
    await broker?.dispose();
  });

  const pending = async () => {
    const m = /^tributary_kafka_pending_request_bytes (\d+)/m.exec((await broker.health('/metrics')).body);
    if (!m) throw new Error('no tributary_kafka_pending_request_bytes in /metrics');
    return Number(m[1]);
  };

  /** Resolves once the client's unsent bytes stopped changing (for 300 ms), with what is left unsent. */
  const settled = async (raw: RawKafka): Promise<number> => {
    let last = -1;
    let still = 0;
    await until(
      () => {
        const now = raw.socket.writableLength;
        still = now === last ? still + 1 : 0;
        last = now;
        return still >= 3;
      },
      20_000,
      'the client’s writes to settle',
      100,
    );
    return last;
  };

  /** Reads the next `n` responses: their correlation ids and (Produce) error codes. */
  const replies = async (raw: RawKafka, apiKeys: number[], versions: number[]): Promise<Array<[number, KafkaStruct]>> => {
    const out: Array<[number, KafkaStruct]> = [];
    for (let i = 0; i < apiKeys.length; i++) {
      const r = decodeResponse(apiByKey(apiKeys[i]!)!, versions[i]!, await raw.next());
      out.push([r.correlationId, r.body]);
    }
    return out;
  };
  const produceCode = (body: KafkaStruct) => ((body.responses as KafkaStruct[])[0]!.partitionResponses as KafkaStruct[])[0]!.errorCode;
  const fetched = (body: KafkaStruct) => ((body.responses as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!;

  it('160 pipelined 1 MiB Produce requests behind a long-poll Fetch, the client not reading: the broker stops reading at the bound; all answered in order once the Fetch is', async () => {
    const raw = await RawKafka.connect(broker.kafkaPort);
    try {
      raw.socket.pause(); // reads no response until told to
      const count = 160;
      const requests = [longPoll(1, 0), ...Array.from({ length: count }, (_, i) => largeProduce(2 + i, MiB))];
      for (const r of requests) raw.socket.write(r);
      const total = requests.reduce((n, r) => n + r.length, 0);

      // The broker read up to the bound and stopped: the rest backs up in the client's socket. (What the
      // kernel buffers between them, here at most 32 MiB received and 4 MiB sent, is not the broker's.)
      const unsent = await settled(raw);
      expect(unsent).toBeGreaterThan(total - MAX_PENDING_REQUEST_BYTES - MiB - 48 * MiB);
      const held = await pending();
      expect(held).toBeGreaterThanOrEqual(MAX_PENDING_REQUEST_BYTES);
      expect(held).toBeLessThanOrEqual(MAX_PENDING_REQUEST_BYTES + READ_SLACK);

      // The Fetch is answered (a record arrives); the client reads: every request answered, in order.
      await c.command('PUBLISH', { topic: HELD, partition: 0, message: 'wake' });
      raw.socket.resume();
      const got = await replies(raw, [1, ...Array<number>(count).fill(0)], [11, ...Array<number>(count).fill(7)]);
      expect(got.map(([id]) => id)).toEqual(Array.from({ length: count + 1 }, (_, i) => 1 + i));
      expect([fetched(got[0]![1]).errorCode, fetched(got[0]![1]).highWatermark]).toEqual([0, 1]);
      expect(got.slice(1).every(([, body]) => produceCode(body) === UNKNOWN_TOPIC)).toBe(true);
      expect(raw.socket.writableLength).toBe(0);
      expect(await pending()).toBe(0);
    } finally {
      raw.socket.destroy();
    }
  });

  it('a request larger than the bound waits behind the one in flight, then is read whole and answered, the request after it too', async () => {
    const raw = await RawKafka.connect(broker.kafkaPort);
    try {
      const big = MAX_PENDING_REQUEST_BYTES + 4 * MiB;
      raw.socket.write(longPoll(1, 1));
      raw.socket.write(largeProduce(2, big));
      raw.socket.write(encodeRequest(apiByKey(18)!, 2, 3, 'raw', {}));
      await settled(raw);
      // Not read whole while the Fetch is in flight.
      const held = await pending();
      expect(held).toBeGreaterThanOrEqual(MAX_PENDING_REQUEST_BYTES);
      expect(held).toBeLessThan(big);

      await c.command('PUBLISH', { topic: HELD, partition: 1, message: 'wake' });
      const got = await replies(raw, [1, 0, 18], [11, 7, 2]);
      expect(got.map(([id]) => id)).toEqual([1, 2, 3]);
      expect([fetched(got[0]![1]).errorCode, fetched(got[0]![1]).highWatermark]).toEqual([0, 1]);
      expect(produceCode(got[1]![1])).toBe(UNKNOWN_TOPIC);
      expect(got[2]![1].errorCode).toBe(0);
      expect(await pending()).toBe(0);
    } finally {
      raw.socket.destroy();
    }
  });
});
