import { type Params, formatOk } from 'tributary-protocol/command.js';
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import { formatMarked } from '../cluster/fetch-watch.js';
import { STORED_FORMAT, encodeBatchReply, encodeStoredReply } from '../cluster/replica-wire.js';
import { READ_HEADER_COST } from '../storage/record-codec.js';
import { readBytesLimit } from '../common/config.js';
import { failpointDelay } from '../common/failpoints.js';
import type { BrokerContext, CommandSpec, ConnectionContext, Reply } from './command-context.js';

/** Broker-to-broker commands of cluster mode: followers fetching from their leader. */

function cluster(b: BrokerContext) {
  if (!b.cluster) throw new TributaryError('unknown_command', { command: 'REPLICA_FETCH', reason: 'this broker is not in cluster mode' });
  return b.cluster;
}

/**
 * REPLICA_FETCH: a follower at `offset` (its log end) asks for what follows, up to the leader's log end
 * (not only the HWM: followers are what moves the HWM), with every stored field and append boundary, and
 * the leader's HWM. `format=stored`: the records as stored, else one batch frame whose trailer carries the
 * HWM (cluster/replica-wire.ts); both written from the stored bytes, no object per record or header.
 * Long-polls `wait_ms` when there is nothing new. A follower naming a tombstone horizon below the leader's
 * gets that horizon instead of records (cluster/tombstone-horizon.ts).
 */
async function replicaFetch(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const node = cluster(b);
  const topic = p.reqStr('topic', { maxLength: 100_000 });
  const partition = p.reqInt('partition', { min: 0, max: 1_000_000 });
  const offset = p.reqInt('offset', { min: 0 });
  const epoch = p.reqInt('leader_epoch', { min: 0 });
  const replica = p.reqInt('replica', { min: 0 });
  const maxBytes = Math.min(p.int('max_bytes', { min: 1 }) ?? 1024 * 1024, readBytesLimit(b.config.maxFrameBytes));
  const waitMs = Math.min(p.int('wait_ms', { min: 0 }) ?? 0, b.config.maxWaitMs);
  const park = p.bool('park') ?? false;
  const topicId = p.str('topic_id', { maxLength: 100 });
  const knownHorizon = p.int('tombstone_horizon', { min: 0 });
  const format = p.str('format', { maxLength: 100 });
  if (format !== undefined && format !== STORED_FORMAT) throw invalidParam('format', `only ${STORED_FORMAT} (without it: a batch frame)`);
  // A follower that stores append blocks; without it (the previous version) blocks go as per-record records.
  const blocks = p.bool('blocks') ?? false;
  if (blocks && format !== STORED_FORMAT) throw invalidParam('blocks', `only with format=${STORED_FORMAT}`);
  if (park && waitMs > 0) throw invalidParam('park', 'a parked fetch does not wait at the leader (REPLICA_WAIT does)');
  const r = node.replicas.followerFetch(topic, partition, replica, epoch, offset, topicId);
  const part = r.partition;
  if (part.localEnd <= offset && waitMs > 0) {
    await part.waitForLogEnd(offset, waitMs);
    // The wait may have outlived the leadership.
    node.replicas.followerFetch(topic, partition, replica, epoch, offset, topicId);
  }
  const end = part.localEnd;
  // A batch frame's reader builds an object per record and header: headers are charged between appends.
  // Its encoder reads blocks itself (replica-wire.ts); format=stored without blocks=true converts them.
  const headerCost = format === STORED_FORMAT ? 0 : READ_HEADER_COST;
  const read =
    offset < end
      ? await part.log.readStoredAppends(Math.max(offset, part.earliest), { maxRecords: 10_000, maxBytes, maxOffset: end, headerCost, blocks: blocks || format !== STORED_FORMAT })
      : { runs: [], count: 0, bytes: 0, next: offset };
  // Read after the records: compaction raises it before a segment without a tombstone can be read, so
  // these records never reach a follower that has not heard of the tombstones they lack.
  const horizon = part.log.tombstoneHorizon;
  if (knownHorizon !== undefined && horizon > knownHorizon) return formatOk({ topic, partition, tombstone_horizon: horizon });
  // Nothing new: the follower parks the partition until REPLICA_WAIT reports news (cluster/fetch-watch.ts).
  if (park && read.count === 0) node.replicas.parkFollower(r, replica, end, part.highWatermark);
  const trailer = { nextOffset: read.count > 0 ? read.next : offset, highWatermark: part.highWatermark, logStartOffset: part.earliest };
  return format === STORED_FORMAT ? encodeStoredReply(read, trailer) : encodeBatchReply(topic, partition, read, trailer);
}

/**
 * REPLICA_WAIT: the partitions this broker leads that a follower parked (`REPLICA_FETCH ... park=true`
 * found nothing new) and that have news since (a longer log, a higher HWM); long-polls `wait_ms` while
 * there are none. One per follower and leader replaces a long-polling connection per partition.
 */
async function replicaWait(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const node = cluster(b);
  const replica = p.reqInt('replica', { min: 0 });
  const waitMs = Math.min(p.int('wait_ms', { min: 0 }) ?? 0, b.config.maxWaitMs);
  const marked = await node.replicas.waitMarked(replica, waitMs);
  return formatOk({ replica, partitions: formatMarked(marked) });
}

/**
 * LEADER_EPOCHS: the leader's epoch history (`epoch:start_offset,...`), log end and tombstone horizon, for
 * follower truncation, and the REPLICA_FETCH formats it offers.
 */
async function leaderEpochs(b: BrokerContext, _c: ConnectionContext, p: Params): Promise<Reply> {
  const node = cluster(b);
  const topic = p.reqStr('topic', { maxLength: 100_000 });
  const partition = p.reqInt('partition', { min: 0, max: 1_000_000 });
  await failpointDelay(`leader.epochs:${topic}`); // fault tests: a leader that does not answer for a while
  const h = node.replicas.epochHistory(topic, partition, p.reqInt('leader_epoch', { min: 0 }));
  return formatOk({
    topic,
    partition,
    log_end: h.logEnd,
    epochs: h.epochs.map(([e, o]) => `${e}:${o}`).join(','),
    tombstone_horizon: h.tombstoneHorizon,
    // The REPLICA_FETCH formats this broker answers besides the batch frame (a leader of an older version: none),
    // and that it takes blocks=true (the previous version: no `blocks`).
    formats: STORED_FORMAT,
    blocks: true,
  });
}

/** PARTITIONS_READY: which of the partitions this broker leads and serves now (a waiting CREATE asks). */
function partitionsReady(b: BrokerContext, _c: ConnectionContext, p: Params): Reply {
  const node = cluster(b);
  const topic = p.reqStr('topic', { maxLength: 100_000 });
  const list = p.reqStr('partitions', { maxLength: 100_000 }).split(',');
  const partitions = list.map((x) => {
    if (!/^[0-9]{1,7}$/.test(x)) throw invalidParam('partitions', 'a comma-separated list of partition numbers');
    return Number(x);
  });
  return formatOk({ topic, ready: node.servingNow(topic, partitions).join(',') });
}

export const REPLICA_COMMANDS: Record<string, CommandSpec> = {
  PARTITIONS_READY: { handler: partitionsReady, params: ['partitions', 'topic'] },
  REPLICA_FETCH: { handler: replicaFetch, params: ['blocks', 'format', 'leader_epoch', 'max_bytes', 'offset', 'park', 'partition', 'replica', 'tombstone_horizon', 'topic', 'topic_id', 'wait_ms'] },
  REPLICA_WAIT: { handler: replicaWait, params: ['replica', 'wait_ms'] },
  LEADER_EPOCHS: { handler: leaderEpochs, params: ['leader_epoch', 'partition', 'topic'] },
};
