/**
 * Byte fixtures from kafkajs 2.2.4, no server: for every API and version kafkajs implements and our schemas
 * cover, kafkajs's request bytes decode with ours (fields equal, and our re-encode gives the same bytes),
 * and our response bytes decode with kafkajs's decoder (fields equal).
 */
import { describe, expect, it } from 'vitest';
import { splitRecordBatches } from 'tributary-protocol/record-batch/split.js';
import { KAFKA_APIS } from 'tributary-broker/kafka/protocol/apis.js';
import { encodeMessage } from 'tributary-broker/kafka/protocol/codec.js';
import { decodeRequest, encodeRequest, encodeResponse } from 'tributary-broker/kafka/protocol/headers.js';
import { inRange } from 'tributary-broker/kafka/protocol/schema.js';
import { KAFKAJS_CASES } from './kafkajs-cases.js';
import { kafkajsDecodeResponse, kafkajsErrors, kafkajsRequestFrame, kafkajsVersions } from './kafkajs.js';
import { KAFKA_ERRORS, kafkaErrorName } from 'tributary-broker/kafka/protocol/error-codes.js';

/** Every (API, version) pair checked, for the coverage assertion below. */
const covered: string[] = [];

describe('kafkajs 2.2.4 interop', () => {
  for (const c of KAFKAJS_CASES) {
    const api = KAFKA_APIS.find((a) => a.name === c.api)!;
    const versions = kafkajsVersions(c.dir).filter((v) => inRange(v, api.schema.request.versions));

    it(`${c.api} requests v${versions.join(',')}: kafkajs encodes, we decode`, async () => {
      for (const v of versions) {
        const { args, expected } = c.request(v);
        const frame = await kafkajsRequestFrame(c.dir, v, args, 1000 + v, 'kafkajs-client');
        const req = decodeRequest(frame.subarray(4));
        expect(req.header).toEqual({ apiKey: api.key, apiVersion: v, correlationId: 1000 + v, clientId: 'kafkajs-client' });
        expect(req.api).toBe(api);
        expect(req.body, `${c.api} v${v}`).toMatchObject(expected);
        expect(encodeRequest(api, v, 1000 + v, 'kafkajs-client', req.body), `${c.api} v${v} re-encode`).toEqual(frame);
        covered.push(`${c.api} request v${v}`);
      }
    });

    it(`${c.api} responses v${versions.join(',')}: we encode, kafkajs decodes`, async () => {
      for (const v of versions) {
        const { ours, expected } = c.response(v);
        const body = encodeMessage(api.schema.response, v, ours);
        // None of these versions is flexible: response header v0 is the correlation id alone.
        const frame = encodeResponse(api, v, 7, ours);
        expect(frame.subarray(8)).toEqual(body);
        expect(frame.readInt32BE(4)).toBe(7);
        const decoded = await kafkajsDecodeResponse(c.dir, v, body);
        expect(decoded, `${c.api} v${v}`).toMatchObject(expected);
        if (v >= c.throttleFrom) expect(decoded.clientSideThrottleTime ?? decoded.throttleTime, `${c.api} v${v} throttle`).toBe(25);
        covered.push(`${c.api} response v${v}`);
      }
    });
  }

  it("kafkajs's produced RecordBatch (v3+) is a Buffer slice our RecordBatch v2 codec reads", async () => {
    const c = KAFKAJS_CASES.find((k) => k.api === 'Produce')!;
    for (const v of [3, 7]) {
      const frame = await kafkajsRequestFrame(c.dir, v, c.request(v).args, 1, 'k');
      const body = decodeRequest(frame.subarray(4)).body as { topicData: { partitionData: { records: Buffer }[] }[] };
      const records = body.topicData[0]!.partitionData[0]!.records;
      expect(records.buffer).toBe(frame.buffer); // a view of the frame, not a copy
      const split = splitRecordBatches(records);
      expect(split.stop).toBeNull();
      const batch = split.batches[0]!;
      expect(batch.header()).toMatchObject({ producerId: 7, producerEpoch: 2, baseSequence: 5, isTransactional: true, recordCount: 1 });
      const rec = batch.decode().records[0]!;
      expect({ key: rec.key?.toString(), value: rec.value?.toString(), headers: rec.headers.map((h) => [h.key, h.value?.toString()]) }).toEqual({
        key: 'k1',
        value: 'v1',
        headers: [['h', 'x']],
      });
    }
  });

  it('covers every API kafkajs implements that the table has, at each kafkajs version the schema covers', () => {
    const expected = KAFKAJS_CASES.flatMap((c) => {
      const api = KAFKA_APIS.find((a) => a.name === c.api)!;
      return kafkajsVersions(c.dir)
        .filter((v) => inRange(v, api.schema.request.versions))
        .flatMap((v) => [`${c.api} request v${v}`, `${c.api} response v${v}`]);
    });
    expect(covered.sort()).toEqual(expected.sort());
    // kafkajs has no IncrementalAlterConfigs (@platformatic/kafka's cases cover it).
    const notInKafkajs = new Set(['IncrementalAlterConfigs']);
    expect(new Set(KAFKAJS_CASES.map((c) => c.api))).toEqual(new Set(KAFKA_APIS.map((a) => a.name).filter((n) => !notInKafkajs.has(n))));
  });

  it("the error table agrees with kafkajs's on every code both know", () => {
    const mismatches: string[] = [];
    for (const e of kafkajsErrors.errorCodes) {
      const name = kafkaErrorName(e.code);
      if (!name) continue;
      if (KAFKA_ERRORS[name]!.retriable !== e.retriable) mismatches.push(`${e.code} ${name}: ours ${KAFKA_ERRORS[name]!.retriable}, kafkajs ${e.retriable}`);
    }
    expect(mismatches).toEqual([]);
  });
});
