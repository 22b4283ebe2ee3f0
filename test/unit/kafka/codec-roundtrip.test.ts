/**
 * One property over every schema and version: a value generated from the schema encodes, decodes to the same
 * value (unknown tagged fields included) and re-encodes to the same bytes; the same through the framed
 * request/response path with its header version.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { KAFKA_APIS } from 'tributary-broker/kafka/protocol/apis.js';
import { decodeMessage, encodeMessage } from 'tributary-broker/kafka/protocol/codec.js';
import {
  ConsumerProtocolAssignment,
  ConsumerProtocolSubscription,
  decodeAssignment,
  decodeSubscription,
  encodeAssignment,
  encodeSubscription,
} from 'tributary-broker/kafka/protocol/consumer-protocol.js';
import { decodeRequest, decodeResponse, encodeRequest, encodeResponse, encodeResponseParts } from 'tributary-broker/kafka/protocol/headers.js';
import { Produce } from 'tributary-broker/kafka/protocol/messages/produce.js';
import type { MessageOf } from 'tributary-broker/kafka/protocol/schema.js';
import { messageArb, schemaVersions } from './arbitrary.js';

const RUNS = 40;

describe('every schema and version round-trips', () => {
  for (const api of KAFKA_APIS) {
    for (const kind of ['request', 'response'] as const) {
      const schema = api.schema[kind];
      it(`${schema.name} v${schema.versions.min}-v${schema.versions.max}`, () => {
        for (const version of schemaVersions(schema)) {
          fc.assert(
            fc.property(messageArb(schema, version), fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), (value, correlationId) => {
              const bytes = encodeMessage(schema, version, value);
              const back = decodeMessage(schema, version, bytes);
              expect(back).toEqual(value);
              expect(encodeMessage(schema, version, back)).toEqual(bytes);
              if (kind === 'request') {
                const frame = encodeRequest(api, version, correlationId, 'client-1', value);
                // Kept on request: the broker's default skips unknown tags (codec-budget.test.ts).
                const req = decodeRequest(frame.subarray(4), { unknownTags: 'keep' });
                expect(req.header).toEqual({ apiKey: api.key, apiVersion: version, correlationId, clientId: 'client-1' });
                expect(req.body).toEqual(value);
              } else {
                const frame = encodeResponse(api, version, correlationId, value);
                expect(frame.readInt32BE(0)).toBe(frame.length - 4);
                expect(decodeResponse(api, version, frame.subarray(4))).toEqual({ correlationId, body: value });
              }
            }),
            { numRuns: RUNS },
          );
        }
      });
    }
  }

  it('consumer protocol subscription and assignment, v0-v3, each with its version prefix', () => {
    for (const [schema, enc, dec] of [
      [ConsumerProtocolSubscription, encodeSubscription, decodeSubscription],
      [ConsumerProtocolAssignment, encodeAssignment, decodeAssignment],
    ] as const) {
      for (const version of schemaVersions(schema)) {
        fc.assert(
          fc.property(messageArb(schema, version), (value) => {
            const bytes = enc(version, value);
            expect(bytes.readInt16BE(0)).toBe(version);
            expect(dec(bytes)).toEqual({ version, value });
          }),
          { numRuns: RUNS },
        );
      }
    }
  });
});

describe('defaults', () => {
  it('a field left out is written as its default, and fields a version lacks are ignored', () => {
    const api = KAFKA_APIS.find((a) => a.name === 'Metadata')!;
    const bytes = encodeMessage(api.schema.response, 1, { brokers: [{ nodeId: 1, host: 'h', port: 9092 }], topics: [], clusterId: 'ignored-in-v1' });
    expect(decodeMessage(api.schema.response, 1, bytes)).toEqual({ brokers: [{ nodeId: 1, host: 'h', port: 9092, rack: null }], controllerId: -1, topics: [] });
  });

  it('a subscription from a newer member is read as the newest version known, its tail ignored', () => {
    const v3 = encodeSubscription(3, { topics: ['a', 'b'], userData: null, ownedPartitions: [], generationId: 4, rackId: 'r1' });
    const newer = Buffer.concat([v3, Buffer.from([1, 2, 3])]);
    newer.writeInt16BE(5, 0);
    expect(decodeSubscription(newer)).toEqual({
      version: 5,
      value: { topics: ['a', 'b'], userData: null, ownedPartitions: [], generationId: 4, rackId: 'r1' },
    });
  });
});

describe('record runs are written by reference', () => {
  it('a Fetch response as parts keeps each large record run as the caller buffer, and concatenates to the same frame', () => {
    const api = KAFKA_APIS.find((a) => a.name === 'Fetch')!;
    const big = Buffer.alloc(5000, 7);
    const small = Buffer.alloc(10, 1);
    for (const version of [4, 11, 12]) {
      const body = {
        responses: [
          {
            topic: 't',
            partitions: [
              { partitionIndex: 0, highWatermark: 1, records: big },
              { partitionIndex: 1, highWatermark: 1, records: small },
              { partitionIndex: 2, highWatermark: 1, records: big },
            ],
          },
        ],
      };
      const parts = encodeResponseParts(api, version, 9, body);
      expect(parts.filter((p) => p === big)).toHaveLength(2);
      expect(parts).not.toContain(small);
      const frame = Buffer.concat(parts);
      expect(frame).toEqual(encodeResponse(api, version, 9, body));
      expect(frame.readInt32BE(0)).toBe(frame.length - 4);
      const back = decodeResponse(api, version, frame.subarray(4)).body as { responses: { partitions: { records: Buffer }[] }[] };
      expect(back.responses[0]!.partitions.map((p) => p.records.length)).toEqual([5000, 10, 5000]);
    }
  });
});

describe('typed values', () => {
  it('MessageOf gives a schema its value type: names and shapes are checked, the codec takes and returns it', () => {
    type ProduceRequest = MessageOf<typeof Produce.request>;
    const req: ProduceRequest = { transactionalId: null, acks: -1, timeoutMs: 1000, topicData: [{ name: 't', partitionData: [{ index: 0, records: null }] }] };
    // @ts-expect-error a misspelt field is a type error
    const typo: ProduceRequest = { ack: 1 };
    // @ts-expect-error so is a value of the wrong type
    const wrong: ProduceRequest = { topicData: [{ name: 3 }] };
    expect([typo, wrong]).toHaveLength(2);
    const back = decodeMessage(Produce.request, 7, encodeMessage(Produce.request, 7, req)) as ProduceRequest;
    expect(back.topicData?.[0]?.partitionData?.[0]?.index).toBe(0);
  });
});
