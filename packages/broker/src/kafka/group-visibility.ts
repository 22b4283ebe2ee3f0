import { TributaryError } from 'tributary-protocol/errors.js';
import type { ClassicGroups } from '../coordinator/classic-groups.js';
import { decodeAssignment, decodeSubscription } from './protocol/consumer-protocol.js';
import type { KafkaStruct } from './protocol/schema.js';

/**
 * Groups as the topic ACLs let a principal see them (docs/security.md, "Groups and topic ACLs"): a group
 * whose topics the principal may not all describe is left out of the group lists, and a description of
 * it is refused as DESCRIBE of such a topic is (an authorization error, not the group's contents), on
 * both ports and so in the HTTP API. Otherwise GROUP_STATUS would name the topic and its lag, which
 * METADATA and LIST hide (docs/kafka.md: a principal "cannot tell whether a topic it may not describe exists").
 */

/** Whether the principal may describe a topic: the METADATA/LIST check (security.ts `canDescribe`). */
export type Describable = (topic: string) => boolean;

/**
 * The topics a group names, or undefined when one of them cannot be known: a Kafka consumer-protocol
 * member whose subscription or assignment does not parse (hidden rather than guessed). A classic group of
 * another protocol type (not `consumer`) names topics only through its committed offsets.
 */
function topicsOf(groups: ClassicGroups, groupId: string): string[] | undefined {
  const f = groups.footprint(groupId);
  if (!f) return [];
  const topics = [...f.topics];
  if (f.protocolType !== 'consumer') return topics;
  try {
    for (const b of f.subscriptions) topics.push(...(decodeSubscription(b).value.topics as string[]));
    for (const b of f.assignments) topics.push(...(decodeAssignment(b).value.assignedPartitions as KafkaStruct[]).map((t) => t.topic as string));
  } catch {
    return undefined;
  }
  return topics;
}

/** Authentication off: every topic, so every group, whatever its members' bytes (nothing to hide them from). */
export const EVERY_TOPIC: Describable = () => true;

/** The group names no topic the principal may not describe (an unknown group names none). */
export function groupVisible(groups: ClassicGroups, groupId: string, describable: Describable): boolean {
  // Not decoded at all: a group whose bytes do not parse is shown (as raw bytes) when nothing is hidden.
  if (describable === EVERY_TOPIC) return true;
  return topicsOf(groups, groupId)?.every(describable) ?? false;
}

/** The refusal of a description of a hidden group: class authorization (403 over HTTP, GROUP_AUTHORIZATION_FAILED on the Kafka port). */
export function hiddenGroup(command: string, groupId: string, principal: string | undefined): TributaryError {
  return new TributaryError('NOT_AUTHORIZED_FOR_OPERATION', {
    command,
    permission: 'topic.read',
    group: groupId,
    ...(principal === undefined ? {} : { principal }),
    reason: 'the group consumes a topic the principal may not describe',
  });
}

/**
 * A group command's `group <g> consumes topic <t>` refusal (the coordinator's, for a topic other than the
 * group's) with the topic left out when the principal may not describe it: the error itself must not name it.
 */
export function withoutHiddenTopic(err: unknown, groupId: string | undefined, describable: Describable): unknown {
  if (groupId === undefined || !(err instanceof TributaryError) || err.code !== 'invalid_parameter' || err.fields.param !== 'topic') return err;
  const prefix = `group ${groupId} consumes topic `;
  const reason = err.fields.reason;
  if (typeof reason !== 'string' || !reason.startsWith(prefix) || describable(reason.slice(prefix.length))) return err;
  return new TributaryError('invalid_parameter', { param: 'topic', reason: `group ${groupId} consumes another topic` });
}
