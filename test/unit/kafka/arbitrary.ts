/**
 * fast-check arbitraries derived from a MessageSchema: one value generator for every message and version,
 * so the round-trip property covers each schema without per-message code.
 */
import fc from 'fast-check';
import { type FieldSpec, inRange, type KafkaStruct, type KafkaValue, type MessageSchema, type ScalarType } from 'tributary-broker/kafka/protocol/schema.js';

const buf = (max: number) => fc.uint8Array({ maxLength: max }).map((u) => Buffer.from(u));

function scalar(type: ScalarType): fc.Arbitrary<KafkaValue> {
  switch (type) {
    case 'bool':
      return fc.boolean();
    case 'int8':
      return fc.integer({ min: -128, max: 127 });
    case 'int16':
      return fc.integer({ min: -32768, max: 32767 });
    case 'uint16':
      return fc.integer({ min: 0, max: 0xffff });
    case 'int32':
      return fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 });
    case 'uint32':
      return fc.integer({ min: 0, max: 0xffffffff });
    case 'int64':
      return fc.oneof(fc.constantFrom(-1, 0, Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER), fc.maxSafeInteger());
    case 'bigint64':
      return fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n });
    case 'float64':
      return fc.double({ noNaN: true }).filter((d) => !Object.is(d, -0));
    case 'string':
      return fc.string({ maxLength: 12, unit: 'binary' });
    case 'bytes':
    case 'records':
      return buf(40);
    case 'uuid':
      return fc.uuid();
  }
}

function fieldArb(field: FieldSpec, version: number, flexible: boolean, depth: number): fc.Arbitrary<KafkaValue> {
  const nullable = inRange(version, field.nullable);
  const one = (n: boolean): fc.Arbitrary<KafkaValue> => {
    const base = typeof field.type === 'string' ? scalar(field.type) : structArb(field.type, version, flexible, depth + 1);
    return n ? fc.option(base, { nil: null, freq: 4 }) : base;
  };
  if (field.array) {
    const items = fc.array(one(false), { maxLength: depth > 1 ? 2 : 3 });
    return nullable ? fc.option(items, { nil: null, freq: 4 }) : items;
  }
  return one(nullable);
}

/** Unknown tags a newer peer might send: above any tag the schemas use, unique and ascending. */
const unknownTags = fc
  .uniqueArray(fc.integer({ min: 20, max: 400 }), { maxLength: 2 })
  .chain((tags) => fc.tuple(...tags.sort((a, b) => a - b).map((tag) => buf(6).map((data) => ({ tag, data })))));

export function structArb(fields: readonly FieldSpec[], version: number, flexible: boolean, depth = 0): fc.Arbitrary<KafkaStruct> {
  const parts: Record<string, fc.Arbitrary<KafkaValue | undefined>> = {};
  for (const field of fields) {
    if (!inRange(version, field.versions)) continue;
    const arb = fieldArb(field, version, flexible, depth);
    // A tagged field may be absent on the wire; an absent one decodes as absent.
    parts[field.name] = field.tag !== undefined && flexible ? fc.option(arb, { nil: undefined }) : arb;
  }
  const extra = flexible ? fc.option(unknownTags, { nil: undefined, freq: 3 }) : fc.constant(undefined);
  return fc.tuple(fc.record(parts), extra).map(([rec, unknown]) => {
    const out: KafkaStruct = {};
    for (const [k, v] of Object.entries(rec)) if (v !== undefined) out[k] = v;
    if (unknown && unknown.length > 0) out.unknownTaggedFields = unknown;
    return out;
  });
}

export function messageArb(schema: MessageSchema, version: number): fc.Arbitrary<KafkaStruct> {
  return structArb(schema.fields, version, inRange(version, schema.flexible));
}

export function schemaVersions(schema: MessageSchema): number[] {
  const out: number[] = [];
  for (let v = schema.versions.min; v <= schema.versions.max; v++) out.push(v);
  return out;
}
