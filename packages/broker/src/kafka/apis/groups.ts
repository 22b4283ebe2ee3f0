/**
 * The Kafka classic group protocol (docs/kafka.md, "Consumer groups"): FindCoordinator, JoinGroup,
 * SyncGroup, Heartbeat, LeaveGroup, DescribeGroups and ListGroups, served by the same group coordinator
 * as Tributary's groups (coordinator/classic-groups.ts). A group lives on the leader of its
 * `__consumer_offsets` partition, as on the main port; elsewhere its requests get NOT_COORDINATOR and the
 * client asks FindCoordinator again.
 */
import { OFFSETS_TOPIC } from '../../coordinator/group-log.js';
import { TXN_STATE_TOPIC } from '../../txn/txn-log.js';
import type { ClassicJoinRequest } from '../../coordinator/classic-groups.js';
import { apiByKey } from '../protocol/apis.js';
import { kafkaErrorCode } from '../protocol/error-codes.js';
import { DescribeGroups, FindCoordinator, ListGroups } from '../protocol/messages/coordinator.js';
import { Heartbeat, JoinGroup, LeaveGroup, SyncGroup } from '../protocol/messages/group-membership.js';
import type { KafkaStruct } from '../protocol/schema.js';
import type { KafkaRequestContext } from '../context.js';
import { coordinatorErrorCodeOf, errorCodeOf, handler, refusal } from './handler.js';
import { kafkaNodes } from './metadata.js';
import { hiddenGroup } from '../group-visibility.js';

const UNKNOWN_OPERATIONS = -2147483648;
const GROUP_KEY = 0;
const TRANSACTION_KEY = 1;

/** Where the key's coordinator is: the Kafka address of the leader of its internal partition. */
function locate(ctx: KafkaRequestContext, key: string, keyType: number): { nodeId: number; host: string; port: number } {
  const b = ctx.broker;
  if (keyType !== GROUP_KEY && keyType !== TRANSACTION_KEY) throw Object.assign(new Error('bad key type'), { kafka: 'INVALID_REQUEST' });
  const denied = ctx.authorize('FIND_COORDINATOR', undefined, keyType === GROUP_KEY ? { group: key } : { transactional_id: key });
  if (denied) throw refusal(denied, keyType === GROUP_KEY ? 'group' : 'transactional_id');
  if (!b.cluster) return { nodeId: b.brokerId, host: ctx.advertised.host, port: ctx.advertised.port };
  const topic = keyType === GROUP_KEY ? OFFSETS_TOPIC : TXN_STATE_TOPIC;
  const partition = keyType === GROUP_KEY ? b.coordinator.partitionFor(key) : b.transactions.partitionFor(key);
  const leader = b.cluster.states.get(topic, partition)?.value.leader;
  const node = kafkaNodes(ctx).find((n) => n.nodeId === leader);
  // Not created yet, no leader, or a leader without a Kafka listener: the client waits and asks again.
  if (!node) throw Object.assign(new Error(`${topic}[${partition}] has no leader with a Kafka listener`), { kafka: 'COORDINATOR_NOT_AVAILABLE' });
  return { nodeId: node.nodeId as number, host: node.host as string, port: node.port as number };
}

function locateCode(err: unknown): number {
  const named = (err as { kafka?: string }).kafka;
  return named ? kafkaErrorCode(named) : errorCodeOf(err);
}

const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

export const findCoordinatorHandler = handler(apiByKey(FindCoordinator.apiKey)!, (ctx, version, body) => {
  const keyType = version >= 1 ? (body.keyType as number) : GROUP_KEY;
  if (version >= 4) {
    return {
      throttleTimeMs: 0,
      coordinators: (body.coordinatorKeys as string[]).map((key) => {
        try {
          return { key, ...locate(ctx, key, keyType), errorCode: 0, errorMessage: null };
        } catch (err) {
          return { key, nodeId: -1, host: '', port: -1, errorCode: locateCode(err), errorMessage: message(err) };
        }
      }),
    };
  }
  try {
    return { throttleTimeMs: 0, errorCode: 0, errorMessage: null, ...locate(ctx, body.key as string, keyType) };
  } catch (err) {
    return { throttleTimeMs: 0, errorCode: locateCode(err), errorMessage: message(err), nodeId: -1, host: '', port: -1 };
  }
});

/** The main port's permission check of a group command (group permission and topic.read, docs/kafka.md). */
function authorizeGroup(ctx: KafkaRequestContext, command: string, group: string): void {
  const denied = ctx.authorize(command, undefined, { group });
  if (denied) throw refusal(denied, 'group');
}

/** Whether this connection sees the group (the security layer's decision, as on the main port). */
function visible(ctx: KafkaRequestContext, groupId: string): boolean {
  return ctx.broker.security.groupVisible(ctx.identity, ctx.broker.coordinator.classic, groupId);
}

function clientHost(ctx: KafkaRequestContext): string {
  const remote = ctx.identity.remote;
  return `/${remote.slice(0, remote.lastIndexOf(':'))}`;
}

export const joinGroupHandler = handler(apiByKey(JoinGroup.apiKey)!, async (ctx, version, body, header) => {
  const session = body.sessionTimeoutMs as number;
  const req: ClassicJoinRequest = {
    group: body.groupId as string,
    memberId: body.memberId as string,
    instanceId: (body.groupInstanceId as string | null) ?? null,
    clientId: header.clientId ?? '',
    clientHost: clientHost(ctx),
    sessionTimeoutMs: session,
    // v0 has none: the session timeout stands in, as in Kafka.
    rebalanceTimeoutMs: version >= 1 && (body.rebalanceTimeoutMs as number) > 0 ? (body.rebalanceTimeoutMs as number) : session,
    protocolType: body.protocolType as string,
    protocols: (body.protocols as KafkaStruct[]).map((p) => ({ name: p.name as string, metadata: p.metadata as Buffer })),
    requireKnownMemberId: version >= 4,
  };
  const empty = { throttleTimeMs: 0, generationId: -1, protocolType: null, protocolName: version >= 7 ? null : '', leader: '', skipAssignment: false, members: [] };
  try {
    authorizeGroup(ctx, 'JOIN_GROUP', req.group);
    const r = await ctx.broker.coordinator.classic.join(req);
    if ('memberIdRequired' in r) return { ...empty, errorCode: kafkaErrorCode('MEMBER_ID_REQUIRED'), memberId: r.memberIdRequired };
    return {
      throttleTimeMs: 0,
      errorCode: 0,
      generationId: r.generation,
      protocolType: r.protocolType,
      protocolName: r.protocolName,
      leader: r.leader,
      skipAssignment: false,
      memberId: r.memberId,
      members: r.members.map((m) => ({ memberId: m.memberId, groupInstanceId: m.instanceId, metadata: m.metadata })),
    };
  } catch (err) {
    return { ...empty, errorCode: coordinatorErrorCodeOf(err), memberId: req.memberId };
  }
});

export const syncGroupHandler = handler(apiByKey(SyncGroup.apiKey)!, async (ctx, _version, body) => {
  try {
    authorizeGroup(ctx, 'SYNC_GROUP', body.groupId as string);
    const assignment = await ctx.broker.coordinator.classic.sync({
      group: body.groupId as string,
      memberId: body.memberId as string,
      instanceId: (body.groupInstanceId as string | null) ?? null,
      generation: body.generationId as number,
      protocolType: (body.protocolType as string | null) ?? null,
      protocolName: (body.protocolName as string | null) ?? null,
      assignments: (body.assignments as KafkaStruct[]).map((a) => ({ memberId: a.memberId as string, assignment: a.assignment as Buffer })),
    });
    return { throttleTimeMs: 0, errorCode: 0, protocolType: body.protocolType ?? null, protocolName: body.protocolName ?? null, assignment };
  } catch (err) {
    return { throttleTimeMs: 0, errorCode: coordinatorErrorCodeOf(err), protocolType: null, protocolName: null, assignment: Buffer.alloc(0) };
  }
});

export const heartbeatHandler = handler(apiByKey(Heartbeat.apiKey)!, async (ctx, _version, body) => {
  try {
    authorizeGroup(ctx, 'HEARTBEAT', body.groupId as string);
    await ctx.broker.coordinator.classic.heartbeat({
      group: body.groupId as string,
      memberId: body.memberId as string,
      instanceId: (body.groupInstanceId as string | null) ?? null,
      generation: body.generationId as number,
    });
    return { throttleTimeMs: 0, errorCode: 0 };
  } catch (err) {
    return { throttleTimeMs: 0, errorCode: coordinatorErrorCodeOf(err) };
  }
});

export const leaveGroupHandler = handler(apiByKey(LeaveGroup.apiKey)!, async (ctx, version, body) => {
  const leaving =
    version >= 3
      ? (body.members as KafkaStruct[]).map((m) => ({ memberId: m.memberId as string, instanceId: (m.groupInstanceId as string | null) ?? null }))
      : [{ memberId: body.memberId as string, instanceId: null }];
  try {
    authorizeGroup(ctx, 'LEAVE_GROUP', body.groupId as string);
    const errors = await ctx.broker.coordinator.classic.leave(body.groupId as string, leaving);
    const members = leaving.map((m, i) => ({ memberId: m.memberId, groupInstanceId: m.instanceId, errorCode: errors[i] ? coordinatorErrorCodeOf(errors[i]) : 0 }));
    // Before v3 the one member's error is the request's.
    return { throttleTimeMs: 0, errorCode: version >= 3 ? 0 : (members[0]?.errorCode ?? 0), members };
  } catch (err) {
    return { throttleTimeMs: 0, errorCode: coordinatorErrorCodeOf(err), members: [] };
  }
});

export const describeGroupsHandler = handler(apiByKey(DescribeGroups.apiKey)!, (ctx, _version, body) => ({
  throttleTimeMs: 0,
  groups: (body.groups as string[]).map((groupId) => {
    try {
      authorizeGroup(ctx, 'GROUP_STATUS', groupId);
      // As GROUP_STATUS: a group naming a topic the principal may not describe is refused (docs/kafka.md).
      if (!visible(ctx, groupId)) throw refusal(hiddenGroup('GROUP_STATUS', groupId, ctx.identity.principal), 'group');
      const d = ctx.broker.coordinator.classic.describe(groupId);
      return {
        errorCode: 0,
        groupId,
        groupState: d.state,
        protocolType: d.protocolType,
        protocolData: d.protocolName,
        members: d.members.map((m) => ({
          memberId: m.memberId,
          groupInstanceId: m.instanceId,
          clientId: m.clientId,
          clientHost: m.clientHost,
          memberMetadata: m.metadata,
          memberAssignment: m.assignment,
        })),
        authorizedOperations: UNKNOWN_OPERATIONS,
      };
    } catch (err) {
      return { errorCode: errorCodeOf(err), groupId, groupState: '', protocolType: '', protocolData: '', members: [], authorizedOperations: UNKNOWN_OPERATIONS };
    }
  }),
}));

export const listGroupsHandler = handler(apiByKey(ListGroups.apiKey)!, (ctx, _version, body) => {
  const denied = ctx.authorize('LIST_GROUPS');
  if (denied) return { throttleTimeMs: 0, errorCode: errorCodeOf(refusal(denied, 'group')), groups: [] };
  const states = new Set(((body.statesFilter as string[] | undefined) ?? []).map((s) => s.toLowerCase()));
  // A broker lists the groups it coordinates (as Kafka's do); admin clients ask every broker.
  const groups = ctx.broker.coordinator.classic
    .list()
    .filter((g) => ctx.broker.coordinator.coordinates(g.groupId) && (states.size === 0 || states.has(g.state.toLowerCase())))
    .filter((g) => visible(ctx, g.groupId))
    .map((g) => ({ groupId: g.groupId, protocolType: g.protocolType, groupState: g.state, groupType: 'classic' }));
  return { throttleTimeMs: 0, errorCode: 0, groups };
});
