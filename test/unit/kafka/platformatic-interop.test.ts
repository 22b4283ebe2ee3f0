/**
 * Byte fixtures from @platformatic/kafka, no server: for every API and every version it implements inside our
 * schema ranges (the flexible ones above all), its request bytes decode with ours (fields equal, same bytes
 * on re-encode) and our responses parse with its parsers. Its header choices (request header v2 with tagged
 * fields, response header v1 except for ApiVersions) must be ours too.
 */
import { describe, expect, it } from 'vitest';
import { splitRecordBatches } from 'tributary-protocol/record-batch/split.js';
import { KAFKA_APIS } from 'tributary-broker/kafka/protocol/apis.js';
import { KAFKA_ERRORS } from 'tributary-broker/kafka/protocol/error-codes.js';
import { decodeRequest, encodeRequest, encodeResponse, requestHeaderVersion, responseHeaderVersion } from 'tributary-broker/kafka/protocol/headers.js';
import { type FieldSpec, inRange, type KafkaStruct, type KafkaValue } from 'tributary-broker/kafka/protocol/schema.js';
import { PLATFORMATIC_CASES } from './platformatic-cases.js';
import { platformaticErrors, platformaticParse, platformaticPick, platformaticRequest, platformaticVersions } from './platformatic.js';

/**
 * Version-specific mistakes in the client's own writers (checked against the protocol): our strict decoder
 * refuses them instead of misreading. None is a version the client picks against our advertised ranges.
 */
const PEER_BUGS: Record<string, string> = {
  'Metadata request v11': 'writes include_cluster_authorized_operations, which v11 removed',
  'DescribeConfigs request v2': 'writes include_documentation, which only v3+ has',
  'DescribeConfigs response v2': 'reads config_type and documentation, which only v3+ has',
};

/** Our value as its parsers return it: int64 as bigint, only the fields of the version, no tagged fields. */
function asParsed(fields: readonly FieldSpec[], v: number, value: KafkaStruct, flexible: boolean): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of fields) {
    if (!inRange(v, f.versions) || (f.tag !== undefined && flexible) || value[f.name] === undefined) continue;
    const one = (x: KafkaValue): unknown => {
      if (x === null) return null;
      if (typeof f.type !== 'string') return asParsed(f.type, v, x as KafkaStruct, flexible);
      return f.type === 'int64' ? BigInt(x as number) : x;
    };
    const val = value[f.name]!;
    out[f.name] = f.array && Array.isArray(val) ? val.map(one) : one(val);
  }
  return out;
}

const covered: string[] = [];

describe('@platformatic/kafka interop', () => {
  for (const c of PLATFORMATIC_CASES) {
    const api = KAFKA_APIS.find((a) => a.name === c.api)!;
    const versions = platformaticVersions(c.api).filter((v) => inRange(v, api.schema.request.versions));

    it(`${c.api} v${versions.join(',')}: its requests decode with ours, our responses parse with it`, () => {
      expect(versions.length).toBeGreaterThan(0);
      for (const v of versions) {
        const sent = platformaticRequest(c.api, v, c.args(v), 500 + v, 'platformatic-client');
        expect(sent.apiKey).toBe(api.key);
        expect(requestHeaderVersion(api, v), `${c.api} v${v} request header`).toBe(sent.hasRequestHeaderTaggedFields ? 2 : 1);
        expect(responseHeaderVersion(api, v), `${c.api} v${v} response header`).toBe(sent.hasResponseHeaderTaggedFields ? 1 : 0);

        const reqBug = PEER_BUGS[`${c.api} request v${v}`];
        if (reqBug) {
          expect(() => decodeRequest(sent.frame.subarray(4)), reqBug).toThrow(expect.objectContaining({ reason: 'trailing_bytes' }));
        } else {
          const req = decodeRequest(sent.frame.subarray(4));
          expect(req.header).toEqual({ apiKey: api.key, apiVersion: v, correlationId: 500 + v, clientId: 'platformatic-client' });
          expect(req.body, `${c.api} request v${v}`).toMatchObject(c.request(v));
          expect(encodeRequest(api, v, 500 + v, 'platformatic-client', req.body), `${c.api} v${v} re-encode`).toEqual(sent.frame);
          covered.push(`${c.api} request v${v}`);
        }

        if (PEER_BUGS[`${c.api} response v${v}`]) continue;
        const ours = c.response(v);
        const parsed = platformaticParse(sent, encodeResponse(api, v, 500 + v, ours));
        const derived = asParsed(api.schema.response.fields, v, ours, inRange(v, api.schema.response.flexible));
        expect(parsed, `${c.api} response v${v}`).toMatchObject(c.parsed ? c.parsed(v, derived) : derived);
        covered.push(`${c.api} response v${v}`);
      }
    });
  }

  it('every version it would pick against our advertised ranges is covered both ways', () => {
    const picks = KAFKA_APIS.map((a) => ({ name: a.name, v: platformaticPick(a.name, a.minVersion, a.maxVersion) }));
    expect(picks.filter((p) => p.v === null)).toEqual([]);
    for (const p of picks) {
      expect(covered).toContain(`${p.name} request v${p.v}`);
      expect(covered).toContain(`${p.name} response v${p.v}`);
    }
    expect(new Set(PLATFORMATIC_CASES.map((c) => c.api))).toEqual(new Set(KAFKA_APIS.map((a) => a.name)));
  });

  it('Fetch v12 records reach it as the RecordBatch v2 bytes we stored', () => {
    const c = PLATFORMATIC_CASES.find((k) => k.api === 'Fetch')!;
    const api = KAFKA_APIS.find((a) => a.name === 'Fetch')!;
    const sent = platformaticRequest('Fetch', 12, c.args(12), 1, 'p');
    const parsed = platformaticParse(sent, encodeResponse(api, 12, 1, c.response(12))) as {
      responses: { partitions: { records: { firstOffset: bigint; records: { offsetDelta: number; value: Buffer }[] }[] }[] }[];
    };
    const batches = parsed.responses[0]!.partitions[0]!.records;
    expect(batches).toHaveLength(1);
    expect(batches[0]!.firstOffset).toBe(10n);
    expect(batches[0]!.records.map((r) => [r.offsetDelta, r.value.toString()])).toEqual([
      [0, 'a'],
      [1, 'b'],
    ]);
  });

  it('its Produce v9 batch is a RecordBatch v2 our codec reads, producer id and transactional bit included', () => {
    const c = PLATFORMATIC_CASES.find((k) => k.api === 'Produce')!;
    const sent = platformaticRequest('Produce', 9, c.args(9), 1, 'p');
    const body = decodeRequest(sent.frame.subarray(4)).body as { topicData: { partitionData: { records: Buffer }[] }[] };
    const split = splitRecordBatches(body.topicData[0]!.partitionData[0]!.records);
    expect(split.stop).toBeNull();
    expect(split.batches[0]!.header()).toMatchObject({ producerId: 7, producerEpoch: 2, isTransactional: true, recordCount: 1 });
    expect(split.batches[0]!.decode().records[0]!.value?.toString()).toBe('v1');
  });

  it('it misreads what follows a non-empty tagged-field section: the listener must leave tagged fields out for it', () => {
    // Its tagged-field reader does not walk (tag, size, bytes) entries, so a Fetch v12 partition carrying
    // CurrentLeader shifts the partition after it. The codec writes a tagged field only when it is given.
    const c = PLATFORMATIC_CASES.find((k) => k.api === 'Fetch')!;
    const api = KAFKA_APIS.find((a) => a.name === 'Fetch')!;
    const sent = platformaticRequest('Fetch', 12, c.args(12), 1, 'p');
    const value = c.response(12);
    const parts = (value.responses as { partitions: KafkaStruct[] }[])[0]!.partitions;
    parts.push({ ...parts[0]!, partitionIndex: 1, records: null });
    const secondIndex = () => {
      try {
        const parsed = platformaticParse(sent, encodeResponse(api, 12, 1, value)) as { responses: { partitions: { partitionIndex: number }[] }[] };
        return parsed.responses[0]!.partitions[1]?.partitionIndex;
      } catch {
        return 'threw';
      }
    };
    expect(secondIndex()).toBe(1);
    parts[0]!.currentLeader = { leaderId: 1, leaderEpoch: 2 };
    expect(secondIndex()).not.toBe(1);
  });

  it('the error table agrees with its generated table on every code both know (name and retriable)', () => {
    const mismatches: string[] = [];
    const byCode = new Map(Object.values(platformaticErrors).map((e) => [e.code, e]));
    for (const [name, spec] of Object.entries(KAFKA_ERRORS)) {
      const theirs = byCode.get(spec.code);
      if (!theirs) {
        mismatches.push(`${spec.code} ${name}: unknown to it`);
        continue;
      }
      if (theirs.id !== name || theirs.canRetry !== spec.retriable)
        mismatches.push(`${spec.code} ${name}/${spec.retriable} vs ${theirs.id}/${theirs.canRetry}`);
    }
    expect(mismatches).toEqual([]);
  });
});
