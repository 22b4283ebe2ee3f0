/**
 * The console's calls to the admin API (docs/http-api.md). Credentials live in sessionStorage only
 * (gone when the tab closes) and travel in the Authorization header, never in a URL.
 */
const KEY = 'tributary.credentials';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export function signedInAs(): string | undefined {
  const v = sessionStorage.getItem(KEY);
  return v ? (JSON.parse(v) as { principal: string }).principal : undefined;
}

export function signIn(principal: string, token: string): void {
  sessionStorage.setItem(KEY, JSON.stringify({ principal, token }));
}

export function signOut(): void {
  sessionStorage.removeItem(KEY);
}

function authHeader(): Record<string, string> {
  const v = sessionStorage.getItem(KEY);
  if (!v) return {};
  const { principal, token } = JSON.parse(v) as { principal: string; token: string };
  const bytes = new TextEncoder().encode(`${principal}:${token}`);
  let bin = '';
  for (const b of bytes) bin += String.fromCharCode(b);
  return { authorization: `Basic ${btoa(bin)}` };
}

/** Listeners told when a request answered 401 (the app shows the sign-in form). */
const unauthorized = new Set<() => void>();
export function onUnauthorized(fn: () => void): () => void {
  unauthorized.add(fn);
  return () => unauthorized.delete(fn);
}

export async function api<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  const headers: Record<string, string> = { ...authHeader() };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await reach(() => fetch(`/api/v1${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal }), signal);
  if (res.status === 204) return undefined as T;
  // A proxy in front of the broker may answer an error with a page that is not JSON.
  const json = (await res.json().catch(() => (res.ok ? Promise.reject(new Error(`unreadable answer (HTTP ${res.status})`)) : {}))) as T & { error?: { code: string; message: string } };
  if (!res.ok) {
    if (res.status === 401) for (const fn of unauthorized) fn();
    throw new ApiError(res.status, json.error?.code ?? 'http_error', json.error?.message ?? (res.statusText || `HTTP ${res.status}`));
  }
  return json;
}

/** A fetch whose network failure ("Failed to fetch") says that the broker did not answer. */
async function reach(send: () => Promise<Response>, signal: AbortSignal | undefined): Promise<Response> {
  try {
    return await send();
  } catch (err) {
    if (signal?.aborted) throw err;
    throw new Error(`the broker did not answer (${(err as Error).message})`);
  }
}

export const get = <T>(path: string, signal?: AbortSignal) => api<T>('GET', path, undefined, signal);

/**
 * Server-Sent Events over fetch (EventSource cannot send an Authorization header, and reconnects by
 * itself from where the server decides): calls `onEvent` for each event until `signal` aborts or the
 * stream ends. Nothing received for `idleMs` (the server sends a comment every 15 s) ends it with an
 * error, as a broker that is stopped, not gone, never closes the connection. It never reconnects.
 */
export async function events(path: string, onEvent: (event: string, data: unknown) => void, signal: AbortSignal, idleMs = 45_000): Promise<void> {
  const call = new AbortController();
  const stop = () => call.abort();
  signal.addEventListener('abort', stop);
  let idle = false;
  let timer = setTimeout(() => ((idle = true), stop()), idleMs);
  const heard = () => {
    clearTimeout(timer);
    timer = setTimeout(() => ((idle = true), stop()), idleMs);
  };
  const silent = () => new Error(`nothing received from the broker within ${idleMs / 1000} s`);
  try {
    await read(path, onEvent, call.signal, heard);
    if (idle) throw silent();
  } catch (err) {
    if (idle && !signal.aborted) throw silent();
    throw err;
  } finally {
    clearTimeout(timer);
    signal.removeEventListener('abort', stop);
  }
}

async function read(path: string, onEvent: (event: string, data: unknown) => void, signal: AbortSignal, heard: () => void): Promise<void> {
  const res = await reach(() => fetch(`/api/v1${path}`, { headers: authHeader(), signal }), signal);
  heard();
  if (!res.ok || !res.body) {
    const json = (await res.json().catch(() => ({}))) as { error?: { code: string; message: string } };
    if (res.status === 401) for (const fn of unauthorized) fn();
    throw new ApiError(res.status, json.error?.code ?? 'error', json.error?.message ?? (res.statusText || `HTTP ${res.status}`));
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      heard();
      buf += value;
      for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        // Lines split at \n only: a regex's `.` and `$` also stop at U+2028, inside a record's value.
        const lines = block.split('\n');
        const ev = lines.find((l) => l.startsWith('event: '))?.slice(7);
        const data = lines.find((l) => l.startsWith('data: '))?.slice(6);
        if (!ev || data === undefined) continue;
        let parsed: unknown;
        try {
          parsed = JSON.parse(data);
        } catch {
          // One event the console cannot read is skipped; the tail goes on.
          console.warn(`skipped an unreadable ${ev} event`);
          continue;
        }
        onEvent(ev, parsed);
      }
    }
  } catch (err) {
    if (!signal.aborted) throw err;
  }
}

// ---- the API's shapes (docs/http-api.md) ----

export interface Message {
  partition: number;
  offset: number;
  timestamp: number;
  key: string | null;
  keyEncoding: 'utf8' | 'base64';
  value: string;
  valueEncoding: 'utf8' | 'base64';
  headers: Array<{ key: string; value: string; encoding: 'utf8' | 'base64' }>;
  /** Headers past the first 100, not shown. */
  headersOmitted?: number;
  transactional: boolean;
}

export interface TopicSummary {
  name: string;
  partitions: number;
  replicationFactor: number;
  underReplicated: number;
  leaderless: number;
  records: number;
  sizeBytes: number;
}

export interface TopicDetail {
  name: string;
  replicationFactor: number;
  retentionHours: number;
  retentionBytes: number;
  cleanupPolicy: string;
  /** Compacted topics: how long a tombstone stays (null from a broker of an older version). */
  deleteRetentionMs: number | null;
  partitions: Array<{ partition: number; leader: string | null; leaderId: number | string; leaderEpoch: number; replicas: Array<number | string>; isr: Array<number | string>; earliest: number; logEnd: number; highWatermark: number; lastStable: number; sizeBytes: number | null }>;
}

export interface GroupSummary {
  group: string;
  topic: string;
  state: string;
  generation: number;
  members: number;
  totalLag: number;
}

export interface GroupDetail {
  group: string;
  topic: string;
  state: string;
  generation: number;
  leader: string | null;
  assignor: string;
  members: Array<{ memberId: string; clientId: string; host: string; generation: number; lastHeartbeatMsAgo: number; assignments: number[]; pending: number[]; needsRejoin: boolean }>;
  offsets: Array<{ partition: number; committed: number | null; logEnd: number; lag: number | null; owner: string | null }>;
  totalLag: number;
  history: Array<{ generation: number; at: number; rebalanceMs: number | null; reasons: Array<{ cause: string; member: string; missedByMs?: number }>; moved: number[] | null }>;
}

export interface Cluster {
  mode: string;
  controller: number | null;
  brokers: Array<{ id: number; address?: string; host?: string; port?: number }>;
  partitions: number;
  underReplicated: number;
  leaderless: number;
}
