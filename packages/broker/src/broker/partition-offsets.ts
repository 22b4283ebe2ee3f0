import { parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type LogOffsets, localLogOffsets, parseLogOffsets } from '../partition/log-offsets.js';
import type { BrokerContext } from './command-context.js';

/**
 * A partition's offsets from its leader (partition/log-offsets.ts): this broker's copy when it leads or
 * runs standalone, else the leader's answer to LIST_OFFSETS. Throws when the leader cannot be asked:
 * callers choose between a follower's trailing view (LIST_OFFSETS) and no figure at all (group lag, resets).
 */
export async function partitionOffsets(b: BrokerContext, topic: string, partition: number, timestamp?: number): Promise<LogOffsets> {
  const p = b.topics.get(topic).partition(partition);
  const cluster = b.cluster;
  if (!cluster || cluster.isLeader(topic, partition)) return localLogOffsets(p, timestamp);
  const reply = await (await cluster.leaderPeer(topic, partition)).command('LIST_OFFSETS', { topic, partition, timestamp });
  const offsets = parseLogOffsets(partition, parseLine(reply).params.get('offsets') ?? '');
  if (!offsets) throw new TributaryError('NOT_LEADER', { topic, partition, reason: `unexpected LIST_OFFSETS reply: ${reply.slice(0, 200)}` });
  return offsets;
}
