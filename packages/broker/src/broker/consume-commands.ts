/** Reading: CONSUME, and the request parsing and batch reads STREAM shares (client-connection.ts). */
import { encodeBatch, logRecordsToBatch } from 'tributary-protocol/batch.js';
import type { Params } from 'tributary-protocol/command.js';
import { invalidParam } from 'tributary-protocol/errors.js';
import { readBytesLimit } from '../common/config.js';
import type { BrokerContext, CommandSpec, ConnectionContext, Reply } from './command-context.js';
import type { Isolation, Partition } from '../partition/partition.js';
import { leaderGate } from './produce-commands.js';
import { type ReadFence, checkReadFence } from './read-fence.js';
const MAX_CONSUME_RECORDS = 10_000;
const DEFAULT_CONSUME_RECORDS = 500;
const DEFAULT_CONSUME_BYTES = 1024 * 1024;


export interface ReadRequest {
  topic: string;
  partition: Partition;
  offset: number;
  /** Cluster mode: the group whose committed offset another broker (its coordinator) holds. */
  remoteGroup?: string;
  /** `member=` and `generation=` given: served only while the member owns the partition (read-fence.ts). */
  fence?: ReadFence;
  reset?: 'earliest' | 'latest' | 'error';
  isolation: Isolation;
  maxRecords: number;
  maxBytes: number;
}

/** The parameters CONSUME and STREAM share (parseReadRequest). */
export const READ_PARAMS = ['topic', 'partition', 'offset', 'group', 'member', 'generation', 'isolation', 'batch', 'max_bytes', 'autoOffsetReset'] as const;

/** STREAM's parameters: the shared ones and how often an idle stream sends a keepalive. */
export const STREAM_PARAMS = [...READ_PARAMS, 'keepalive_ms'];

/** Parse the parameters CONSUME and STREAM share, and resolve the start offset. */
export function parseReadRequest(b: BrokerContext, p: Params): ReadRequest {
  const topic = b.topics.get(p.reqStr('topic', { maxLength: 100_000 }));
  const partition = topic.partition(p.reqInt('partition', { min: 0, max: 1_000_000 }));
  leaderGate(b, partition);
  let offset = p.reqInt('offset', { min: 0 });
  const group = p.str('group', { maxLength: 255 });
  const member = p.str('member', { maxLength: 255 });
  const generation = p.int('generation', { min: 0, max: 2 ** 31 - 1 });
  // A member fences the read; a group alone only starts it at the committed offset (docs/protocol.md).
  if ((member === undefined) !== (generation === undefined)) throw invalidParam(member === undefined ? 'member' : 'generation', 'member and generation fence a read together: give both or neither');
  if (member !== undefined && group === undefined) throw invalidParam('group', 'member and generation need the group they belong to');
  const fence = member !== undefined && group !== undefined ? { group, member, generation: generation! } : undefined;
  // The broker-owned committed offset is authoritative: a lower requested offset starts there instead.
  let remoteGroup: string | undefined;
  if (group !== undefined) {
    if (b.cluster && !b.coordinator.coordinates(group)) {
      remoteGroup = group;
    } else {
      const committed = b.coordinator.committedOffset(group, topic.name, partition.id);
      if (committed !== undefined && committed > offset) offset = committed;
    }
  }
  const isolation = p.oneOf('isolation', ['read_committed', 'read_uncommitted'] as const) ?? 'read_committed';
  const maxRecords = p.int('batch', { min: 1, max: MAX_CONSUME_RECORDS }) ?? DEFAULT_CONSUME_RECORDS;
  const maxBytes = Math.min(p.int('max_bytes', { min: 1 }) ?? DEFAULT_CONSUME_BYTES, readBytesLimit(b.config.maxFrameBytes));
  const reset = p.oneOf('autoOffsetReset', ['earliest', 'latest', 'error'] as const) ?? 'error';
  if (offset < partition.earliest || offset > partition.logEndOffset) {
    if (reset === 'earliest') offset = partition.earliest;
    else if (reset === 'latest') offset = partition.lastStableOffset;
    else partition.checkOffset(offset);
  }
  const req: ReadRequest = { topic: topic.name, partition, offset, isolation, maxRecords, maxBytes };
  if (fence) req.fence = fence;
  if (remoteGroup !== undefined) Object.assign(req, { remoteGroup, reset });
  return req;
}

/**
 * A fenced read's check (read-fence.ts); nothing for an unfenced one. Returns how long its answer holds.
 * `running`: a stream already admitted, which only its partition's ownership keeps going.
 */
export function checkFence(b: BrokerContext, req: ReadRequest, running = false): Promise<number> | number {
  return req.fence ? checkReadFence(b, req.topic, req.partition.id, req.fence, running) : Number.POSITIVE_INFINITY;
}

/**
 * Cluster mode, CONSUME/STREAM with a group this broker does not coordinate: the start is still
 * max(requested, committed), with the committed offset asked of the group's coordinator once per
 * connection (consumer session), not per request.
 */
export async function resolveRemoteStart(b: BrokerContext, c: ConnectionContext, req: ReadRequest): Promise<void> {
  if (req.remoteGroup === undefined || !b.cluster) return;
  const key = `${req.remoteGroup}\u0000${req.topic}\u0000${req.partition.id}`;
  c.remoteCommitted ??= new Map();
  let committed: number | undefined;
  if (c.remoteCommitted.has(key)) committed = c.remoteCommitted.get(key);
  else {
    committed = await b.cluster.fetchCommitted(req.remoteGroup, b.coordinator.partitionFor(req.remoteGroup), req.topic, req.partition.id);
    c.remoteCommitted.set(key, committed);
  }
  if (committed !== undefined && committed > req.offset) {
    req.offset = committed;
    if (req.offset > req.partition.logEndOffset) {
      if (req.reset === 'earliest') req.offset = req.partition.earliest;
      else if (req.reset === 'latest') req.offset = req.partition.lastStableOffset;
      else req.partition.checkOffset(req.offset);
    }
  }
}

export async function readBatch(b: BrokerContext, c: ConnectionContext, req: ReadRequest, offset: number): Promise<{ frame: Buffer | Buffer[]; nextOffset: number; count: number }> {
  // Only the partition's leader serves reads, checked at every read: a long poll or a STREAM outlives a
  // leadership move, and a broker moved off a partition drops its copy, whose answer (OFFSET_OUT_OF_RANGE
  // 0..0) would make a consumer reset its position (docs/protocol.md, "Reading").
  leaderGate(b, req.partition);
  const ext = c.features.has('record_extensions_v1');
  const opts = { maxRecords: req.maxRecords, maxBytes: req.maxBytes, isolation: req.isolation };
  // Fast paths: the tail cache, else the segment files, write the reply batch directly (the same bytes as
  // below, with no object per record or header); from the cache, block records in views of its memory
  // (parts: the connection writes them one after another, corked).
  const to = { topic: req.topic, extensions: ext, alloc: b.replyBuffers?.take, views: true };
  const wire = req.partition.readWire(offset, opts, to) ?? (await req.partition.readWireFromDisk(offset, opts, to));
  if (wire) {
    if (wire.count > 0) {
      b.metrics.recordsOut.inc({ topic: req.topic }, wire.count);
      b.metrics.bytesOut.inc({ topic: req.topic }, wire.valueBytes);
    }
    return { frame: wire.parts ?? wire.frame, nextOffset: wire.nextOffset, count: wire.count };
  }
  const res = await req.partition.read(offset, opts);
  const trailer = ext ? { nextOffset: res.nextOffset, highWatermark: req.partition.highWatermark, logStartOffset: req.partition.earliest } : undefined;
  const frame = encodeBatch(logRecordsToBatch(req.topic, req.partition.id, res.records, trailer), { extensions: ext });
  if (res.records.length > 0) {
    let bytes = 0;
    for (const r of res.records) bytes += r.value.length;
    b.metrics.recordsOut.inc({ topic: req.topic }, res.records.length);
    b.metrics.bytesOut.inc({ topic: req.topic }, bytes);
  }
  return { frame, nextOffset: res.nextOffset, count: res.records.length };
}

async function consume(b: BrokerContext, c: ConnectionContext, p: Params): Promise<Reply> {
  // The fetch phases (docs/operations.md, "Metrics"): queue, wait (long poll), read (the last read).
  const receivedAt = c.receivedAt;
  const handled = performance.now();
  const phase = b.metrics.fetchPhase;
  if (receivedAt !== undefined) phase.child('queue').observe((handled - receivedAt) / 1000);
  const req = parseReadRequest(b, p);
  await checkFence(b, req);
  await resolveRemoteStart(b, c, req);
  const waitMs = Math.min(p.int('wait_ms', { min: 0 }) ?? 0, b.config.maxWaitMs);
  let readStarted = performance.now();
  let out = await readBatch(b, c, req, req.offset);
  if (out.count === 0 && waitMs > 0) {
    // Monotonic: a step of the wall clock must not stretch or cut the wait.
    const deadline = performance.now() + waitMs;
    let offset = out.nextOffset;
    // Loop: data past the HWM may be filtered (control records), so keep waiting until the deadline.
    while (out.count === 0 && !req.partition.isClosed) {
      const left = deadline - performance.now();
      if (left <= 0) break;
      await req.partition.waitForData(offset, left, undefined, req.isolation);
      readStarted = performance.now();
      out = await readBatch(b, c, req, offset);
      offset = out.nextOffset;
    }
  }
  // Again once the records are in hand: the member may have lost the partition during the long poll,
  // and the principal its rights (a SIGHUP revoked or changed them): records written since are not theirs.
  await checkFence(b, req);
  if (waitMs > 0) {
    const refused = b.security?.authorize('CONSUME', c, p.line);
    if (refused) throw refused;
  }
  const done = performance.now();
  phase.child('wait').observe((readStarted - handled) / 1000);
  phase.child('read').observe((done - readStarted) / 1000);
  return out.frame;
}


export const CONSUME_COMMANDS: Record<string, CommandSpec> = {
  // Not pipelined: reads see earlier appends of the connection, and one reply is built at a time.
  CONSUME: { handler: consume, params: [...READ_PARAMS, 'wait_ms'] },
};
