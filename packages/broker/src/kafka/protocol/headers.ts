/**
 * Request and response headers, and which header version a message version uses. Request header v1 is
 * api key, api version, correlation id and a nullable client id; v2 (flexible requests) appends tagged
 * fields, the client id keeping its classic int16 length. Response header v0 is the correlation id; v1
 * (flexible responses) appends tagged fields, except that ApiVersions always answers with v0.
 */
import { type KafkaApi, apiByKey, API_VERSIONS_KEY, isFlexible } from './apis.js';
import { type DecodeOptions, readMessage, writeMessage } from './codec.js';
import { KafkaCodecError } from './errors.js';
import { KafkaReader } from './reader.js';
import { f, type KafkaStruct, message } from './schema.js';
import { KafkaWriter } from './writer.js';

/** Kafka's UNSUPPORTED_VERSION (error-codes.ts has the table). */
const UNSUPPORTED_VERSION_CODE = 35;

export const RequestHeader = message({
  name: 'RequestHeader',
  apiKey: -1,
  kind: 'data',
  versions: '0-2',
  flexible: '2+',
  fields: [
    f('requestApiKey', 'int16'),
    f('requestApiVersion', 'int16'),
    f('correlationId', 'int32'),
    f('clientId', 'string', '1+', { nullable: '1+', default: null, classic: true }),
  ],
});

export const ResponseHeader = message({
  name: 'ResponseHeader',
  apiKey: -1,
  kind: 'data',
  versions: '0-1',
  flexible: '1+',
  fields: [f('correlationId', 'int32')],
});

export function requestHeaderVersion(api: KafkaApi, version: number): 1 | 2 {
  return isFlexible(api, version) ? 2 : 1;
}

export function responseHeaderVersion(api: KafkaApi, version: number): 0 | 1 {
  if (api.key === API_VERSIONS_KEY) return 0;
  return isFlexible(api, version) ? 1 : 0;
}

export interface KafkaRequestHeader {
  apiKey: number;
  apiVersion: number;
  correlationId: number;
  clientId: string | null;
  unknownTaggedFields?: KafkaStruct['unknownTaggedFields'];
}

export interface DecodedRequest {
  header: KafkaRequestHeader;
  api: KafkaApi;
  body: KafkaStruct;
}

/** The three leading fields every request header version shares: enough to answer an error. */
export function peekRequestHeader(frame: Buffer): { apiKey: number; apiVersion: number; correlationId: number } {
  const r = new KafkaReader(frame);
  r.field = 'RequestHeader';
  return { apiKey: r.int16(), apiVersion: r.int16(), correlationId: r.int32() };
}

/**
 * Decodes one request frame (the bytes after the size prefix). An unknown API key or a version outside the
 * schema fails with unknown_api / unsupported_version carrying the correlation id, so the listener can still
 * reply (or close, for an unknown key, as Kafka does). A version the schema has but the API table does not
 * advertise decodes: refusing it is the listener's call. Header and body share one decode budget
 * (MAX_DECODED_ENTRIES, `too_many_entries` past it); unknown tagged fields are skipped unless `unknownTags`
 * is 'keep' (tests that round-trip them).
 */
export function decodeRequest(frame: Buffer, options: DecodeOptions = {}): DecodedRequest {
  const o: DecodeOptions = { unknownTags: options.unknownTags ?? 'skip' };
  const peek = peekRequestHeader(frame);
  const api = apiByKey(peek.apiKey);
  if (!api) throw new KafkaCodecError('unknown_api', `api key ${peek.apiKey}`, { ...peek, at: 0 });
  const { versions } = api.schema.request;
  if (peek.apiVersion < versions.min || peek.apiVersion > versions.max) {
    throw new KafkaCodecError('unsupported_version', `${api.name} v${peek.apiVersion}`, { ...peek, at: 2 });
  }
  const r = new KafkaReader(frame);
  const h = readMessage(RequestHeader, requestHeaderVersion(api, peek.apiVersion), r, o);
  const body = readMessage(api.schema.request, peek.apiVersion, r, o);
  r.field = api.schema.request.name;
  if (r.pos !== frame.length) throw r.fail('trailing_bytes', `${frame.length - r.pos} bytes left after ${api.name} v${peek.apiVersion}`);
  const header: KafkaRequestHeader = { ...peek, clientId: (h.clientId as string | null) ?? null };
  if (h.unknownTaggedFields) header.unknownTaggedFields = h.unknownTaggedFields;
  return { header, api, body };
}

function framedParts(write: (w: KafkaWriter) => void): Buffer[] {
  const w = new KafkaWriter();
  w.int32(0); // size, patched below (the first part always holds it: nothing is referenced before it)
  write(w);
  const parts = w.finishParts();
  parts[0]!.writeInt32BE(w.length - 4, 0);
  return parts;
}

function framed(write: (w: KafkaWriter) => void): Buffer {
  const parts = framedParts(write);
  return parts.length === 1 ? parts[0]! : Buffer.concat(parts);
}

/** A request frame, size prefix included (what a client sends; the tests' peer and future tooling). */
export function encodeRequest(api: KafkaApi, version: number, correlationId: number, clientId: string | null, body: KafkaStruct): Buffer {
  return framed((w) => {
    writeMessage(RequestHeader, requestHeaderVersion(api, version), { requestApiKey: api.key, requestApiVersion: version, correlationId, clientId }, w);
    writeMessage(api.schema.request, version, body, w);
  });
}

/** A response frame, size prefix included, with the header version the API and version call for. */
export function encodeResponse(api: KafkaApi, version: number, correlationId: number, body: KafkaStruct): Buffer {
  return framed((w) => {
    writeMessage(ResponseHeader, responseHeaderVersion(api, version), { correlationId }, w);
    writeMessage(api.schema.response, version, body, w);
  });
}

/**
 * The same frame as parts for socket.writev / cork: record runs of 1 KiB and more are the caller's buffers,
 * not copies (a Fetch response serves stored batches as they are).
 */
export function encodeResponseParts(api: KafkaApi, version: number, correlationId: number, body: KafkaStruct): Buffer[] {
  return framedParts((w) => {
    writeMessage(ResponseHeader, responseHeaderVersion(api, version), { correlationId }, w);
    writeMessage(api.schema.response, version, body, w);
  });
}

/**
 * The reply to an ApiVersions request of a version the broker does not know (KIP-511): version 0 of the
 * response, header v0, error UNSUPPORTED_VERSION, and the ApiVersions range the broker does support, so the
 * client can retry with a version both know.
 */
export function encodeApiVersionsUnsupported(correlationId: number): Buffer {
  const api = apiByKey(API_VERSIONS_KEY)!;
  return encodeResponse(api, 0, correlationId, {
    errorCode: UNSUPPORTED_VERSION_CODE,
    apiKeys: [{ apiKey: api.key, minVersion: api.minVersion, maxVersion: api.maxVersion }],
  });
}

/** Decodes a response frame (no size prefix): the client side, for tests and tools. */
export function decodeResponse(api: KafkaApi, version: number, frame: Buffer): { correlationId: number; body: KafkaStruct } {
  const r = new KafkaReader(frame);
  const h = readMessage(ResponseHeader, responseHeaderVersion(api, version), r);
  const body = readMessage(api.schema.response, version, r);
  r.field = api.schema.response.name;
  if (r.pos !== frame.length) throw r.fail('trailing_bytes', `${frame.length - r.pos} bytes left after ${api.name} v${version} response`);
  return { correlationId: h.correlationId as number, body };
}
