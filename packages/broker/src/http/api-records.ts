/**
 * What the record routes of the HTTP API share (admin-api.ts, tail-route.ts): the request context, path
 * segments, and records, offsets and events as JSON (docs/http-api.md).
 */
import { isUtf8 } from 'node:buffer';
import type http from 'node:http';
import type { Admin, PartitionOffsets, ReadRecord } from 'tributary-client/admin.js';
import { invalidParam } from 'tributary-protocol/errors.js';
import type { ApiClient } from './api-clients.js';

export interface RouteContext {
  req: http.IncomingMessage;
  res: http.ServerResponse;
  url: URL;
  params: string[];
  client: ApiClient;
  /** The caller's principal (authentication on), for the group history of a reset. */
  principal: string | undefined;
}

/** A path segment: a topic or group name, percent-decoded. */
export function segment(raw: string): string {
  let v: string;
  try {
    v = decodeURIComponent(raw);
  } catch {
    throw invalidParam('path', 'malformed percent-encoding');
  }
  if (v.length === 0) throw invalidParam('path', 'empty name');
  return v;
}

/** Keys, values and header values as JSON: UTF-8 text when they are, base64 otherwise (with the encoding named). */
export function bytesJson(b: Buffer | null): { text: string | null; encoding: 'utf8' | 'base64' } {
  if (b === null) return { text: null, encoding: 'utf8' };
  return isUtf8(b) ? { text: b.toString('utf8'), encoding: 'utf8' } : { text: b.toString('base64'), encoding: 'base64' };
}

/**
 * Headers shown per message; `headersOmitted` counts the rest. A record may carry 65,535 headers: shown
 * whole, 100 such messages were 6.5M JSON objects (1.9 GB) and 262 MB of JSON.
 */
export const MAX_HEADERS_SHOWN = 100;

/**
 * JSON a reply of messages (readMessages, searchMessages) holds at most: past it the reply ends early
 * (`truncated`, with where to continue). The first message is always shown, whatever its size.
 */
export const MAX_MESSAGES_JSON = 16 * 1024 * 1024;

export function recordJson(partition: number, r: ReadRecord) {
  const key = bytesJson(r.key);
  const value = bytesJson(r.value);
  const shown = r.headers.length > MAX_HEADERS_SHOWN ? r.headers.slice(0, MAX_HEADERS_SHOWN) : r.headers;
  return {
    partition,
    offset: r.offset,
    timestamp: r.timestamp,
    key: key.text,
    keyEncoding: key.encoding,
    value: value.text,
    valueEncoding: value.encoding,
    headers: shown.map((h) => {
      const v = bytesJson(h.value);
      return { key: h.key, value: v.text, encoding: v.encoding };
    }),
    ...(shown.length < r.headers.length ? { headersOmitted: r.headers.length - shown.length } : {}),
    transactional: r.transactional,
  };
}

/** Messages as JSON within MAX_MESSAGES_JSON: add() says whether a message still fits (the first always does). */
export class MessagesJson {
  readonly messages: Array<ReturnType<typeof recordJson>> = [];
  private bytes = 0;

  add(m: ReturnType<typeof recordJson>): boolean {
    const size = JSON.stringify(m).length + 1;
    if (this.messages.length > 0 && this.bytes + size > MAX_MESSAGES_JSON) return false;
    this.messages.push(m);
    this.bytes += size;
    return true;
  }
}

/**
 * JSON for one SSE `data:` line. JSON.stringify leaves U+2028 and U+2029 as they are, and JavaScript's
 * line-based parsing of the event stream split a record value there: one produced record ended the
 * console's live tail for everyone watching it.
 */
export function sseJson(v: unknown): string {
  return JSON.stringify(v)
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029');
}

/** Where a read of the isolation given stops: the HWM for read_uncommitted, else the last stable offset. */
export function readEnd(o: PartitionOffsets, isolation: 'read_committed' | 'read_uncommitted' | undefined): number {
  return isolation === 'read_uncommitted' ? o.hwm : o.latest;
}

/** The offsets of the partitions a request names (`partition=`, else all): partition_not_found from the broker. */
export async function partitionOffsets(admin: Admin, topic: string, only: number | undefined): Promise<Map<number, PartitionOffsets>> {
  return new Map((await admin.listOffsets(topic, only)).map((o) => [o.partition, o]));
}
