/**
 * The schema form: each Kafka message is data (fields with a name, a type, the versions that carry it, the
 * versions where it may be null, an optional tag) and one generic codec (codec.ts) encodes and decodes every
 * message and version from it. The shape follows the protocol's own message descriptions; names are the
 * camelCase of the documented field names.
 */

/** Inclusive version range; `max` is Infinity for "N+". */
export interface VersionRange {
  readonly min: number;
  readonly max: number;
}

export const NO_VERSIONS: VersionRange = { min: 1, max: 0 };

/**
 * int64 decodes to a number (checked safe: offsets, timestamps); bigint64 to a bigint (producer ids);
 * records is a length-prefixed RecordBatch v2 run kept as a Buffer slice.
 */
export type ScalarType = 'bool' | 'int8' | 'int16' | 'int32' | 'int64' | 'bigint64' | 'uint16' | 'uint32' | 'float64' | 'string' | 'bytes' | 'records' | 'uuid';

export interface FieldSpec {
  readonly name: string;
  /** A scalar, or the fields of a nested struct. */
  readonly type: ScalarType | readonly FieldSpec[];
  readonly array: boolean;
  readonly versions: VersionRange;
  readonly nullable: VersionRange;
  /** Tag number: the field lives in the tagged-field section (flexible versions only). */
  readonly tag?: number;
  /** Value written when the caller leaves the field out. */
  readonly default?: KafkaValue;
  /** Encoded with classic (non-compact) lengths even in flexible versions (the request header's client id). */
  readonly classic?: boolean;
}

export interface MessageSchema {
  readonly name: string;
  readonly apiKey: number;
  readonly kind: 'request' | 'response' | 'data';
  readonly versions: VersionRange;
  readonly flexible: VersionRange;
  readonly fields: readonly FieldSpec[];
}

export type KafkaValue = null | boolean | number | bigint | string | Buffer | KafkaValue[] | KafkaStruct;

/** A decoded struct. Tagged fields the schema does not know are kept, raw, in unknownTaggedFields. */
export interface KafkaStruct {
  [field: string]: KafkaValue | undefined;
  unknownTaggedFields?: RawTaggedField[];
}

export interface RawTaggedField extends KafkaStruct {
  tag: number;
  data: Buffer;
}

/** '3+', '3-5', '3' or 'none'. */
export function versions(spec: string): VersionRange {
  if (spec === 'none') return NO_VERSIONS;
  const plus = /^(\d+)\+$/.exec(spec);
  if (plus) return { min: Number(plus[1]), max: Number.POSITIVE_INFINITY };
  const range = /^(\d+)(?:-(\d+))?$/.exec(spec);
  if (!range) throw new Error(`bad version range '${spec}'`);
  return { min: Number(range[1]), max: Number(range[2] ?? range[1]) };
}

export function inRange(v: number, r: VersionRange): boolean {
  return v >= r.min && v <= r.max;
}

export interface FieldOptions {
  nullable?: string;
  tag?: number;
  default?: KafkaValue;
  classic?: boolean;
}

function make(name: string, type: ScalarType | readonly FieldSpec[], array: boolean, v: string, o: FieldOptions): FieldSpec {
  return {
    name,
    type,
    array,
    versions: versions(v),
    nullable: o.nullable ? versions(o.nullable) : NO_VERSIONS,
    ...(o.tag !== undefined ? { tag: o.tag } : {}),
    ...(o.default !== undefined ? { default: o.default } : {}),
    ...(o.classic ? { classic: true } : {}),
  };
}

/** A scalar field. */
export function f(name: string, type: ScalarType, v = '0+', o: FieldOptions = {}): FieldSpec {
  return make(name, type, false, v, o);
}

/** An array of scalars or of structs. */
export function arr(name: string, of: ScalarType | readonly FieldSpec[], v = '0+', o: FieldOptions = {}): FieldSpec {
  return make(name, of, true, v, o);
}

/** A nested struct (not an array). */
export function struct(name: string, fields: readonly FieldSpec[], v = '0+', o: FieldOptions = {}): FieldSpec {
  return make(name, fields, false, v, o);
}

export interface MessageOptions {
  name: string;
  apiKey: number;
  kind: MessageSchema['kind'];
  versions: string;
  /** First flexible version ('none' when never flexible). */
  flexible: string;
  fields: readonly FieldSpec[];
}

export function message(o: MessageOptions): MessageSchema {
  return { name: o.name, apiKey: o.apiKey, kind: o.kind, versions: versions(o.versions), flexible: versions(o.flexible), fields: o.fields };
}

/** A request and its response, which share the API key, version range and flexible versions. */
export interface ApiSchema {
  readonly apiKey: number;
  readonly name: string;
  readonly request: MessageSchema;
  readonly response: MessageSchema;
}

export function api(apiKey: number, name: string, range: string, flexible: string, request: readonly FieldSpec[], response: readonly FieldSpec[]): ApiSchema {
  return {
    apiKey,
    name,
    request: message({ name: `${name}Request`, apiKey, kind: 'request', versions: range, flexible, fields: request }),
    response: message({ name: `${name}Response`, apiKey, kind: 'response', versions: range, flexible, fields: response }),
  };
}
