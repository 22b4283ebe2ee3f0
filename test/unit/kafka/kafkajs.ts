/**
 * kafkajs 2.2.4 as an independent peer: its per-API request encoders and response decoders, loaded from
 * its protocol sources (test-only; packages never import it).
 */
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

interface KEncoder {
  buffer: Buffer;
}
export interface KRequest {
  apiKey: number;
  apiVersion: number;
  encode(): Promise<KEncoder>;
}
interface KResponse {
  decode(raw: Buffer): Promise<Record<string, unknown>>;
}
type KLong = { toString(): string };

const frameRequest = require('kafkajs/src/protocol/request') as (o: { correlationId: number; clientId: string; request: KRequest }) => Promise<KEncoder>;
export const Long = require('kafkajs/src/utils/long') as { fromValue(v: number | string): KLong };

/** The whole request frame kafkajs would put on the wire, size prefix included. */
export async function kafkajsRequestFrame(
  dir: string,
  version: number,
  args: Record<string, unknown>,
  correlationId: number,
  clientId: string,
): Promise<Buffer> {
  const make = require(`kafkajs/src/protocol/requests/${dir}/v${version}/request`) as (a: Record<string, unknown>) => KRequest;
  return (await frameRequest({ correlationId, clientId, request: make(args) })).buffer;
}

/** kafkajs's decode of a response body (the bytes after the correlation id). */
export async function kafkajsDecodeResponse(dir: string, version: number, body: Buffer): Promise<Record<string, unknown>> {
  const mod = require(`kafkajs/src/protocol/requests/${dir}/v${version}/response`) as KResponse | ((o: { topics: unknown[] }) => KResponse);
  const r = typeof mod === 'function' ? mod({ topics: [] }) : mod;
  return r.decode(body);
}

/** The request versions kafkajs implements for an API directory. */
export function kafkajsVersions(dir: string): number[] {
  const { versions } = require(`kafkajs/src/protocol/requests/${dir}`) as { versions: string[] };
  return versions.map(Number).sort((a, b) => a - b);
}

export const kafkajsErrors = require('kafkajs/src/protocol/error') as { errorCodes: { type: string; code: number; retriable: boolean }[] };
