/**
 * What the JSON admin API (docs/http-api.md) reads from a request and how it answers: query parameters
 * and JSON bodies checked against the names a route takes (any other is refused), and one table from the
 * error classes of the protocol's error registry to HTTP statuses.
 */
import { isUtf8 } from 'node:buffer';
import type http from 'node:http';
import { type ErrorFields, TributaryError, invalidParam } from 'tributary-protocol/errors.js';

/** Request bodies are small (a topic definition, one message, a reset): anything larger is refused. */
export const MAX_BODY_BYTES = 1024 * 1024;

/** The HTTP status of an error, from its class in the error registry (docs/protocol.md, section 3). */
export function statusOf(err: TributaryError): number {
  if (err.code === 'authentication_required' || err.code === 'authentication_failed') return 401;
  if (err.code === 'brokers_unreachable') return 503;
  if (err.code === 'throttled') return 429;
  if (err.code === 'record_too_large' || err.code === 'frame_too_large') return 413;
  switch (err.errorClass) {
    case 'validation':
      return 400;
    case 'authorization':
      return 403;
    case 'not_found':
      return 404;
    case 'conflict':
    case 'fencing':
      return 409;
    case 'routing':
    case 'availability':
      return 503;
    default:
      return 500;
  }
}

export function sendJson(res: http.ServerResponse, status: number, body: unknown, headers: http.OutgoingHttpHeaders = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

/** Fields naming things: text even when it looks like a number (a topic called `123`). */
const NAME_FIELDS = new Set(['topic', 'group', 'member', 'member_id', 'principal', 'transactional_id', 'client_id', 'instance', 'user', 'name', 'param', 'option', 'reason', 'message']);

export interface ErrorJson {
  code: string;
  message: string;
  retriable: boolean;
  fields: ErrorFields;
}

/**
 * An error as the API gives it, the same for every error. A broker's comes parsed from its `ERROR:` line,
 * its message that line and its fields text: it gets the form of one raised here, the message its code
 * (and positional words) and fields, with neither `ERROR:` nor class and retryable (`retriable` says
 * that), and a field holding a decimal integer a number.
 */
export function errorJson(e: TributaryError): ErrorJson {
  if (!e.message.startsWith('ERROR:')) return { code: e.code, message: e.message, retriable: e.retriable, fields: e.fields };
  const fields: ErrorFields = {};
  for (const [k, v] of Object.entries(e.fields)) {
    fields[k] = typeof v === 'string' && !NAME_FIELDS.has(k) && /^(0|-?[1-9]\d{0,15})$/.test(v) && Number.isSafeInteger(Number(v)) ? Number(v) : v;
  }
  const message = [e.code, ...e.extra, ...Object.entries(fields).map(([k, v]) => `${k}=${String(v)}`)].join(' ');
  return { code: e.code, message, retriable: e.retriable, fields };
}

/** `{ error: { code, message, retriable, fields } }`, the same fields an `ERROR:` line carries (errorJson). */
/** A 404 (no route) or 405 (another method; `allow` lists those served) in the API's error shape. */
export function sendRouteError(res: http.ServerResponse, url: URL, method: string | undefined, allow?: string): void {
  if (allow === undefined) {
    sendJson(res, 404, { error: { code: 'not_found', message: `no route ${url.pathname.slice(0, 256)}`, retriable: false, fields: {} } });
    return;
  }
  sendJson(res, 405, { error: { code: 'method_not_allowed', message: `${method} is not allowed on ${url.pathname}; allowed: ${allow}`, retriable: false, fields: {} } }, { allow });
}

export function sendError(res: http.ServerResponse, err: unknown): void {
  const e = err instanceof TributaryError ? err : new TributaryError('internal_error', { reason: (err as Error)?.message ?? String(err) });
  const headers: http.OutgoingHttpHeaders = {};
  // Not `Basic`: a browser would pop up its own sign-in dialog instead of the console's form.
  if (statusOf(e) === 401) headers['www-authenticate'] = 'Tributary realm="tributary"';
  if (e.retriable) {
    const ms = Number(e.fields.retry_after_ms);
    headers['retry-after'] = Number.isFinite(ms) && ms > 1000 ? String(Math.ceil(ms / 1000)) : '1';
  }
  sendJson(res, statusOf(e), { error: errorJson(e) }, headers);
}

/**
 * Refuses a query string whose percent-encoding is malformed or not UTF-8, which URLSearchParams would
 * take as U+FFFD (or keep as "%ZZ"): a search for a key sent so looked for other bytes, and answered
 * "complete" with nothing found. As for bodies (readJsonBody), what was sent is refused, not replaced.
 */
export function checkQueryEncoding(search: string): void {
  const decoded = (part: string): string | undefined => {
    try {
      return decodeURIComponent(part.replace(/\+/g, ' '));
    } catch {
      return undefined;
    }
  };
  for (const pair of search.replace(/^\?/, '').split('&')) {
    const eq = pair.indexOf('=');
    const name = decoded(eq < 0 ? pair : pair.slice(0, eq));
    if (name === undefined) throw invalidParam('query', 'a parameter name is not UTF-8 in valid percent-encoding');
    if (eq >= 0 && decoded(pair.slice(eq + 1)) === undefined) throw invalidParam(name.slice(0, 64), 'not UTF-8 in valid percent-encoding');
  }
}

/** The query string, every name checked against `allowed`; a name given twice is refused. */
export class Query {
  private readonly values = new Map<string, string>();

  constructor(search: URLSearchParams, allowed: readonly string[]) {
    for (const [k, v] of search) {
      if (!allowed.includes(k)) {
        if (k === 'token' || k === 'access_token') throw invalidParam(k, 'credentials go in the Authorization header, never in a URL');
        throw invalidParam(k, `unknown parameter; this route takes ${allowed.length === 0 ? 'none' : allowed.join(', ')}`);
      }
      if (this.values.has(k)) throw invalidParam(k, 'given twice');
      this.values.set(k, v);
    }
  }

  str(name: string): string | undefined {
    return this.values.get(name);
  }

  int(name: string, opts: { min?: number; max?: number } = {}): number | undefined {
    const v = this.values.get(name);
    if (v === undefined) return undefined;
    return checkInt(name, /^-?\d{1,16}$/.test(v) ? Number(v) : Number.NaN, opts);
  }

  oneOf<T extends string>(name: string, options: readonly T[]): T | undefined {
    const v = this.values.get(name);
    if (v === undefined) return undefined;
    if (!(options as readonly string[]).includes(v)) throw invalidParam(name, `expected ${options.join(' or ')}`);
    return v as T;
  }
}

export function checkInt(name: string, v: unknown, opts: { min?: number; max?: number } = {}): number {
  const min = opts.min ?? 0;
  const max = opts.max ?? Number.MAX_SAFE_INTEGER;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max) {
    throw invalidParam(name, `must be an integer from ${min}${max === Number.MAX_SAFE_INTEGER ? '' : ` to ${max}`}`);
  }
  return v;
}

/** A JSON object body whose keys are all in `allowed`; malformed JSON, another type or an unknown key is refused. */
/** A UTF-16 surrogate without its other half: a string UTF-8 cannot carry. */
const LONE_SURROGATE = /\p{Cs}/u;

export async function readJsonBody(req: http.IncomingMessage, allowed: readonly string[]): Promise<Record<string, unknown>> {
  const type = req.headers['content-type'] ?? '';
  // The media type itself, parameters (charset) allowed: `\b` also let application/json-patch+json through.
  if (!/^application\/json\s*(;|$)/i.test(type)) throw invalidParam('content-type', 'expected application/json');
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new TributaryError('record_too_large', { size, max: MAX_BODY_BYTES, reason: 'request body' });
    chunks.push(chunk);
  }
  const raw = Buffer.concat(chunks);
  // Decoded, bytes that are not UTF-8 (and escapes of half a surrogate pair) would be stored as U+FFFD:
  // not what was sent, and no error said so.
  if (!isUtf8(raw)) throw invalidParam('body', 'not valid UTF-8');
  const text = raw.toString('utf8');
  let body: unknown;
  let lone: string | undefined;
  try {
    body = JSON.parse(text, (key: string, value: unknown) => {
      if (lone === undefined && (LONE_SURROGATE.test(key) || (typeof value === 'string' && LONE_SURROGATE.test(value)))) lone = key;
      return value;
    });
  } catch (err) {
    throw invalidParam('body', `malformed JSON: ${(err as Error).message}`);
  }
  if (lone !== undefined) throw invalidParam(lone || 'body', 'a string holds half of a UTF-16 surrogate pair (\\ud800-\\udfff alone): not encodable as UTF-8');
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw invalidParam('body', 'expected a JSON object');
  // JSON.parse keeps the last of a repeated key: {"dryRun":true,"dryRun":false} reset offsets for real.
  const dup = duplicateJsonKey(text);
  if (dup !== undefined) throw invalidParam(dup, 'given twice');
  for (const k of Object.keys(body)) if (!allowed.includes(k)) throw invalidParam(k, `unknown field; this route takes ${allowed.join(', ')}`);
  return body as Record<string, unknown>;
}

/** The first key a valid JSON text gives twice in one object, or undefined. */
export function duplicateJsonKey(text: string): string | undefined {
  // One Set of keys per open object; null for an open array.
  const open: Array<Set<string> | null> = [];
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (ch === '"') {
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      const keys = open[open.length - 1];
      if (expectKey && keys) {
        const key = JSON.parse(text.slice(i, j + 1)) as string;
        if (keys.has(key)) return key;
        keys.add(key);
        expectKey = false;
      }
      i = j;
    } else if (ch === '{') {
      open.push(new Set());
      expectKey = true;
    } else if (ch === '[') open.push(null);
    else if (ch === '}' || ch === ']') {
      open.pop();
      expectKey = false;
    } else if (ch === ',') expectKey = open[open.length - 1] != null;
  }
  return undefined;
}

/** `Authorization: Basic base64(principal:token)`; undefined without the header. */
export function credentialsOf(req: http.IncomingMessage): { principal: string; token: string } | undefined {
  const h = req.headers.authorization;
  if (h === undefined) return undefined;
  const m = /^Basic ([A-Za-z0-9+/=]+)$/.exec(h.trim());
  if (!m) throw new TributaryError('authentication_failed', { reason: 'expected Authorization: Basic base64(principal:token)' });
  const text = Buffer.from(m[1]!, 'base64').toString('utf8');
  const colon = text.indexOf(':');
  if (colon <= 0 || colon === text.length - 1) throw new TributaryError('authentication_failed', { reason: 'expected principal:token' });
  return { principal: text.slice(0, colon), token: text.slice(colon + 1) };
}
