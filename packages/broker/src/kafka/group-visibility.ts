import { TributaryError } from 'tributary-protocol/errors.js';
import { inScope, type TopicScope } from '../common/topic-scope.js';
import type { ClassicGroups } from '../coordinator/classic-groups.js';
import { decodeAssignment, decodeSubscription } from './protocol/consumer-protocol.js';
import type { KafkaStruct } from './protocol/schema.js';

/**
 * Groups as the topic ACLs let a principal see them (docs/security.md, "Groups and topic ACLs"): a group
 * whose topics the principal may not all describe is left out of the group lists, and a description of
 * it is refused as DESCRIBE of such a topic is (an authorization error, not the group's contents), on
 * both ports and so in the HTTP API. Otherwise GROUP_STATUS would name the topic and its lag, which
 * METADATA and LIST hide (docs/kafka.md: a principal "cannot tell whether a topic it may not describe exists").
 * Here: the topics a group names (which takes the Kafka consumer protocol) and the refusals; whether a
 * principal sees a group is the security layer's decision (broker/security.ts `groupVisible`).
 */

/** Topics named by one member's subscription or assignment bytes; null when they do not parse. */
type Decoded = readonly string[] | null;

// Per bytes object: a member's bytes change only by being replaced (JoinGroup, SyncGroup, a load), so a
// group list or description decodes each subscription and assignment once, not on every request.
const subscriptionTopics = new WeakMap<Buffer, Decoded>();
const assignmentTopics = new WeakMap<Buffer, Decoded>();

function decodedOnce(cache: WeakMap<Buffer, Decoded>, bytes: Buffer, decode: (b: Buffer) => string[]): Decoded {
  let topics = cache.get(bytes);
  if (topics === undefined) {
    try {
      topics = decode(bytes);
    } catch {
      topics = null;
    }
    cache.set(bytes, topics);
  }
  return topics;
}

const subscribed = (b: Buffer) => decodeSubscription(b).value.topics as string[];
const assigned = (b: Buffer) => (decodeAssignment(b).value.assignedPartitions as KafkaStruct[]).map((t) => t.topic as string);

/**
 * The topics a group names, or undefined when one of them cannot be known: a Kafka consumer-protocol
 * member whose subscription or assignment does not parse (hidden rather than guessed). A classic group of
 * another protocol type (not `consumer`) names topics only through its committed offsets.
 */
export function groupTopics(groups: ClassicGroups, groupId: string): string[] | undefined {
  const f = groups.footprint(groupId);
  if (!f) return [];
  const topics = [...f.topics];
  if (f.protocolType !== 'consumer') return topics;
  for (const [cache, all, decode] of [
    [subscriptionTopics, f.subscriptions, subscribed],
    [assignmentTopics, f.assignments, assigned],
  ] as const) {
    for (const b of all) {
      const named = decodedOnce(cache, b, decode);
      if (named === null) return undefined;
      topics.push(...named);
    }
  }
  return topics;
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
export function withoutHiddenTopic(err: unknown, groupId: string | undefined, scope: TopicScope): unknown {
  if (groupId === undefined || !(err instanceof TributaryError) || err.code !== 'invalid_parameter' || err.fields.param !== 'topic') return err;
  const prefix = `group ${groupId} consumes topic `;
  const reason = err.fields.reason;
  if (typeof reason !== 'string' || !reason.startsWith(prefix) || inScope(scope, reason.slice(prefix.length))) return err;
  return new TributaryError('invalid_parameter', { param: 'topic', reason: `group ${groupId} consumes another topic` });
}
