/**
 * @platformatic/kafka as a test peer: its per-version request writers and response parsers (apis/), driven
 * through a stand-in connection that records what the client would send. The package declares Node 22;
 * on Node 20 it runs once Promise.withResolvers exists (test/helpers/with-resolvers.ts, imported first).
 */
import '../../helpers/with-resolvers.js';

export interface PWriter {
  buffer: Buffer;
  appendInt16(v: number): PWriter;
  appendArray(v: unknown[], entry: (w: PWriter, item: unknown) => void, compact?: boolean, trailingTags?: boolean): PWriter;
  appendBytes(v: Buffer, compact?: boolean): PWriter;
  appendInt32(v: number): PWriter;
  appendString(v: string | null, compact?: boolean): PWriter;
  appendTaggedFields(): PWriter;
  appendFrom(w: PWriter): PWriter;
  prependLength(): PWriter;
}
type Parser = (correlationId: number, apiKey: number, apiVersion: number, reader: unknown) => Record<string, unknown>;
type ApiFn = ((connection: unknown, ...args: unknown[]) => void) & { key: number; version: number };

interface PlatformaticModule {
  Writer: { create(): PWriter };
  Reader: { from(b: Buffer): unknown };
  protocolErrors: Record<string, { id: string; code: number; canRetry: boolean }>;
  [api: string]: unknown;
}

const pk = (await import('@platformatic/kafka')) as unknown as PlatformaticModule;
export const platformaticErrors = pk.protocolErrors;

/** The module key of an API version, as the client itself looks it up ("produceV9"). */
function modKey(name: string, version: number): string {
  return `${name[0]!.toLowerCase()}${name.slice(1)}V${version}`;
}

/** Its protocol Writer, to write what its clients write outside the apis/ folder. */
export function platformaticWriter(): PWriter {
  return pk.Writer.create();
}

export function platformaticVersions(name: string): number[] {
  const out: number[] = [];
  for (let v = 0; v < 20; v++) if (pk[modKey(name, v)]) out.push(v);
  return out;
}

/** The version the client settles on against an advertised range: the highest one it implements. */
export function platformaticPick(name: string, min: number, max: number): number | null {
  for (let v = max; v >= min; v--) if (pk[modKey(name, v)]) return v;
  return null;
}

export interface Sent {
  apiKey: number;
  apiVersion: number;
  /** The whole request frame (size prefix included), header written as the client's connection writes it. */
  frame: Buffer;
  hasRequestHeaderTaggedFields: boolean;
  hasResponseHeaderTaggedFields: boolean;
  parser: Parser;
}

/** Runs the client's API function against a stand-in connection and frames what it would send. */
export function platformaticRequest(name: string, version: number, args: unknown[], correlationId: number, clientId: string): Sent {
  const mod = pk[modKey(name, version)] as { api: ApiFn } | undefined;
  if (!mod) throw new Error(`@platformatic/kafka has no ${name} v${version}`);
  let sent: Sent | undefined;
  const connection = {
    send(apiKey: number, apiVersion: number, createPayload: () => PWriter, parser: Parser, reqTags: boolean, respTags: boolean) {
      const w = pk.Writer.create().appendInt16(apiKey).appendInt16(apiVersion).appendInt32(correlationId).appendString(clientId, false);
      if (reqTags) w.appendTaggedFields();
      w.appendFrom(createPayload()).prependLength();
      sent = { apiKey, apiVersion, frame: w.buffer, hasRequestHeaderTaggedFields: reqTags, hasResponseHeaderTaggedFields: respTags, parser };
    },
  };
  mod.api(connection, ...args, () => {});
  if (!sent) throw new Error(`${name} v${version} sent nothing`);
  return sent;
}

/** Parses a response frame (size prefix included) as the client's connection does. */
export function platformaticParse(sent: Sent, frame: Buffer): Record<string, unknown> {
  const correlationId = frame.readInt32BE(4);
  const start = 8 + (sent.hasResponseHeaderTaggedFields ? 1 : 0);
  return sent.parser(correlationId, sent.apiKey, sent.apiVersion, pk.Reader.from(frame.subarray(start)));
}
