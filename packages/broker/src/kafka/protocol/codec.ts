/**
 * The one encoder and decoder, derived from a MessageSchema. Fields outside the version are skipped on both
 * sides; a field the caller leaves out is written as its default (the listener fills only what it knows).
 */
import { KafkaCodecError } from './errors.js';
import { isUuid, KafkaReader, ZERO_UUID } from './reader.js';
import { type FieldSpec, inRange, type KafkaStruct, type KafkaValue, type MessageSchema, type RawTaggedField, type ScalarType } from './schema.js';
import { KafkaWriter } from './writer.js';

interface Ctx {
  version: number;
  flexible: boolean;
  /** Decoding only: DecodeOptions.unknownTags is 'skip'. */
  skipUnknownTags?: boolean;
}

export interface DecodeOptions {
  /**
   * Tagged fields the schema does not know: kept raw in unknownTaggedFields (the default: a decode and
   * re-encode is lossless), or skipped, as the broker does with requests (nothing reads them, and a section
   * of many empty ones would cost an object and a copy each).
   */
  unknownTags?: 'keep' | 'skip';
}

function checkVersion(schema: MessageSchema, version: number, at: number): void {
  if (!Number.isInteger(version) || !inRange(version, schema.versions)) {
    throw new KafkaCodecError('unsupported_version', `${schema.name} has no version ${version}`, { message: schema.name, version, at });
  }
}

// ---------------------------------------------------------------------------------------------- decode

/**
 * Decodes one message body of `version` from `buf[start, end)`. Strict: every byte must be consumed, so a
 * schema that disagrees with the sender fails loudly instead of yielding shifted values.
 */
export function decodeMessage(schema: MessageSchema, version: number, buf: Buffer, start = 0, end = buf.length, o: DecodeOptions = {}): KafkaStruct {
  const r = new KafkaReader(buf, start, end);
  const v = readMessage(schema, version, r, o);
  r.field = schema.name;
  if (r.pos !== end) throw r.fail('trailing_bytes', `${end - r.pos} bytes left after ${schema.name} v${version}`);
  return v;
}

/** Decodes from a reader, leaving it after the message (for headers followed by a body). */
export function readMessage(schema: MessageSchema, version: number, r: KafkaReader, o: DecodeOptions = {}): KafkaStruct {
  checkVersion(schema, version, r.pos);
  return readStruct(schema.fields, { version, flexible: inRange(version, schema.flexible), skipUnknownTags: o.unknownTags === 'skip' }, r, schema.name);
}

/**
 * Decodes the top-level fields while bytes remain: a payload that ends at a field boundary leaves the later
 * fields absent instead of failing. Only for non-flexible payloads some peers cut short (the consumer
 * protocol's subscription: @platformatic/kafka sends v1 without owned partitions); a field cut in the
 * middle still fails.
 */
export function readMessagePrefix(schema: MessageSchema, version: number, r: KafkaReader): KafkaStruct {
  checkVersion(schema, version, r.pos);
  const ctx = { version, flexible: inRange(version, schema.flexible) };
  if (ctx.flexible) throw new KafkaCodecError('invalid_value', `${schema.name} v${version} is flexible: no prefix decode`, { message: schema.name, version });
  const out: KafkaStruct = {};
  for (const field of schema.fields) {
    if (r.remaining === 0) break;
    if (inRange(version, field.versions)) out[field.name] = readField(field, ctx, r, `${schema.name}.${field.name}`);
  }
  return out;
}

function readStruct(fields: readonly FieldSpec[], ctx: Ctx, r: KafkaReader, path: string): KafkaStruct {
  const out: KafkaStruct = {};
  for (const field of fields) {
    if (!inRange(ctx.version, field.versions)) continue;
    if (field.tag !== undefined && ctx.flexible) continue;
    out[field.name] = readField(field, ctx, r, `${path}.${field.name}`);
  }
  if (ctx.flexible) readTaggedFields(fields, ctx, r, path, out);
  return out;
}

function readTaggedFields(fields: readonly FieldSpec[], ctx: Ctx, r: KafkaReader, path: string, out: KafkaStruct): void {
  r.field = `${path}.<tagged fields>`;
  const at = r.pos;
  const count = r.uvarint();
  if (count > r.remaining) throw r.fail('length_beyond_frame', `${count} tagged fields with ${r.remaining} bytes left`);
  r.charge(count, 'tagged fields', at);
  for (let i = 0; i < count; i++) {
    r.field = `${path}.<tagged fields>`;
    const tag = r.uvarint();
    const size = r.uvarint();
    if (size > r.remaining) throw r.fail('length_beyond_frame', `tagged field ${tag} of ${size} bytes with ${r.remaining} left`);
    const known = fields.find((f) => f.tag === tag && inRange(ctx.version, f.versions));
    if (!known) {
      // Kept raw (unless skipped): a newer peer's field survives a decode and re-encode untouched.
      if (ctx.skipUnknownTags) r.pos += size;
      else (out.unknownTaggedFields ??= []).push({ tag, data: Buffer.from(r.slice(size)) });
      continue;
    }
    const end = r.pos + size;
    const sub = new KafkaReader(r.buf, r.pos, end, r.budget);
    out[known.name] = readField(known, ctx, sub, `${path}.${known.name}`);
    if (sub.pos !== end) throw sub.fail('bad_tagged_field', `tagged field ${tag} declared ${size} bytes, its value took ${sub.pos - r.pos}`);
    r.pos = end;
  }
}

function compactIn(field: FieldSpec, ctx: Ctx): boolean {
  return ctx.flexible && !field.classic;
}

function readField(field: FieldSpec, ctx: Ctx, r: KafkaReader, path: string): KafkaValue {
  r.field = path;
  const nullable = inRange(ctx.version, field.nullable);
  if (field.array) {
    const at = r.pos;
    const n = r.length(compactIn(field, ctx) ? 'compact' : 'int32', nullable, 'array');
    if (n === -1) return null;
    r.charge(n, 'array', at);
    const items: KafkaValue[] = new Array(n);
    for (let i = 0; i < n; i++) items[i] = readOne(field, ctx, r, `${path}[${i}]`, false);
    return items;
  }
  return readOne(field, ctx, r, path, nullable);
}

function readOne(field: FieldSpec, ctx: Ctx, r: KafkaReader, path: string, nullable: boolean): KafkaValue {
  r.field = path;
  if (typeof field.type !== 'string') {
    if (nullable) {
      // A nullable struct is preceded by an int8 presence marker (-1 null, 1 present).
      if (r.int8() < 0) return null;
    }
    return readStruct(field.type, ctx, r, path);
  }
  return readScalar(field.type, compactIn(field, ctx), nullable, r);
}

function readScalar(type: ScalarType, compact: boolean, nullable: boolean, r: KafkaReader): KafkaValue {
  switch (type) {
    case 'bool':
      return r.bool();
    case 'int8':
      return r.int8();
    case 'int16':
      return r.int16();
    case 'uint16':
      return r.uint16();
    case 'int32':
      return r.int32();
    case 'uint32':
      return r.uint32();
    case 'int64':
      return r.int64();
    case 'bigint64':
      return r.bigint64();
    case 'float64':
      return r.float64();
    case 'uuid':
      return r.uuid();
    case 'string': {
      const n = r.length(compact ? 'compact' : 'int16', nullable, 'string');
      return n === -1 ? null : r.utf8(n);
    }
    case 'bytes':
    case 'records': {
      const n = r.length(compact ? 'compact' : 'int32', nullable, type);
      return n === -1 ? null : r.slice(n);
    }
  }
}

// ---------------------------------------------------------------------------------------------- encode

/** Encodes `value` as `version` of the message. Fields the version lacks are ignored. */
export function encodeMessage(schema: MessageSchema, version: number, value: KafkaStruct): Buffer {
  const w = new KafkaWriter();
  writeMessage(schema, version, value, w);
  return w.finish();
}

export function writeMessage(schema: MessageSchema, version: number, value: KafkaStruct, w: KafkaWriter): void {
  checkVersion(schema, version, 0);
  writeStruct(schema.fields, { version, flexible: inRange(version, schema.flexible) }, value, w, schema.name);
}

function invalid(path: string, detail: string): KafkaCodecError {
  return new KafkaCodecError('invalid_value', `${path}: ${detail}`, { field: path });
}

function writeStruct(fields: readonly FieldSpec[], ctx: Ctx, value: KafkaStruct, w: KafkaWriter, path: string): void {
  if (value === null || typeof value !== 'object' || Array.isArray(value) || Buffer.isBuffer(value)) throw invalid(path, 'expected a struct');
  const tagged: RawTaggedField[] = [];
  for (const field of fields) {
    if (!inRange(ctx.version, field.versions)) continue;
    const v = value[field.name];
    if (field.tag !== undefined && ctx.flexible) {
      // Written only when given: an absent tagged field is its default by definition.
      if (v === undefined) continue;
      const sub = new KafkaWriter(64);
      writeField(field, ctx, v, sub, `${path}.${field.name}`);
      tagged.push({ tag: field.tag, data: sub.finish() });
      continue;
    }
    writeField(field, ctx, v === undefined ? defaultOf(field, ctx) : v, w, `${path}.${field.name}`);
  }
  if (!ctx.flexible) return;
  for (const u of value.unknownTaggedFields ?? []) {
    if (tagged.some((t) => t.tag === u.tag)) throw invalid(path, `unknown tagged field ${u.tag} repeats a known tag`);
    tagged.push(u);
  }
  tagged.sort((a, b) => a.tag - b.tag);
  w.uvarint(tagged.length);
  for (const t of tagged) {
    w.uvarint(t.tag);
    w.uvarint(t.data.length);
    w.raw(t.data);
  }
}

/** The value of a field the caller did not give: its declared default, else the type's zero. */
export function defaultOf(field: FieldSpec, ctx: { version: number }): KafkaValue {
  if (field.default !== undefined) return field.default;
  if (field.array) return [];
  if (typeof field.type !== 'string') return inRange(ctx.version, field.nullable) ? null : {};
  switch (field.type) {
    case 'bool':
      return false;
    case 'bigint64':
      return 0n;
    case 'string':
      return '';
    case 'bytes':
    case 'records':
      return inRange(ctx.version, field.nullable) ? null : Buffer.alloc(0);
    case 'uuid':
      return ZERO_UUID;
    default:
      return 0;
  }
}

function writeField(field: FieldSpec, ctx: Ctx, v: KafkaValue, w: KafkaWriter, path: string): void {
  const nullable = inRange(ctx.version, field.nullable);
  const compact = compactIn(field, ctx);
  if (field.array) {
    if (v === null) {
      if (!nullable) throw invalid(path, 'null array where the field is not nullable in this version');
      if (compact) w.uvarint(0);
      else w.int32(-1);
      return;
    }
    if (!Array.isArray(v)) throw invalid(path, 'expected an array');
    if (compact) w.uvarint(v.length + 1);
    else w.int32(v.length);
    for (let i = 0; i < v.length; i++) writeOne(field, ctx, v[i]!, w, `${path}[${i}]`, false);
    return;
  }
  writeOne(field, ctx, v, w, path, nullable);
}

function writeOne(field: FieldSpec, ctx: Ctx, v: KafkaValue, w: KafkaWriter, path: string, nullable: boolean): void {
  if (typeof field.type !== 'string') {
    if (nullable) {
      w.int8(v === null ? -1 : 1);
      if (v === null) return;
    } else if (v === null) throw invalid(path, 'null struct where the field is not nullable in this version');
    writeStruct(field.type, ctx, v as KafkaStruct, w, path);
    return;
  }
  writeScalar(field.type, compactIn(field, ctx), nullable, v, w, path);
}

function int(v: KafkaValue, min: number, max: number, path: string, type: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) throw invalid(path, `${String(v)} is not an ${type}`);
  return v;
}

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

function writeScalar(type: ScalarType, compact: boolean, nullable: boolean, v: KafkaValue, w: KafkaWriter, path: string): void {
  switch (type) {
    case 'bool':
      if (typeof v !== 'boolean') throw invalid(path, 'expected a boolean');
      w.bool(v);
      return;
    case 'int8':
      w.int8(int(v, -128, 127, path, type));
      return;
    case 'int16':
      w.int16(int(v, -32768, 32767, path, type));
      return;
    case 'uint16':
      w.uint16(int(v, 0, 0xffff, path, type));
      return;
    case 'int32':
      w.int32(int(v, -(2 ** 31), 2 ** 31 - 1, path, type));
      return;
    case 'uint32':
      w.uint32(int(v, 0, 0xffffffff, path, type));
      return;
    case 'int64':
      w.int64(BigInt(int(v, Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER, path, 'int64 (safe integer)')));
      return;
    case 'bigint64': {
      const b = typeof v === 'number' && Number.isSafeInteger(v) ? BigInt(v) : v;
      if (typeof b !== 'bigint' || b < INT64_MIN || b > INT64_MAX) throw invalid(path, `${String(v)} is not an int64`);
      w.int64(b);
      return;
    }
    case 'float64':
      if (typeof v !== 'number') throw invalid(path, 'expected a number');
      w.float64(v);
      return;
    case 'uuid':
      if (!isUuid(v)) throw invalid(path, 'expected a canonical uuid string');
      w.uuid(v);
      return;
    case 'string': {
      if (v === null) {
        writeNull(nullable, compact, 'int16', w, path);
        return;
      }
      if (typeof v !== 'string') throw invalid(path, 'expected a string');
      const b = Buffer.from(v, 'utf8');
      if (compact) w.uvarint(b.length + 1);
      else if (b.length > 0x7fff) throw invalid(path, `string of ${b.length} bytes exceeds the int16 length`);
      else w.int16(b.length);
      w.raw(b);
      return;
    }
    case 'bytes':
    case 'records': {
      if (v === null) {
        writeNull(nullable, compact, 'int32', w, path);
        return;
      }
      if (!(v instanceof Uint8Array)) throw invalid(path, 'expected a Buffer');
      if (compact) w.uvarint(v.length + 1);
      else w.int32(v.length);
      // Record runs can be megabytes of stored batches: referenced, not copied.
      const u8: Uint8Array = v;
      if (type === 'records') w.ref(Buffer.isBuffer(u8) ? u8 : Buffer.from(u8.buffer, u8.byteOffset, u8.length));
      else w.raw(v);
      return;
    }
  }
}

function writeNull(nullable: boolean, compact: boolean, classic: 'int16' | 'int32', w: KafkaWriter, path: string): void {
  if (!nullable) throw invalid(path, 'null where the field is not nullable in this version');
  if (compact) w.uvarint(0);
  else if (classic === 'int16') w.int16(-1);
  else w.int32(-1);
}
