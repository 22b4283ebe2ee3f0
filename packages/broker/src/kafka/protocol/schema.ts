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

export type FieldType = ScalarType | readonly FieldShape[];

/** A field of any name and type (what the codec walks). */
export interface FieldShape {
  readonly name: string;
  /** A scalar, or the fields of a nested struct. */
  readonly type: FieldType;
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

/** A field whose name and type are kept as literal types, from which StructOf derives the value type. */
export interface FieldSpec<N extends string = string, T extends FieldType = FieldType, A extends boolean = boolean> extends FieldShape {
  readonly name: N;
  readonly type: T;
  readonly array: A;
}

export interface MessageSchema<F extends readonly FieldSpec[] = readonly FieldSpec[]> {
  readonly name: string;
  readonly apiKey: number;
  readonly kind: 'request' | 'response' | 'data';
  readonly versions: VersionRange;
  readonly flexible: VersionRange;
  readonly fields: F;
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

type ScalarValue<T> = T extends 'bool'
  ? boolean
  : T extends 'bigint64'
    ? bigint
    : T extends 'string' | 'uuid'
      ? string
      : T extends 'bytes' | 'records'
        ? Buffer
        : number;
type ElementOf<T> = T extends readonly FieldSpec[] ? StructOf<T> : ScalarValue<T>;
type ValueOf<F> = F extends FieldSpec<string, infer T, infer A> ? (A extends true ? ElementOf<T>[] : ElementOf<T>) | null : never;

/**
 * The value type a schema's fields describe, for typed access to decoded messages and typo-checked input.
 * Every field is optional (which ones a version carries is a runtime fact) and may be null where nullable.
 */
export type StructOf<F extends readonly FieldSpec[]> = { [K in F[number] as K['name']]?: ValueOf<K> } & { unknownTaggedFields?: RawTaggedField[] };

/** The request or response value type of a message schema: `MessageOf<typeof Produce.request>`. */
export type MessageOf<S> = S extends MessageSchema<infer F> ? StructOf<F> : never;

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

function make<N extends string, T extends FieldType, A extends boolean>(name: N, type: T, array: A, v: string, o: FieldOptions): FieldSpec<N, T, A> {
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
export function f<const N extends string, const T extends ScalarType>(name: N, type: T, v = '0+', o: FieldOptions = {}): FieldSpec<N, T, false> {
  return make(name, type, false, v, o);
}

/** An array of scalars or of structs. */
export function arr<const N extends string, const T extends FieldType>(name: N, of: T, v = '0+', o: FieldOptions = {}): FieldSpec<N, T, true> {
  return make(name, of, true, v, o);
}

/** A nested struct (not an array). */
export function struct<const N extends string, const T extends readonly FieldSpec[]>(
  name: N,
  fields: T,
  v = '0+',
  o: FieldOptions = {},
): FieldSpec<N, T, false> {
  return make(name, fields, false, v, o);
}

export interface MessageOptions<F extends readonly FieldSpec[]> {
  name: string;
  apiKey: number;
  kind: MessageSchema['kind'];
  versions: string;
  /** First flexible version ('none' when never flexible). */
  flexible: string;
  fields: F;
}

export function message<const F extends readonly FieldSpec[]>(o: MessageOptions<F>): MessageSchema<F> {
  return { name: o.name, apiKey: o.apiKey, kind: o.kind, versions: versions(o.versions), flexible: versions(o.flexible), fields: o.fields };
}

/** A request and its response, which share the API key, version range and flexible versions. */
export interface ApiSchema<Req extends readonly FieldSpec[] = readonly FieldSpec[], Res extends readonly FieldSpec[] = readonly FieldSpec[]> {
  readonly apiKey: number;
  readonly name: string;
  readonly request: MessageSchema<Req>;
  readonly response: MessageSchema<Res>;
}

export function api<const Req extends readonly FieldSpec[], const Res extends readonly FieldSpec[]>(
  apiKey: number,
  name: string,
  range: string,
  flexible: string,
  request: Req,
  response: Res,
): ApiSchema<Req, Res> {
  return {
    apiKey,
    name,
    request: message({ name: `${name}Request`, apiKey, kind: 'request', versions: range, flexible, fields: request }),
    response: message({ name: `${name}Response`, apiKey, kind: 'response', versions: range, flexible, fields: response }),
  };
}
