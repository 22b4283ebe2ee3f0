/**
 * The schemas obey the rules of the protocol's message descriptions, so a slip in a schema line fails here
 * and not as a shifted field in a client test: unique names and tags, tagged fields only in flexible
 * versions, nested fields inside their parent's versions, null defaults only where null is legal.
 */
import { describe, expect, it } from 'vitest';
import { KAFKA_APIS } from 'tributary-broker/kafka/protocol/apis.js';
import { ConsumerProtocolAssignment, ConsumerProtocolSubscription } from 'tributary-broker/kafka/protocol/consumer-protocol.js';
import { RequestHeader, ResponseHeader } from 'tributary-broker/kafka/protocol/headers.js';
import type { FieldSpec, MessageSchema, VersionRange } from 'tributary-broker/kafka/protocol/schema.js';

const SCHEMAS: MessageSchema[] = [
  ...KAFKA_APIS.flatMap((a) => [a.schema.request, a.schema.response]),
  ConsumerProtocolSubscription,
  ConsumerProtocolAssignment,
  RequestHeader,
  ResponseHeader,
];

const empty = (r: VersionRange) => r.min > r.max;
const within = (inner: VersionRange, outer: VersionRange) => empty(inner) || (inner.min >= outer.min && inner.max <= outer.max);
/** "N+" read as N up to the message's last version. */
const clamp = (r: VersionRange, s: MessageSchema): VersionRange => ({ min: r.min, max: Math.min(r.max, s.versions.max) });

function lint(schema: MessageSchema, fields: readonly FieldSpec[], parent: VersionRange, path: string, out: string[]): void {
  const names = new Set<string>();
  const tags = new Set<number>();
  for (const f of fields) {
    const at = `${path}.${f.name}`;
    if (names.has(f.name)) out.push(`${at}: duplicate name`);
    names.add(f.name);
    if (empty(f.versions) || f.versions.min > schema.versions.max) out.push(`${at}: in no version of the message`);
    if (!within(clamp(f.versions, schema), clamp(parent, schema))) out.push(`${at}: versions outside its parent's`);
    if (!empty(f.nullable) && (f.nullable.max < f.versions.min || f.nullable.min > f.versions.max)) out.push(`${at}: nullable in no version it exists`);
    if (f.tag !== undefined) {
      if (tags.has(f.tag)) out.push(`${at}: duplicate tag ${f.tag}`);
      tags.add(f.tag);
      if (!within(clamp(f.versions, schema), clamp(schema.flexible, schema))) out.push(`${at}: tagged outside flexible versions`);
    }
    if (f.default === null && !(f.nullable.min <= f.versions.min && f.nullable.max >= Math.min(f.versions.max, schema.versions.max))) {
      out.push(`${at}: defaults to null where it is not nullable`);
    }
    if (typeof f.type !== 'string') lint(schema, f.type, f.versions, at, out);
  }
}

describe('schema rules', () => {
  it('every schema', () => {
    const problems: string[] = [];
    for (const s of SCHEMAS) lint(s, s.fields, s.versions, s.name, problems);
    expect(problems).toEqual([]);
  });

  it('a request and its response share the API key, version range and flexible versions', () => {
    for (const a of KAFKA_APIS) {
      expect(a.schema.response.apiKey).toBe(a.key);
      expect(a.schema.response.versions).toEqual(a.schema.request.versions);
      expect(a.schema.response.flexible).toEqual(a.schema.request.flexible);
      expect(new Set(KAFKA_APIS.map((x) => x.key)).size).toBe(KAFKA_APIS.length);
    }
  });
});
