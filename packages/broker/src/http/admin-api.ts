/**
 * The JSON admin API under `/api/v1/` on the broker's HTTP port (docs/http-api.md). Every route acts
 * through the SDK as the caller (api-clients.ts), so permissions, topic ACLs, redirects and retries are
 * exactly those of the wire protocol. Bad input gets a 4xx with a JSON error body and changes nothing.
 */
import type http from 'node:http';
import type { ReadRecord } from 'tributary-client/admin.js';
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import type { BrokerConfig } from '../common/config.js';
import type { Logger } from '../common/logger.js';
import type { ApiClients } from './api-clients.js';
import { MessagesJson, partitionOffsets, readEnd, recordJson, type RouteContext, segment } from './api-records.js';
import { Query, checkInt, checkQueryEncoding, credentialsOf, readJsonBody, sendError, sendJson, sendRouteError } from './api-request.js';
import { AuthBackoff } from './auth-backoff.js';
import { resumePositions } from './tail-positions.js';
import { TailCount, tail } from './tail-route.js';

/** A search reads at most this many records per request (`scan_limit`). */
export const MAX_SCAN = 100_000;
/** A range read or a search answers at most this many records (`limit`). */
export const MAX_LIMIT = 1000;
/** Describing every topic or group for a list: at most this many at once. */
const LIST_CONCURRENCY = 8;

type Handler = (ctx: RouteContext) => Promise<void>;

interface Route {
  method: string;
  pattern: RegExp;
  handler: Handler;
}

export interface AdminApiDeps {
  config: BrokerConfig;
  clients: ApiClients;
  logger: Logger;
  /** Users and ACLs in force now (Security.snapshot): the configuration's are those of the start. */
  security?: () => { users: Array<{ principal: string; permissions: string[] }>; acls: BrokerConfig['topicAcls']; groupAcls: BrokerConfig['groupAcls'] };
}

/**
 * `describe` of every name, at most LIST_CONCURRENCY at once, in order; a name gone between the list and
 * its describe (`goneCode`) is left out.
 */
async function describeEach<R>(names: string[], goneCode: string, describe: (name: string) => Promise<R>): Promise<R[]> {
  const out: Array<R | undefined> = new Array(names.length);
  let next = 0;
  const worker = async () => {
    while (next < names.length) {
      const i = next++;
      try {
        out[i] = await describe(names[i]!);
      } catch (err) {
        if ((err as TributaryError).code !== goneCode) throw err;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(LIST_CONCURRENCY, names.length) }, worker));
  return out.filter((x): x is R => x !== undefined);
}

function str(body: Record<string, unknown>, name: string, opts: { required?: boolean } = {}): string | undefined {
  const v = body[name];
  if (v === undefined || v === null) {
    if (opts.required) throw invalidParam(name, 'required');
    return undefined;
  }
  if (typeof v !== 'string') throw invalidParam(name, 'must be a string');
  return v;
}

function optInt(body: Record<string, unknown>, name: string, opts: { min?: number; max?: number } = {}): number | undefined {
  return body[name] === undefined ? undefined : checkInt(name, body[name], opts);
}

/** A message's key/value from a produce body: text, or base64 with `encoding: "base64"`. */
function bytesOf(name: string, v: string | undefined, encoding: 'utf8' | 'base64'): Buffer | undefined {
  if (v === undefined) return undefined;
  if (encoding === 'utf8') return Buffer.from(v, 'utf8');
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(v) || v.length % 4 !== 0) throw invalidParam(name, 'not valid base64');
  return Buffer.from(v, 'base64');
}

// ---- topics ----

async function listTopics({ url, res, client }: RouteContext): Promise<void> {
  const q = new Query(url.searchParams, ['internal']);
  const internal = q.oneOf('internal', ['true', 'false'] as const) === 'true';
  const names = await client.admin.listTopics({ includeInternal: internal });
  const topics = await describeEach(names, 'topic_not_found', async (name) => {
    const d = await client.admin.describeTopic(name);
    return {
      name,
      partitions: d.partitions.length,
      replicationFactor: d.replication_factor,
      underReplicated: d.partitions.filter((p) => p.isr.length < p.replicas.length).length,
      leaderless: d.partitions.filter((p) => p.leader === null || p.leader === '-').length,
      records: d.partitions.reduce((n, p) => n + Math.max(0, p.hwm - p.earliest), 0),
      sizeBytes: d.partitions.reduce((n, p) => n + (p.size_bytes ?? 0), 0),
    };
  });
  sendJson(res, 200, { topics });
}

async function describeTopic({ url, res, client, params }: RouteContext): Promise<void> {
  new Query(url.searchParams, []);
  const name = segment(params[0]!);
  const d = await client.admin.describeTopic(name);
  // DESCRIBE answers with the asked broker's copies; the offsets come from each partition's leader.
  const offsets = new Map((await client.admin.listOffsets(name).catch(() => [])).map((o) => [o.partition, o]));
  sendJson(res, 200, {
    name: d.topic,
    topicId: d.topic_id,
    replicationFactor: d.replication_factor,
    idempotent: d.idempotent,
    partitioner: d.partitioner,
    retentionHours: d.retention_hours,
    retentionBytes: d.retention_bytes,
    cleanupPolicy: d.cleanup_policy,
    deleteRetentionMs: d.delete_retention_ms ?? null,
    partitions: d.partitions.map((p) => {
      const o = offsets.get(p.id);
      return {
        partition: p.id,
        leader: p.leader,
        leaderId: p.leader_id,
        leaderEpoch: p.leader_epoch,
        replicas: p.replicas,
        isr: p.isr,
        earliest: o?.earliest ?? p.earliest,
        logEnd: o?.leo ?? p.leo,
        highWatermark: o?.hwm ?? p.hwm,
        lastStable: o?.latest ?? p.lso,
        sizeBytes: p.size_bytes ?? null,
      };
    }),
  });
}

/** The body's names of CREATE's and ALTER_TOPIC's parameters, for the broker's refusals of their values. */
const FIELD_OF: Record<string, string> = { retention_hours: 'retentionHours', retention_bytes: 'retentionBytes', replication_factor: 'replicationFactor', delete_retention_ms: 'deleteRetentionMs' };

/** A refusal naming the body's field (retentionHours) rather than the command's parameter the request has nowhere. */
function inFieldNames(err: unknown): never {
  const param = err instanceof TributaryError && err.code === 'invalid_parameter' ? err.fields.param : undefined;
  if (typeof param === 'string' && Object.hasOwn(FIELD_OF, param)) throw new TributaryError('invalid_parameter', { ...(err as TributaryError).fields, param: FIELD_OF[param]! });
  throw err;
}

const CREATE_FIELDS = ['name', 'partitions', 'replicationFactor', 'retentionHours', 'retentionBytes', 'partitioner'] as const;

async function createTopic({ req, url, res, client }: RouteContext): Promise<void> {
  new Query(url.searchParams, []);
  const body = await readJsonBody(req, CREATE_FIELDS);
  const partitioner = str(body, 'partitioner');
  if (partitioner !== undefined && partitioner !== 'hash_key' && partitioner !== 'round_robin') throw invalidParam('partitioner', 'expected hash_key or round_robin');
  const created = await client.admin.createTopic({
    topic: str(body, 'name', { required: true })!,
    partitions: optInt(body, 'partitions', { min: 1, max: 100_000 }),
    replicationFactor: optInt(body, 'replicationFactor', { min: 1, max: 100 }),
    retentionHours: optInt(body, 'retentionHours', { min: -1 }),
    retentionBytes: optInt(body, 'retentionBytes', { min: -1 }),
    partitioner,
  }).catch(inFieldNames);
  const { topic, created: isNew, ...rest } = created;
  sendJson(res, isNew ? 201 : 200, { name: topic, created: isNew, ...rest });
}

async function addPartitions({ req, url, res, client, params }: RouteContext): Promise<void> {
  new Query(url.searchParams, []);
  const body = await readJsonBody(req, ['partitions']);
  const partitions = checkInt('partitions', body.partitions, { min: 1, max: 100_000 });
  sendJson(res, 200, await client.admin.addPartitions(segment(params[0]!), partitions));
}

const ALTER_FIELDS = ['retentionHours', 'retentionBytes', 'deleteRetentionMs'] as const;

/** PATCH: the retention settings given (ALTER_TOPIC, through the SDK's alterTopic); the others stay. */
async function alterTopic({ req, url, res, client, params }: RouteContext): Promise<void> {
  new Query(url.searchParams, []);
  const body = await readJsonBody(req, ALTER_FIELDS);
  // Refused here, naming the body: the SDK's own refusal names its argument (param=opts), not the request's.
  if (ALTER_FIELDS.every((k) => body[k] === undefined)) throw invalidParam('body', `give at least one of ${ALTER_FIELDS.join(', ')}`);
  const altered = await client.admin.alterTopic(segment(params[0]!), {
    retentionHours: optInt(body, 'retentionHours', { min: -1 }),
    retentionBytes: optInt(body, 'retentionBytes', { min: -1 }),
    deleteRetentionMs: optInt(body, 'deleteRetentionMs', { min: 0 }),
  }).catch(inFieldNames);
  const { topic, ...rest } = altered;
  sendJson(res, 200, { name: topic, ...rest });
}

async function deleteTopic({ url, res, client, params }: RouteContext): Promise<void> {
  new Query(url.searchParams, []);
  await client.admin.deleteTopic(segment(params[0]!));
  res.writeHead(204).end();
}

async function readMessages({ url, res, client, params }: RouteContext): Promise<void> {
  const q = new Query(url.searchParams, ['partition', 'offset', 'timestamp', 'limit', 'isolation']);
  const topic = segment(params[0]!);
  const partition = q.int('partition', { max: 1_000_000 });
  if (partition === undefined) throw invalidParam('partition', 'required');
  const limit = q.int('limit', { min: 1, max: MAX_LIMIT }) ?? 100;
  const isolation = q.oneOf('isolation', ['read_committed', 'read_uncommitted'] as const);
  const offsetParam = q.int('offset');
  const timestamp = q.int('timestamp');
  if (offsetParam !== undefined && timestamp !== undefined) throw invalidParam('timestamp', 'give offset or timestamp, not both');
  const [o] = await client.admin.listOffsets(topic, partition, { timestamp });
  if (!o) throw new TributaryError('partition_not_found', { topic, partition });
  const offset = offsetParam ?? o.at ?? o.earliest;
  if (offset < o.earliest || offset > o.leo) throw new TributaryError('OFFSET_OUT_OF_RANGE', { requested: offset, earliest: o.earliest, latest: o.leo, partition });
  const out = new MessagesJson();
  let next = offset;
  let truncated = false;
  // A read may return fewer than asked (max bytes, filtered markers): continue until `limit` or the end.
  read: while (out.messages.length < limit) {
    if (next >= readEnd(o, isolation)) break;
    const r = await client.admin.readRecords({ topic, partition, offset: next, maxRecords: limit - out.messages.length, isolation });
    for (const rec of r.records) {
      if (!out.add(recordJson(partition, rec))) {
        // The reply is full: the next page starts at this message.
        truncated = true;
        next = rec.offset;
        break read;
      }
    }
    if (r.nextOffset <= next) break;
    next = r.nextOffset;
  }
  const page = { topic, partition, offset, nextOffset: next, earliest: o.earliest, highWatermark: o.hwm, lastStable: o.latest, messages: out.messages };
  sendJson(res, 200, truncated ? { ...page, truncated } : page);
}

const PRODUCE_FIELDS = ['key', 'value', 'headers', 'partition', 'encoding'] as const;

async function produceMessage({ req, url, res, client, params }: RouteContext): Promise<void> {
  new Query(url.searchParams, []);
  const topic = segment(params[0]!);
  const body = await readJsonBody(req, PRODUCE_FIELDS);
  const encoding = (str(body, 'encoding') ?? 'utf8') as 'utf8' | 'base64';
  if (encoding !== 'utf8' && encoding !== 'base64') throw invalidParam('encoding', 'expected utf8 or base64');
  const value = bytesOf('value', str(body, 'value', { required: true }), encoding)!;
  const key = bytesOf('key', str(body, 'key'), encoding);
  // The record format's bounds (u16 lengths and count), checked here: the SDK's refusal names its messages[0].
  if (key && key.length > 0xffff) throw invalidParam('key', 'longer than 65535 bytes');
  const headers: Array<{ key: string; value: Buffer }> = [];
  if (body.headers !== undefined) {
    if (body.headers === null || typeof body.headers !== 'object' || Array.isArray(body.headers)) throw invalidParam('headers', 'expected an object of string values');
    const entries = Object.entries(body.headers as Record<string, unknown>);
    if (entries.length > 0xffff) throw invalidParam('headers', 'more than 65535 headers');
    for (const [k, v] of entries) {
      if (typeof v !== 'string') throw invalidParam('headers', `header ${k}: must be a string`);
      if (Buffer.byteLength(k, 'utf8') > 0xffff) throw invalidParam('headers', 'a header key longer than 65535 bytes');
      headers.push({ key: k, value: bytesOf(`headers.${k}`, v, encoding)! });
    }
  }
  const partition = optInt(body, 'partition', { max: 1_000_000 });
  // A clear topic_not_found / partition_not_found before the producer waits for metadata.
  await partitionOffsets(client.admin, topic, partition);
  const [meta] = await client.producer().send({ topic, messages: [{ key: key ?? null, value, headers, partition }] });
  sendJson(res, 201, { topic, partition: meta!.partition, offset: meta!.offset });
}

/** A header filter: `name` (present) or `name=value`. */
function headerFilter(spec: string | undefined): ((r: ReadRecord) => boolean) | undefined {
  if (spec === undefined) return undefined;
  const eq = spec.indexOf('=');
  const name = eq < 0 ? spec : spec.slice(0, eq);
  if (name.length === 0) throw invalidParam('header', 'expected name or name=value');
  const value = eq < 0 ? undefined : Buffer.from(spec.slice(eq + 1), 'utf8');
  return (r) => r.headers.some((h) => h.key === name && (value === undefined || h.value.equals(value)));
}

/**
 * A search's `from`: one offset for every partition, or `partition:offset` pairs (an earlier answer's
 * `next`, to go on where it stopped; a partition not named starts at its earliest).
 */
function searchFrom(from: string | undefined): number | Map<number, number> | undefined {
  if (from === undefined) return undefined;
  if (/^\d{1,16}$/.test(from)) return checkInt('from', Number(from));
  const pairs = resumePositions(from);
  if (!pairs) throw invalidParam('from', 'expected an offset or partition:offset pairs (an earlier answer\'s next, e.g. 0:12,1:40)');
  return pairs;
}

async function searchMessages({ url, res, client, params }: RouteContext): Promise<void> {
  const q = new Query(url.searchParams, ['partition', 'key', 'value', 'header', 'from', 'scan_limit', 'limit', 'isolation']);
  const topic = segment(params[0]!);
  const scanLimit = q.int('scan_limit', { min: 1, max: MAX_SCAN }) ?? 10_000;
  const limit = q.int('limit', { min: 1, max: MAX_LIMIT }) ?? 100;
  const isolation = q.oneOf('isolation', ['read_committed', 'read_uncommitted'] as const);
  const key = q.str('key');
  const value = q.str('value');
  const header = headerFilter(q.str('header'));
  if (key === undefined && value === undefined && header === undefined) throw invalidParam('key', 'give at least one of key, value, header');
  const from = searchFrom(q.str('from'));
  const offsets = await partitionOffsets(client.admin, topic, q.int('partition', { max: 1_000_000 }));
  const partitions = [...offsets.keys()];
  if (from instanceof Map) for (const p of from.keys()) if (!offsets.has(p)) throw invalidParam('from', `names partition ${p}, which this search does not read`);
  const keyBuf = key === undefined ? undefined : Buffer.from(key, 'utf8');
  const valueBuf = value === undefined ? undefined : Buffer.from(value, 'utf8');
  const found = new MessagesJson();
  const matches = found.messages;
  // Where each partition's scan stands: every record before it was looked at and its matches returned.
  const next: Record<number, number> = {};
  for (const p of partitions) next[p] = Math.max((from instanceof Map ? from.get(p) : from) ?? 0, offsets.get(p)!.earliest);
  let scanned = 0;
  outer: for (const p of partitions) {
    let at = next[p]!;
    const end = readEnd(offsets.get(p)!, isolation);
    while (at < end) {
      if (scanned >= scanLimit || matches.length >= limit) break outer;
      const r = await client.admin.readRecords({ topic, partition: p, offset: at, maxRecords: Math.min(1000, scanLimit - scanned), isolation });
      for (const rec of r.records) {
        const ok =
          (keyBuf === undefined || rec.key?.equals(keyBuf) === true) && (valueBuf === undefined || rec.value.includes(valueBuf)) && (header === undefined || header(rec));
        // A match past `limit`, or one the full reply has no room for: the next search starts with it.
        if (ok && (matches.length >= limit || !found.add(recordJson(p, rec)))) {
          next[p] = rec.offset;
          break outer;
        }
        scanned++;
        next[p] = rec.offset + 1;
      }
      if (r.nextOffset <= at) break;
      at = r.nextOffset;
      next[p] = at;
    }
  }
  const complete = partitions.every((p) => next[p]! >= readEnd(offsets.get(p)!, isolation));
  sendJson(res, 200, { topic, scanned, complete, next, messages: matches });
}

// ---- groups ----

async function listGroups({ url, res, client }: RouteContext): Promise<void> {
  new Query(url.searchParams, []);
  const names = await client.admin.listGroups();
  const groups = await describeEach(names, 'group_not_found', async (name) => {
    const g = await client.admin.describeGroup(name);
    return { group: name, topic: g.topic, state: g.state, generation: g.generation, members: g.members.length, totalLag: g.total_lag };
  });
  sendJson(res, 200, { groups });
}

async function describeGroup({ url, res, client, params }: RouteContext): Promise<void> {
  new Query(url.searchParams, []);
  const g = await client.admin.describeGroup(segment(params[0]!));
  sendJson(res, 200, {
    group: g.group,
    topic: g.topic,
    state: g.state,
    generation: g.generation,
    leader: g.leader,
    assignor: g.assignor,
    protocol: g.protocol,
    members: g.members.map((m) => ({
      memberId: m.member_id,
      clientId: m.client_id,
      instance: m.instance,
      host: m.host,
      generation: m.generation,
      lastHeartbeatMsAgo: m.last_heartbeat_ms_ago,
      sessionTimeoutMs: m.session_timeout_ms,
      assignments: m.assignments,
      target: m.target,
      pending: m.pending,
      needsRejoin: m.needs_rejoin,
    })),
    offsets: g.offsets.map((o) => ({ partition: o.partition, committed: o.committed, logEnd: o.log_end, lag: o.lag, owner: o.owner })),
    totalLag: g.total_lag,
    history: g.history.map((h) => ({ generation: h.generation, at: h.at, rebalanceMs: h.rebalanceMs ?? null, reasons: h.reasons, moved: h.moved ?? null })),
  });
}

const RESET_FIELDS = ['topic', 'partition', 'to', 'offset', 'timestamp', 'dryRun'] as const;

async function resetOffsets({ req, url, res, client, params }: RouteContext): Promise<void> {
  new Query(url.searchParams, []);
  const group = segment(params[0]!);
  const body = await readJsonBody(req, RESET_FIELDS);
  const topic = str(body, 'topic', { required: true })!;
  const to = str(body, 'to', { required: true });
  if (body.dryRun !== undefined && typeof body.dryRun !== 'boolean') throw invalidParam('dryRun', 'must be true or false');
  let target: 'earliest' | 'latest' | { offset: number } | { timestamp: number };
  if (to === 'earliest' || to === 'latest') target = to;
  else if (to === 'offset') target = { offset: checkInt('offset', body.offset) };
  else if (to === 'timestamp') target = { timestamp: checkInt('timestamp', body.timestamp) };
  else throw invalidParam('to', 'expected earliest, latest, offset or timestamp');
  if (to !== 'offset' && body.offset !== undefined) throw invalidParam('offset', 'only with to: "offset"');
  if (to !== 'timestamp' && body.timestamp !== undefined) throw invalidParam('timestamp', 'only with to: "timestamp"');
  const dryRun = body.dryRun === true;
  const entries = await client.admin.resetOffsets({ group, topic, partition: optInt(body, 'partition', { max: 1_000_000 }), to: target, dryRun });
  const ends = new Map((await client.admin.listOffsets(topic)).map((o) => [o.partition, o.latest]));
  sendJson(res, 200, {
    group,
    topic,
    dryRun,
    offsets: entries.map((e) => ({ partition: e.partition, offset: e.offset, lag: Math.max(0, (ends.get(e.partition) ?? e.offset) - e.offset) })),
  });
}

async function deleteGroup({ url, res, client, params }: RouteContext): Promise<void> {
  new Query(url.searchParams, []);
  await client.admin.deleteGroup(segment(params[0]!));
  res.writeHead(204).end();
}

// ---- cluster, users, ACLs ----

async function cluster({ url, res, client }: RouteContext): Promise<void> {
  new Query(url.searchParams, []);
  const s = await client.admin.clusterStatus();
  sendJson(res, 200, {
    mode: s.mode,
    controller: s.controller,
    brokers: s.brokers,
    partitions: s.partitions.length,
    underReplicated: s.under_replicated,
    leaderless: s.leaderless,
    partitionStates: s.partitions,
  });
}

// ---- dispatch ----

export class AdminApi {
  private readonly routes: Route[] = [];
  private readonly backoff = new AuthBackoff();

  constructor(private readonly deps: AdminApiDeps) {
    const tails = new TailCount();
    const r = (method: string, path: string, handler: Handler) => {
      const pattern = new RegExp(`^/api/v1${path.replace(/:[a-z]+/g, '([^/]+)')}$`);
      this.routes.push({ method, pattern, handler });
    };
    r('GET', '/cluster', cluster);
    r('GET', '/topics', listTopics);
    r('POST', '/topics', createTopic);
    r('GET', '/topics/:topic', describeTopic);
    r('PATCH', '/topics/:topic', alterTopic);
    r('DELETE', '/topics/:topic', deleteTopic);
    r('POST', '/topics/:topic/partitions', addPartitions);
    r('GET', '/topics/:topic/messages', readMessages);
    r('POST', '/topics/:topic/messages', produceMessage);
    r('GET', '/topics/:topic/search', searchMessages);
    r('GET', '/topics/:topic/tail', (ctx) => tail(ctx, { clients: deps.clients, tails, writeStallTimeoutMs: deps.config.writeStallTimeoutMs }, deps.config.authentication ? credentialsOf(ctx.req) : undefined));
    r('GET', '/groups', listGroups);
    r('GET', '/groups/:group', describeGroup);
    r('POST', '/groups/:group/reset-offsets', resetOffsets);
    r('DELETE', '/groups/:group', deleteGroup);
    r('GET', '/users', (ctx) => this.users(ctx));
    r('GET', '/acls', (ctx) => this.acls(ctx));
  }

  /** Users and their permissions, never a hash or salt; `admin` only (the CLUSTER_STATUS requirement). */
  private async users(ctx: RouteContext): Promise<void> {
    new Query(ctx.url.searchParams, []);
    if (this.deps.config.authentication) await ctx.client.admin.clusterStatus();
    const users = this.deps.security?.().users ?? Object.entries(this.deps.config.users).map(([principal, u]) => ({ principal, permissions: u.permissions }));
    sendJson(ctx.res, 200, { authentication: this.deps.config.authentication, users });
  }

  private async acls(ctx: RouteContext): Promise<void> {
    new Query(ctx.url.searchParams, []);
    if (this.deps.config.authentication) await ctx.client.admin.clusterStatus();
    const acls = Object.entries(this.deps.security?.().acls ?? this.deps.config.topicAcls).map(([topic, a]) => ({ topic, read: a.read ?? null, write: a.write ?? null }));
    const groups = Object.entries(this.deps.security?.().groupAcls ?? this.deps.config.groupAcls).map(([group, principals]) => ({ group, principals }));
    sendJson(ctx.res, 200, { authentication: this.deps.config.authentication, acls, groupAcls: groups });
  }

  /**
   * A request with credentials (authentication on), held off while its address failed too often
   * (auth-backoff.ts); its outcome counts towards that.
   */
  private async authenticated<T>(req: http.IncomingMessage, principal: string, run: () => Promise<T>): Promise<T> {
    if (!this.deps.config.authentication) return run();
    // The HTTP client's own address (no forwarded header is trusted, docs/http-api.md): the broker's
    // line for the same failure shows the API's loopback connection, no use for an audit.
    const address = req.socket.remoteAddress ?? '';
    this.backoff.check(address);
    try {
      const out = await run();
      this.backoff.succeeded(address);
      return out;
    } catch (err) {
      let failed = err as TributaryError;
      // Credentials were sent, so authentication_required means they no longer log in (the user was removed
      // or its token rotated since the API's client logged in): a failed login as docs/http-api.md says.
      if (failed.code === 'authentication_required') failed = new TributaryError('authentication_failed', { principal, reason: 'the credentials are no longer valid' });
      if (failed.code !== 'authentication_failed') throw err;
      this.backoff.failed(address);
      this.deps.logger.warn({ principal, remote: `${address}:${req.socket.remotePort ?? 0}`, via: 'http' }, 'authentication failed');
      throw failed;
    }
  }

  /**
   * GET /api/v1/session, open to anyone: whether authentication is on and whether the credentials sent
   * (if any) are valid. Always 200, so the console can ask before signing in without a failed request.
   */
  private async session(req: http.IncomingMessage, res: http.ServerResponse, url: URL): Promise<void> {
    new Query(url.searchParams, []);
    const authentication = this.deps.config.authentication;
    let auth: ReturnType<typeof credentialsOf>;
    try {
      auth = authentication ? credentialsOf(req) : undefined;
    } catch {
      sendJson(res, 200, { authentication, principal: null, authenticated: false });
      return;
    }
    if (!authentication || !auth) {
      sendJson(res, 200, { authentication, principal: null, authenticated: !authentication });
      return;
    }
    try {
      // LIST needs an authenticated connection and no permission: it checks the token only.
      await this.authenticated(req, auth.principal, () => this.deps.clients.with(auth, (c) => c.admin.listTopics()));
      sendJson(res, 200, { authentication, principal: auth.principal, authenticated: true });
    } catch (err) {
      const code = (err as TributaryError).code;
      if (code !== 'authentication_failed' && code !== 'authentication_required') throw err;
      sendJson(res, 200, { authentication, principal: null, authenticated: false });
    }
  }

  /** Serves one request under `/api/v1/`. */
  async handle(req: http.IncomingMessage, res: http.ServerResponse, url: URL): Promise<void> {
    try {
      checkQueryEncoding(url.search);
      if (url.pathname === '/api/v1/session') {
        if (req.method === 'GET' || req.method === 'HEAD') await this.session(req, res, url);
        else sendRouteError(res, url, req.method, 'GET');
        return;
      }
      // Credentials in a URL end up in logs and histories: refused before anything reads them (400, not a 401).
      for (const name of ['token', 'access_token']) if (url.searchParams.has(name)) throw invalidParam(name, 'credentials go in the Authorization header, never in a URL');
      const candidates = this.routes.filter((r) => r.pattern.test(url.pathname));
      if (candidates.length === 0) {
        sendRouteError(res, url, req.method);
        return;
      }
      const method = req.method === 'HEAD' ? 'GET' : req.method;
      const route = candidates.find((r) => r.method === method);
      if (!route) {
        const allow = [...new Set(candidates.map((r) => r.method))].join(', ');
        sendRouteError(res, url, req.method, allow);
        return;
      }
      // A body where the route reads none (DELETE /topics/x with {"dryRun":true}) is refused, not ignored.
      if (route.method !== 'POST' && route.method !== 'PATCH' && (Number(req.headers['content-length'] ?? 0) > 0 || req.headers['transfer-encoding'] !== undefined)) {
        throw invalidParam('body', `${method} ${url.pathname} takes no body`);
      }
      const params = route.pattern.exec(url.pathname)!.slice(1);
      // Only with authentication on: a proxy's own Authorization header (Bearer ...) is none of ours otherwise.
      const auth = this.deps.config.authentication ? credentialsOf(req) : undefined;
      if (this.deps.config.authentication && !auth) throw new TributaryError('authentication_required', { reason: 'send Authorization: Basic base64(principal:token)' });
      const principal = this.deps.config.authentication ? auth?.principal : undefined;
      await this.authenticated(req, principal ?? '', () => this.deps.clients.with(this.deps.config.authentication ? auth : undefined, (client) => route.handler({ req, res, url, params, client, principal })));
    } catch (err) {
      if (!(err instanceof TributaryError) || statusOf500(err)) this.deps.logger.error({ err, path: url.pathname, method: req.method }, 'admin API request failed');
      if (res.headersSent) res.end();
      else sendError(res, err);
    }
  }
}

function statusOf500(err: TributaryError): boolean {
  return err.errorClass === 'internal' && err.code !== 'storage_error';
}
