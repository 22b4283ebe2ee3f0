/**
 * Hostile and broken input: every failure is a KafkaCodecError (or the frame splitter's frame_too_large)
 * with a precise reason, never an exception from Buffer and never a silently wrong value.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { apiByKey, KAFKA_APIS } from 'tributary-broker/kafka/protocol/apis.js';
import { decodeMessage, encodeMessage } from 'tributary-broker/kafka/protocol/codec.js';
import { KafkaCodecError, type KafkaCodecReason } from 'tributary-broker/kafka/protocol/errors.js';
import { KafkaFrameSplitter } from 'tributary-broker/kafka/protocol/frame.js';
import { decodeRequest, decodeResponse, encodeApiVersionsUnsupported, encodeRequest } from 'tributary-broker/kafka/protocol/headers.js';
import { KAFKA_ERRORS } from 'tributary-broker/kafka/protocol/error-codes.js';
import type { FieldSpec, KafkaStruct, MessageSchema } from 'tributary-broker/kafka/protocol/schema.js';
import { messageArb, schemaVersions } from './arbitrary.js';

const api = (name: string) => KAFKA_APIS.find((a) => a.name === name)!;

function codecError(fn: () => unknown): KafkaCodecError {
  try {
    fn();
  } catch (e) {
    if (e instanceof KafkaCodecError) return e;
    throw new Error(`expected a KafkaCodecError, got ${String(e)}`);
  }
  throw new Error('expected a KafkaCodecError, nothing was thrown');
}

function expectReason(fn: () => unknown, reason: KafkaCodecReason): KafkaCodecError {
  const e = codecError(fn);
  expect(e.reason).toBe(reason);
  expect(e).toBeInstanceOf(TributaryError);
  expect(e.code).toBe('invalid_parameter');
  return e;
}

const produce7 = encodeMessage(api('Produce').schema.request, 7, {
  transactionalId: 'tx',
  acks: -1,
  timeoutMs: 30000,
  topicData: [{ name: 'orders', partitionData: [{ index: 0, records: Buffer.from('batch-bytes') }] }],
});
const fetch12 = encodeMessage(api('Fetch').schema.response, 12, {
  throttleTimeMs: 0,
  errorCode: 0,
  sessionId: 0,
  responses: [
    {
      topic: 'orders',
      partitions: [
        {
          partitionIndex: 0,
          errorCode: 0,
          highWatermark: 10,
          currentLeader: { leaderId: 1, leaderEpoch: 3 },
          abortedTransactions: [{ producerId: 7n, firstOffset: 2 }],
          records: Buffer.from('rb'),
        },
      ],
    },
  ],
});
const metadata9 = encodeMessage(api('Metadata').schema.response, 9, {
  brokers: [{ nodeId: 1, host: 'localhost', port: 9092, rack: null }],
  clusterId: 'c',
  controllerId: 1,
  topics: [{ errorCode: 0, name: 't', isInternal: false, partitions: [{ partitionIndex: 0, leaderId: 1, replicaNodes: [1], isrNodes: [1] }] }],
});

describe('truncation', () => {
  const cases: [string, MessageSchema, number, Buffer][] = [
    ['Produce v7 request', api('Produce').schema.request, 7, produce7],
    ['Fetch v12 response', api('Fetch').schema.response, 12, fetch12],
    ['Metadata v9 response', api('Metadata').schema.response, 9, metadata9],
  ];
  for (const [name, schema, version, bytes] of cases) {
    it(`${name} cut at every byte fails as truncated or length_beyond_frame`, () => {
      expect(() => decodeMessage(schema, version, bytes)).not.toThrow();
      for (let cut = 0; cut < bytes.length; cut++) {
        const e = codecError(() => decodeMessage(schema, version, Buffer.from(bytes.subarray(0, cut))));
        expect(['truncated', 'length_beyond_frame']).toContain(e.reason);
        expect(e.fields.at).toBeLessThanOrEqual(cut);
      }
    });
  }

  it('every schema and version: any prefix of a valid encoding is refused, never decoded', () => {
    for (const a of KAFKA_APIS) {
      for (const schema of [a.schema.request, a.schema.response]) {
        for (const version of schemaVersions(schema)) {
          fc.assert(
            fc.property(messageArb(schema, version), fc.nat(), (value, n) => {
              const bytes = encodeMessage(schema, version, value);
              if (bytes.length === 0) return;
              const cut = n % bytes.length;
              const e = codecError(() => decodeMessage(schema, version, bytes.subarray(0, cut)));
              expect(['truncated', 'length_beyond_frame']).toContain(e.reason);
            }),
            { numRuns: 10 },
          );
        }
      }
    }
  });

  it('an extra byte after a message is trailing_bytes', () => {
    expectReason(() => decodeMessage(api('Produce').schema.request, 7, Buffer.concat([produce7, Buffer.from([0])])), 'trailing_bytes');
  });
});

describe('lengths', () => {
  // Produce v7 request: transactional id (int16 length) first, then acks, timeout, topics (int32 count).
  const schema = api('Produce').schema.request;

  it('a nullable string at -1 is null; -2 is negative_length', () => {
    const b = Buffer.from(produce7);
    b.writeInt16BE(-1, 0);
    // The two bytes of "tx" now sit where acks starts: the decode goes wrong later, but never silently.
    expect(() => decodeMessage(schema, 7, b)).toThrow(KafkaCodecError);
    const nul = encodeMessage(schema, 7, { transactionalId: null, acks: 1, timeoutMs: 1, topicData: [] });
    expect(decodeMessage(schema, 7, nul).transactionalId).toBeNull();
    const neg = Buffer.from(nul);
    neg.writeInt16BE(-2, 0);
    const e = expectReason(() => decodeMessage(schema, 7, neg), 'negative_length');
    expect(e.fields.field).toBe('ProduceRequest.transactionalId');
    expect(e.fields.at).toBe(0);
  });

  it('-1 on a field that is not nullable is unexpected_null', () => {
    const b = encodeMessage(schema, 7, { transactionalId: null, acks: 1, timeoutMs: 1, topicData: [] });
    b.writeInt32BE(-1, 8); // the topics array
    expectReason(() => decodeMessage(schema, 7, b), 'unexpected_null');
    const compact = encodeMessage(api('Metadata').schema.response, 9, { brokers: [], topics: [] });
    // v9: throttle (4 bytes) then the brokers compact array: 0 would be null
    compact[4] = 0;
    expectReason(() => decodeMessage(api('Metadata').schema.response, 9, compact), 'unexpected_null');
  });

  it('an array count or a byte length beyond the frame is refused before any allocation', () => {
    const b = encodeMessage(schema, 7, { transactionalId: null, acks: 1, timeoutMs: 1, topicData: [] });
    b.writeInt32BE(0x7fffffff, 8);
    expectReason(() => decodeMessage(schema, 7, b), 'length_beyond_frame');
    b.writeInt32BE(-7, 8);
    expectReason(() => decodeMessage(schema, 7, b), 'negative_length');
    const recordsAt = produce7.length - 'batch-bytes'.length - 4;
    const big = Buffer.from(produce7);
    big.writeInt32BE(2 ** 30, recordsAt);
    const e = expectReason(() => decodeMessage(schema, 7, big), 'length_beyond_frame');
    expect(e.fields.field).toBe('ProduceRequest.topicData[0].partitionData[0].records');
  });

  it('an unsigned varint over 5 bytes or above int32 is bad_varint', () => {
    const hb = api('Heartbeat').schema.request;
    expectReason(() => decodeMessage(hb, 4, Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0x01])), 'bad_varint');
    expectReason(() => decodeMessage(hb, 4, Buffer.from([0xff, 0xff, 0xff, 0xff, 0x0f])), 'bad_varint');
  });

  it('an int64 decoded as a number must be a safe integer', () => {
    const s = api('ListOffsets').schema.response;
    const b = encodeMessage(s, 1, { topics: [{ name: 't', partitions: [{ partitionIndex: 0, errorCode: 0, timestamp: -1, offset: 5 }] }] });
    for (const v of [2n ** 53n, -(2n ** 53n), 2n ** 60n, 2n ** 63n - 1n, -(2n ** 63n)]) {
      b.writeBigInt64BE(v, b.length - 8);
      expectReason(() => decodeMessage(s, 1, b), 'int64_out_of_range');
    }
    for (const v of [2n ** 53n - 1n, -(2n ** 53n) + 1n, 0n, -1n, 2n ** 32n, 2n ** 32n - 1n, -(2n ** 32n)]) {
      b.writeBigInt64BE(v, b.length - 8);
      expect((decodeMessage(s, 1, b).topics as KafkaStruct[])[0]!.partitions).toEqual([{ partitionIndex: 0, errorCode: 0, timestamp: -1, offset: Number(v) }]);
    }
    // Any int64, most near the edges of the safe range and of the halves: the number exactly, or refused.
    const edge = fc.constantFrom(0n, 2n ** 32n, 2n ** 53n, 2n ** 63n).chain((e) => fc.bigInt({ min: -3n, max: 3n }).map((d) => e + d));
    const int64 = fc.oneof(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), edge, edge.map((v) => -v)).filter((v) => v >= -(2n ** 63n) && v < 2n ** 63n);
    fc.assert(
      fc.property(int64, (v) => {
        b.writeBigInt64BE(v, b.length - 8);
        const safe = v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER);
        if (safe) expect(((decodeMessage(s, 1, b).topics as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!.offset).toBe(Number(v));
        else expectReason(() => decodeMessage(s, 1, b), 'int64_out_of_range');
      }),
      { numRuns: 2000 },
    );
  });

  it('no request field is an int64 checked safe: a request may carry any int64, answered for its partition or not used, never refused', () => {
    const checked: string[] = [];
    const walk = (fields: readonly FieldSpec[], path: string) => {
      for (const f of fields) {
        if (f.type === 'int64') checked.push(`${path}.${f.name}`);
        if (typeof f.type !== 'string') walk(f.type, `${path}.${f.name}`);
      }
    };
    for (const a of KAFKA_APIS) walk(a.schema.request.fields, a.name);
    expect(checked).toEqual([]);
  });

  it('OffsetCommit, TxnOffsetCommit and DeleteRecords read any int64 offset, retention time and commit timestamp whole', () => {
    const edges = [2n ** 63n - 1n, -(2n ** 63n), 2n ** 60n, -(2n ** 60n), 2n ** 53n, -(2n ** 53n), 2n ** 53n - 1n, 0n, -1n];
    const partitionOf = (body: KafkaStruct) => ((body.topics as KafkaStruct[])[0]!.partitions as KafkaStruct[])[0]!;
    for (const v of edges) {
      const commit = (version: number) =>
        decodeMessage(
          api('OffsetCommit').schema.request,
          version,
          encodeMessage(api('OffsetCommit').schema.request, version, {
            groupId: 'g',
            generationId: -1,
            memberId: '',
            retentionTimeMs: v,
            topics: [{ name: 't', partitions: [{ partitionIndex: 0, committedOffset: v, commitTimestamp: v, committedMetadata: null }] }],
          }),
        );
      const v1 = commit(1);
      expect([partitionOf(v1).committedOffset, partitionOf(v1).commitTimestamp]).toEqual([v, v]);
      const v2 = commit(2);
      expect([v2.retentionTimeMs, partitionOf(v2).committedOffset]).toEqual([v, v]);
      expect(partitionOf(commit(8)).committedOffset).toBe(v);
      const txn = api('TxnOffsetCommit').schema.request;
      const staged = { transactionalId: 'x', groupId: 'g', producerId: 1n, producerEpoch: 0, topics: [{ name: 't', partitions: [{ partitionIndex: 0, committedOffset: v, committedMetadata: null }] }] };
      for (const version of [0, 3]) expect(partitionOf(decodeMessage(txn, version, encodeMessage(txn, version, { ...staged, memberId: '' }))).committedOffset).toBe(v);
      const del = api('DeleteRecords').schema.request;
      const body = { topics: [{ name: 't', partitions: [{ partitionIndex: 0, offset: v }] }], timeoutMs: 1 };
      for (const version of [0, 2]) expect(partitionOf(decodeMessage(del, version, encodeMessage(del, version, body))).offset).toBe(v);
    }
  });

  it('random bytes against every schema: a decode or a KafkaCodecError, nothing else', () => {
    fc.assert(
      fc.property(fc.constantFrom(...KAFKA_APIS), fc.boolean(), fc.nat(), fc.uint8Array({ maxLength: 64 }), (a, req, n, bytes) => {
        const schema = req ? a.schema.request : a.schema.response;
        const versions = schemaVersions(schema);
        const version = versions[n % versions.length]!;
        try {
          decodeMessage(schema, version, Buffer.from(bytes));
        } catch (e) {
          expect(e).toBeInstanceOf(KafkaCodecError);
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe('tagged fields', () => {
  const schema = api('Fetch').schema.response;

  it('an unknown tag is kept raw and written back byte for byte; a known one decodes', () => {
    const value = decodeMessage(schema, 12, fetch12);
    const part = (value.responses as { partitions: Record<string, unknown>[] }[])[0]!.partitions[0]!;
    expect(part.currentLeader).toEqual({ leaderId: 1, leaderEpoch: 3 });
    part.unknownTaggedFields = [{ tag: 90, data: Buffer.from([1, 2, 3]) }];
    const withUnknown = encodeMessage(schema, 12, value);
    const back = decodeMessage(schema, 12, withUnknown);
    expect(back).toEqual(value);
    expect(encodeMessage(schema, 12, back)).toEqual(withUnknown);
    // A reader that skips them gets the rest right: drop the raw tag and the known fields stay equal.
    delete part.unknownTaggedFields;
    const stripped = back as typeof value;
    delete (stripped.responses as { partitions: Record<string, unknown>[] }[])[0]!.partitions[0]!.unknownTaggedFields;
    expect(stripped).toEqual(value);
  });

  it('a known tagged field whose size disagrees with its type is refused', () => {
    // ApiVersions v3 response: tag 1 is finalizedFeaturesEpoch, an int64.
    const av = api('ApiVersions').schema.response;
    const base = encodeMessage(av, 3, { errorCode: 0, apiKeys: [], throttleTimeMs: 0 }).subarray(0, -1);
    const tagged = (size: number, data: number[]) => Buffer.concat([base, Buffer.from([1, 1, size, ...data])]);
    expect(decodeMessage(av, 3, tagged(8, [0, 0, 0, 0, 0, 0, 0, 7])).finalizedFeaturesEpoch).toBe(7);
    // Too short: the value's read stops at the tag's end.
    expect(expectReason(() => decodeMessage(av, 3, tagged(4, [0, 0, 0, 7])), 'truncated').fields.field).toBe('ApiVersionsResponse.finalizedFeaturesEpoch');
    // Too long: the value leaves bytes of the tag unread.
    expect(expectReason(() => decodeMessage(av, 3, tagged(9, [0, 0, 0, 0, 0, 0, 0, 7, 0])), 'bad_tagged_field').fields.field).toBe(
      'ApiVersionsResponse.finalizedFeaturesEpoch',
    );
  });

  it('a tagged field count or size beyond the frame is length_beyond_frame', () => {
    const av = api('ApiVersions').schema.response;
    const base = encodeMessage(av, 3, { errorCode: 0, apiKeys: [], throttleTimeMs: 0 });
    expectReason(() => decodeMessage(av, 3, Buffer.concat([base.subarray(0, base.length - 1), Buffer.from([50])])), 'length_beyond_frame');
    const e = expectReason(() => decodeMessage(av, 3, Buffer.concat([base.subarray(0, base.length - 1), Buffer.from([1, 9, 100, 1])])), 'length_beyond_frame');
    expect(e.fields.field).toBe('ApiVersionsResponse.<tagged fields>');
  });
});

describe('encoder input', () => {
  it('values of the wrong type or out of range are invalid_value with the field path', () => {
    const s = api('Produce').schema.request;
    expect(expectReason(() => encodeMessage(s, 7, { acks: 70000 }), 'invalid_value').fields.field).toBe('ProduceRequest.acks');
    expectReason(() => encodeMessage(s, 7, { acks: 1.5 }), 'invalid_value');
    expectReason(() => encodeMessage(s, 7, { acks: 1, topicData: 'x' }), 'invalid_value');
    expect(expectReason(() => encodeMessage(s, 2, { acks: 1, topicData: [{ name: 'a' }, { name: null }] }), 'invalid_value').fields.field).toBe(
      'ProduceRequest.topicData[1].name',
    );
    expectReason(() => encodeMessage(s, 7, { acks: 1, topicData: [{ name: 'x'.repeat(40000) }] }), 'invalid_value');
    expectReason(() => encodeMessage(api('InitProducerId').schema.response, 1, { producerId: 2n ** 63n }), 'invalid_value');
    expectReason(() => encodeMessage(api('Metadata').schema.response, 10, { topics: [{ topicId: 'not-a-uuid' }] }), 'invalid_value');
    expectReason(() => encodeMessage(s, 12, {}), 'unsupported_version');
  });
});

describe('request frames', () => {
  it('an unknown api key or a version outside the schema fails with the correlation id, for the reply', () => {
    const frame = encodeRequest(apiByKey(12)!, 4, 77, 'c', { groupId: 'g', generationId: 1, memberId: 'm' }).subarray(4);
    const unknown = Buffer.from(frame);
    unknown.writeInt16BE(999, 0);
    const e = expectReason(() => decodeRequest(unknown), 'unknown_api');
    expect(e.fields).toMatchObject({ apiKey: 999, correlationId: 77 });
    const tooNew = Buffer.from(frame);
    tooNew.writeInt16BE(99, 2);
    expect(expectReason(() => decodeRequest(tooNew), 'unsupported_version').fields).toMatchObject({ apiKey: 12, apiVersion: 99, correlationId: 77 });
  });

  it('the splitter refuses a size above the maximum or a negative one before buffering, and one below a header', () => {
    const s = new KafkaFrameSplitter({ maxFrameBytes: 1024 });
    const big = Buffer.alloc(4);
    big.writeInt32BE(1025, 0);
    expect(() => s.push(big)).toThrow(expect.objectContaining({ code: 'frame_too_large' }));
    const neg = Buffer.alloc(4);
    neg.writeInt32BE(-5, 0);
    expect(() => new KafkaFrameSplitter().push(neg)).toThrow(expect.objectContaining({ code: 'frame_too_large' }));
    const tiny = Buffer.from([0, 0, 0, 3, 1, 2, 3]);
    expectReason(() => new KafkaFrameSplitter().push(tiny), 'frame_too_small');
  });

  it('the splitter yields whole frames from any chunking', () => {
    const frames = [0, 1, 2].map((i) => encodeRequest(apiByKey(18)!, 3, i, null, { clientSoftwareName: 'x', clientSoftwareVersion: String(i) }));
    const all = Buffer.concat(frames);
    fc.assert(
      fc.property(fc.uniqueArray(fc.integer({ min: 1, max: all.length - 1 }), { maxLength: 6 }), (cuts) => {
        const s = new KafkaFrameSplitter();
        const out: Buffer[] = [];
        let prev = 0;
        for (const c of [...cuts.sort((a, b) => a - b), all.length]) {
          for (const f of s.push(all.subarray(prev, c))) out.push(Buffer.from(f));
          prev = c;
        }
        expect(out.map((f) => decodeRequest(f).header.correlationId)).toEqual([0, 1, 2]);
        expect(s.pendingBytes).toBe(0);
      }),
    );
  });
});

describe('ApiVersions of an unknown version', () => {
  it('fails to decode with the correlation id, and the fallback reply is v0 with header v0 and the supported range', () => {
    const api = apiByKey(18)!;
    const frame = encodeRequest(api, 3, 42, 'c', { clientSoftwareName: 'x', clientSoftwareVersion: '1' }).subarray(4);
    const v9 = Buffer.from(frame);
    v9.writeInt16BE(9, 2);
    expect(expectReason(() => decodeRequest(v9), 'unsupported_version').fields).toMatchObject({ apiKey: 18, apiVersion: 9, correlationId: 42 });
    const reply = encodeApiVersionsUnsupported(42);
    expect(reply.readInt32BE(4)).toBe(42);
    expect(decodeResponse(api, 0, reply.subarray(4))).toEqual({
      correlationId: 42,
      body: { errorCode: KAFKA_ERRORS.UNSUPPORTED_VERSION!.code, apiKeys: [{ apiKey: 18, minVersion: api.minVersion, maxVersion: api.maxVersion }] },
    });
  });
});
