/**
 * GET /api/v1/topics/:topic/tail (docs/http-api.md): Server-Sent Events, every new message of the topic
 * (or one partition) from `from` (default: the end; `partition:offset` pairs resume each partition where
 * an earlier tail stopped), as `event: message`; a comment line every 15 s keeps proxies from closing a
 * quiet stream. Everything a read can refuse (authorization, an offset past the end) is refused with its
 * status before the 200; a client that stops reading is not buffered for. A position gone from the log
 * (`event: reset`) moves that partition on; partitions added to the topic are read too (`event: partitions`).
 */
import type { ReadRecord } from 'tributary-client/admin.js';
import { invalidParam, TributaryError } from 'tributary-protocol/errors.js';
import type { ApiClients } from './api-clients.js';
import { partitionOffsets, readEnd, recordJson, type RouteContext, segment, sseJson } from './api-records.js';
import { errorJson, Query, type credentialsOf } from './api-request.js';
import { outOfRange, resumePositions, type TailReset } from './tail-positions.js';

/** Tails open at once: each holds a broker connection of its own (and, per address, the broker's per-address limit). */
export const MAX_TAILS = 64;
export const MAX_TAILS_PER_ADDRESS = 8;
/** How often a tail of a whole topic looks for partitions added to it (docs/http-api.md, "Live tail"). */
export const PARTITIONS_CHECK_MS = 2_000;

/** Open tails, overall and per client address. */
export class TailCount {
  total = 0;
  readonly byAddress = new Map<string, number>();

  /** Takes a slot for `address`, or throws throttled (429). Returns its release. */
  take(address: string): () => void {
    const mine = this.byAddress.get(address) ?? 0;
    if (this.total >= MAX_TAILS) throw new TributaryError('throttled', { reason: 'too many open tails', max: MAX_TAILS });
    if (mine >= MAX_TAILS_PER_ADDRESS) throw new TributaryError('throttled', { reason: 'too many open tails from this address', max: MAX_TAILS_PER_ADDRESS });
    this.total++;
    this.byAddress.set(address, mine + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.total--;
      const n = (this.byAddress.get(address) ?? 1) - 1;
      if (n > 0) this.byAddress.set(address, n);
      else this.byAddress.delete(address);
    };
  }
}

export async function tail(
  { url, req, res, client, params }: RouteContext,
  deps: { clients: ApiClients; tails: TailCount; writeStallTimeoutMs: number },
  auth: ReturnType<typeof credentialsOf>,
): Promise<void> {
  const q = new Query(url.searchParams, ['partition', 'from', 'isolation']);
  const topic = segment(params[0]!);
  const from = q.str('from') ?? 'latest';
  const resume = resumePositions(from);
  if (!resume && from !== 'latest' && from !== 'earliest' && !/^\d{1,16}$/.test(from)) {
    throw invalidParam('from', 'expected latest, earliest, an offset or partition:offset pairs');
  }
  const isolation = q.oneOf('isolation', ['read_committed', 'read_uncommitted'] as const);
  const only = q.int('partition', { max: 1_000_000 });
  const release = deps.tails.take(req.socket.remoteAddress ?? '');
  // Listened for before the first wait: a client gone during it has fired 'close' already, and the loop
  // below would run (with a client and two broker connections of its own) for ever.
  const ac = new AbortController();
  const stop = () => ac.abort();
  req.on('close', stop);
  res.on('close', stop);
  let own: ReturnType<ApiClients['dedicated']> | undefined;
  let keepalive: NodeJS.Timeout | undefined;
  let stalled = false;
  try {
    const offsets = await partitionOffsets(client.admin, topic, only).finally(() => {
      if (res.destroyed || req.socket.destroyed) stop();
    });
    if (ac.signal.aborted) return;
    const partitions = [...offsets.keys()];
    for (const p of resume?.keys() ?? []) if (!offsets.has(p)) throw invalidParam('from', `names partition ${p}, which this tail does not read`);
    const position = new Map<number, number>();
    /** Events for the stream, in order, written with the next records. */
    let pending: string[] = [];
    const moved = (r: TailReset) => {
      position.set(r.partition, r.position);
      pending.push(`event: reset\ndata: ${sseJson(r)}\n\n`);
    };
    for (const p of partitions) {
      const o = offsets.get(p)!;
      const named = resume?.get(p);
      if (named !== undefined) {
        // A resumed position that is gone is the tail's own, not the caller's mistake: it goes on (a reset).
        position.set(p, named);
        const r = outOfRange(p, named, o, isolation);
        if (r) moved(r);
        continue;
      }
      // Resuming: a partition not named (added since) from the end.
      const at = resume ? 'latest' : from;
      if (at !== 'latest' && at !== 'earliest' && Number(at) > readEnd(o, isolation)) {
        throw new TributaryError('OFFSET_OUT_OF_RANGE', { requested: Number(at), earliest: o.earliest, latest: readEnd(o, isolation), partition: p });
      }
      position.set(p, at === 'latest' ? readEnd(o, isolation) : at === 'earliest' ? o.earliest : Math.max(Number(at), o.earliest));
    }
    // Long polls would hold the shared connection other requests use: the stream gets a client of its own.
    own = deps.clients.dedicated(auth);
    const reader = own;
    /** One read of every partition; what it returns is written once the stream is open. */
    const round = async (waitMs: number): Promise<Array<{ p: number; records: ReadRecord[] }>> => {
      const out = [];
      for (const p of partitions) {
        let r: Awaited<ReturnType<typeof reader.readRecords>>;
        try {
          r = await reader.readRecords({ topic, partition: p, offset: position.get(p)!, maxRecords: 500, isolation, waitMs }, { signal: ac.signal });
        } catch (err) {
          if (!(err instanceof TributaryError) || err.code !== 'OFFSET_OUT_OF_RANGE') throw err;
          // The position is gone (retention, records lost): this partition starts over, the others read on.
          const o = (await partitionOffsets(reader, topic, p)).get(p);
          const reset = o && outOfRange(p, position.get(p)!, o, isolation);
          if (reset) moved(reset);
          // In range at the leader: a broker whose copy trails answered; read again a little later.
          else await new Promise<void>((resolve) => setTimeout(resolve, 200).unref());
          continue;
        }
        out.push({ p, records: r.records });
        if (r.nextOffset > position.get(p)!) position.set(p, r.nextOffset);
      }
      return out;
    };
    /** Partitions added to the topic since the last look, read from their start (all they hold is new). */
    let lookedAt = Date.now();
    const added = async () => {
      if (only !== undefined || Date.now() - lookedAt < PARTITIONS_CHECK_MS) return;
      lookedAt = Date.now();
      const now = await partitionOffsets(reader, topic, undefined);
      const fresh: Record<number, number> = {};
      for (const [p, o] of now) {
        if (position.has(p)) continue;
        partitions.push(p);
        position.set(p, o.earliest);
        fresh[p] = o.earliest;
      }
      if (Object.keys(fresh).length > 0) pending.push(`event: partitions\ndata: ${sseJson({ added: fresh })}\n\n`);
    };
    const start = Object.fromEntries(position);
    // The first read before the 200: a refusal (no topic.read, say) is the response's status, not an event.
    let got = await round(0);
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    // A HEAD gets the status and headers and no stream. Streamed, it never got them (Node sends a HEAD's
    // headers at its end) and held a tail, and its broker connections, for as long as its client stayed.
    if (req.method === 'HEAD') return;
    res.write(`event: ready\ndata: ${sseJson({ topic, positions: start })}\n\n`);
    keepalive = setInterval(() => res.write(': keepalive\n\n'), 15_000);
    while (!ac.signal.aborted) {
      // Resets and added partitions first: they say where the records after them come from.
      for (const e of pending) res.write(e);
      let n = pending.length;
      pending = [];
      for (const { p, records } of got) {
        for (const rec of records) res.write(`event: message\ndata: ${sseJson(recordJson(p, rec))}\n\n`);
        n += records.length;
      }
      // A client that does not read: wait for it (bounded) rather than buffer the topic in memory.
      if (res.writableNeedDrain && !(await drained(res, ac.signal, deps.writeStallTimeoutMs))) {
        stalled = true;
        break;
      }
      if (n === 0 && partitions.length > 1) await new Promise<void>((resolve) => setTimeout(resolve, 200).unref());
      if (ac.signal.aborted) break;
      await added();
      got = await round(partitions.length === 1 ? 1000 : 0);
    }
  } catch (err) {
    if (!res.headersSent) throw err;
    if (!ac.signal.aborted) {
      const e = err instanceof TributaryError ? err : new TributaryError('internal_error', { reason: (err as Error).message });
      const { code, message, retriable } = errorJson(e);
      res.write(`event: error\ndata: ${sseJson({ code, message, retriable })}\n\n`);
    }
  } finally {
    clearInterval(keepalive);
    req.off('close', stop);
    res.off('close', stop);
    release();
    await own?.close().catch(() => {});
    if (stalled) res.destroy();
    else if (res.headersSent) res.end();
  }
}

/** Resolves true once `res` drained, false after `stallMs` without (or when `signal` aborts). */
function drained(res: RouteContext['res'], signal: AbortSignal, stallMs: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const done = (ok: boolean) => {
      clearTimeout(timer);
      res.off('drain', onDrain);
      signal.removeEventListener('abort', onAbort);
      resolve(ok);
    };
    const onDrain = () => done(true);
    const onAbort = () => done(false);
    const timer = setTimeout(() => done(false), stallMs);
    res.once('drain', onDrain);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
