/**
 * What one request may cost the broker on the Kafka port (docs/kafka.md, "Bad input"): a request within the
 * frame limit that declares tens of millions of array elements or tagged fields is refused by the decode
 * budget, and the broker keeps serving with its memory where it was; a Produce batch of millions of empty
 * headers is refused by its request's budget before they are built. Before authentication a frame is at
 * most 512 KiB and requests are handled one at a time, so pipelined logins queue one password check.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { crc32cRange } from 'tributary-protocol/record-batch/crc32c.js';
import { sizeOfVarint, writeVarint } from 'tributary-protocol/record-batch/varint.js';
import { apiByKey } from 'tributary-broker/kafka/protocol/apis.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import { decodeResponse, encodeRequest } from 'tributary-broker/kafka/protocol/headers.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { peakGrowth } from '../../helpers/raw-batch.js';
import { RawKafka } from '../../helpers/raw-kafka.js';
import { removeDir, tempDir } from '../../helpers/util.js';
import { addUser } from '../security/pki.js';

/** A size-prefixed frame of `body`. */
function framed(body: Buffer): Buffer {
  const size = Buffer.alloc(4);
  size.writeInt32BE(body.length);
  return Buffer.concat([size, body]);
}

function uvarint(n: number): Buffer {
  const out: number[] = [];
  for (; n >= 0x80; n = Math.floor(n / 128)) out.push((n & 0x7f) | 0x80);
  out.push(n);
  return Buffer.from(out);
}

/** Metadata v1 whose topic array declares `count` empty names (2 bytes each), framed. */
function metadataV1(count: number): Buffer {
  const body = Buffer.alloc(14 + count * 2);
  let at = body.writeInt16BE(3, 0);
  at = body.writeInt16BE(1, at);
  at = body.writeInt32BE(9, at);
  at = body.writeInt16BE(-1, at); // null client id
  body.writeInt32BE(count, at); // the names are zero bytes: int16 length 0 each
  return framed(body);
}

/** ApiVersions v3 (request header v2) whose header carries `count` empty unknown tagged fields, framed. */
function apiVersionsWithHeaderTags(count: number): Buffer {
  const head = Buffer.alloc(10);
  head.writeInt16BE(18, 0);
  head.writeInt16BE(3, 2);
  head.writeInt32BE(5, 4);
  head.writeInt16BE(-1, 8); // null client id
  const body = Buffer.from([0x01, 0x01, 0x00]); // two empty compact strings, no tagged fields
  return framed(Buffer.concat([head, uvarint(count), Buffer.alloc(count * 2), body]));
}

/**
 * An uncompressed RecordBatch v2 of `records` records, each with a null key, an empty value and `headers`
 * headers of empty key and value: 2 bytes per header on the wire.
 */
function headerHeavyBatch(records: number, headers: number): Buffer {
  const parts: Buffer[] = [Buffer.alloc(61)];
  for (let i = 0; i < records; i++) {
    const body = 1 + 1 + sizeOfVarint(i) + 1 + 1 + sizeOfVarint(headers) + headers * 2;
    const r = Buffer.alloc(sizeOfVarint(body) + body); // zero-filled: attributes, timestampDelta and every header's lengths are 0
    let at = writeVarint(r, 0, body) + 2;
    at = writeVarint(r, at, i); // offsetDelta
    at = writeVarint(r, at, -1); // null key
    at = writeVarint(r, at, 0); // empty value
    writeVarint(r, at, headers);
    parts.push(r);
  }
  const b = Buffer.concat(parts);
  b.writeInt32BE(b.length - 12, 8); // batchLength
  b.writeInt32BE(-1, 12); // partitionLeaderEpoch
  b[16] = 2; // magic
  b.writeInt32BE(records - 1, 23); // lastOffsetDelta
  b.writeBigInt64BE(-1n, 43); // producerId
  b.writeInt16BE(-1, 51);
  b.writeInt32BE(-1, 53);
  b.writeInt32BE(records, 57);
  b.writeUInt32BE(crc32cRange(b, 21, b.length), 17);
  return b;
}

async function residentBytes(broker: BrokerProcess): Promise<number> {
  const m = /^tributary_process_resident_memory_bytes (\d+)/m.exec((await broker.health('/metrics')).body);
  if (!m) throw new Error('no tributary_process_resident_memory_bytes in /metrics');
  return Number(m[1]);
}

/** Sends `bytes` on a new connection; resolves whether the broker answered or closed it. */
async function outcomeOf(port: number, bytes: Buffer): Promise<'answered' | 'closed'> {
  const raw = await RawKafka.connect(port);
  raw.socket.write(bytes);
  const outcome = await Promise.race([raw.closed.then(() => 'closed' as const), raw.next().then(() => 'answered' as const)]);
  raw.socket.destroy();
  return outcome;
}

describe('the decode budget on the Kafka port', () => {
  let broker: BrokerProcess;
  let c: Connection;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--kafka-port', '0', '--offsets-topic-partitions', '1', '--log-level', 'info'] });
    c = await broker.connect();
    await c.command('CREATE', { topic: 'limits', partitions: 2 });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  async function stillServing(): Promise<void> {
    const raw = await RawKafka.connect(broker.kafkaPort);
    try {
      const md = await raw.call(3, 1, { topics: [{ name: 'limits' }] });
      expect(((md.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[]).length).toBe(2);
    } finally {
      raw.socket.destroy();
    }
    expect((await broker.health('/live')).status).toBe(200);
  }

  it('a 60 MB Metadata request declaring 30M empty topic names closes its connection; the broker serves on, its memory where it was', async () => {
    const before = await residentBytes(broker);
    const mark = broker.stderr.length;
    expect(await outcomeOf(broker.kafkaPort, metadataV1(30_000_000))).toBe('closed');
    await expect.poll(() => broker.stderr.slice(mark)).toMatch(/too_many_entries.*request not understood|request not understood.*too_many_entries/);
    await stillServing();
    // The 60 MB frame itself was buffered; the 30M names were never built (1.8 GB and an abort before).
    expect(await residentBytes(broker)).toBeLessThan(before + 256 * 1024 * 1024);
  });

  it('so does an ApiVersions request whose header declares 30M empty tagged fields', async () => {
    const before = await residentBytes(broker);
    const mark = broker.stderr.length;
    expect(await outcomeOf(broker.kafkaPort, apiVersionsWithHeaderTags(30_000_000))).toBe('closed');
    await expect.poll(() => broker.stderr.slice(mark)).toMatch(/too_many_entries/);
    await stillServing();
    expect(await residentBytes(broker)).toBeLessThan(before + 256 * 1024 * 1024);
  });

  it('a Produce batch of 8M empty headers (16 MB, within the frame limit) is MESSAGE_TOO_LARGE with nothing appended, its memory bounded; a few headers per record are taken', {
    timeout: 120_000,
  }, async () => {
    await c.command('CREATE', { topic: 'headers', partitions: 1 });
    const produce = (raw: RawKafka, records: Buffer) =>
      raw.call(0, 7, { transactionalId: null, acks: -1, timeoutMs: 5000, topicData: [{ name: 'headers', partitionData: [{ index: 0, records }] }] });
    const answerOf = (res: KafkaStruct) => ((res.responses as KafkaStruct[])[0]!.partitionResponses as KafkaStruct[])[0]!;
    const end = async (raw: RawKafka) =>
      Number(
        (
          (
            (await raw.call(2, 5, { isolationLevel: 0, topics: [{ name: 'headers', partitions: [{ partitionIndex: 0, timestamp: -1 }] }] }))
              .topics as KafkaStruct[]
          )[0]!.partitions as KafkaStruct[]
        )[0]!.offset,
      );
    const raw = await RawKafka.connect(broker.kafkaPort);
    try {
      const batch = headerHeavyBatch(122, 65_535); // each record within the log's 65,535 headers
      const growth = peakGrowth(broker);
      expect(answerOf(await produce(raw, batch)).errorCode).toBe(kafkaErrorCode('MESSAGE_TOO_LARGE'));
      // Built as objects, the 8M headers took 1.4 GB and were all appended.
      expect(growth()).toBeLessThan(512);
      expect(await end(raw)).toBe(0);
      expect(answerOf(await produce(raw, headerHeavyBatch(1000, 3))).errorCode).toBe(0);
      expect(await end(raw)).toBe(1000);
    } finally {
      raw.socket.destroy();
    }
    await stillServing();
  });

  it('Metadata answers each topic it is asked for once, however often the request names it (as Kafka does)', async () => {
    const raw = await RawKafka.connect(broker.kafkaPort);
    try {
      const names = Array.from({ length: 1000 }, (_, i) => ({ name: i % 2 === 0 ? 'limits' : 'nope' }));
      const md = await raw.call(3, 1, { topics: names });
      expect((md.topics as KafkaStruct[]).map((t) => [t.name, (t.partitions as KafkaStruct[]).length])).toEqual([
        ['limits', 2],
        ['nope', 0],
      ]);
    } finally {
      raw.socket.destroy();
    }
  });
});

describe('before authentication on the Kafka port', () => {
  let dir: string;
  let broker: BrokerProcess;
  let token: string;
  const plain = (user: string, password: string) => Buffer.from(`\0${user}\0${password}`);

  beforeAll(async () => {
    dir = await tempDir('tributary-kafka-limits-');
    const config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, ['authentication: true', 'authTimeoutMs: 60000', ''].join('\n'));
    token = addUser(config, 'app', ['topic.read', 'topic.write', 'admin']);
    broker = await BrokerProcess.start({ args: ['--config', config, '--kafka-port', '0', '--offsets-topic-partitions', '1', '--log-level', 'info'] });
  });

  afterAll(async () => {
    await broker?.dispose();
    if (dir) await removeDir(dir);
  });

  /** A connection logged in as app with SaslHandshake v1 and SaslAuthenticate v2. */
  async function login(): Promise<RawKafka> {
    const raw = await RawKafka.connect(broker.kafkaPort);
    expect((await raw.call(17, 1, { mechanism: 'PLAIN' })).errorCode).toBe(0);
    expect((await raw.call(36, 2, { authBytes: plain('app', token) })).errorCode).toBe(0);
    return raw;
  }

  const failuresOf = (principal: string, from: number) =>
    broker.stderr
      .slice(from)
      .split('\n')
      .filter((l) => l.includes('authentication failed') && l.includes(`"principal":"${principal}"`)).length;

  it('a frame above 512 KiB closes the connection (60 MB of header tagged fields, or 600 KB); below it is answered; after the login the frame limit is the usual one', async () => {
    const mark = broker.stderr.length;
    expect(await outcomeOf(broker.kafkaPort, apiVersionsWithHeaderTags(30_000_000))).toBe('closed');
    expect(await outcomeOf(broker.kafkaPort, apiVersionsWithHeaderTags(300_000))).toBe('closed'); // 600 KB, within the decode budget
    expect(await outcomeOf(broker.kafkaPort, apiVersionsWithHeaderTags(200_000))).toBe('answered'); // 400 KB
    await expect.poll(() => broker.stderr.slice(mark)).toMatch(/frame too large before authentication/);
    const raw = await login();
    try {
      // 2.4 MB of names: one answer (the names are one topic's).
      const md = await raw.call(3, 1, { topics: Array.from({ length: 300_000 }, () => ({ name: 'absent' })) });
      expect((md.topics as KafkaStruct[]).map((t) => t.errorCode)).toEqual([kafkaErrorCode('UNKNOWN_TOPIC_OR_PARTITION')]);
    } finally {
      raw.socket.destroy();
    }
    expect((await broker.health('/live')).status).toBe(200);
  });

  it('pipelined SaslAuthenticate requests are handled one at a time: one password check, one failure, the connection closed; a login elsewhere succeeds', async () => {
    const mark = broker.stderr.length;
    const attacker = await RawKafka.connect(broker.kafkaPort);
    const frames = [encodeRequest(apiByKey(17)!, 1, 1, 'x', { mechanism: 'PLAIN' })];
    for (let i = 0; i < 255; i++) frames.push(encodeRequest(apiByKey(36)!, 2, 2 + i, 'x', { authBytes: plain('guessed', `guess-${i}`) }));
    attacker.socket.write(Buffer.concat(frames));
    expect(decodeResponse(apiByKey(17)!, 1, await attacker.next()).body.errorCode).toBe(0);
    const refused = decodeResponse(apiByKey(36)!, 2, await attacker.next());
    expect(refused).toMatchObject({ correlationId: 2, body: { errorCode: kafkaErrorCode('SASL_AUTHENTICATION_FAILED') } });
    await attacker.closed;
    // Whatever the attacker queued would run before this login's check (first come, first served).
    const raw = await login();
    raw.socket.destroy();
    expect(failuresOf('guessed', mark)).toBe(1);
  });
});
