import type { ConsumerGroup } from './group.js';
import type { GroupSnapshot } from './group-log.js';

/** A Tributary group as written to `__consumer_offsets` (GroupSnapshot). */
export function snapshotOf(g: ConsumerGroup): GroupSnapshot {
  return {
    group: g.groupId,
    topic: g.topic,
    generation: g.generation,
    leader: g.leaderId ?? null,
    assignor: g.assignor,
    protocol: g.protocol,
    planGeneration: g.planGeneration,
    members: [...g.members.values()].map((m) => ({
      id: m.memberId,
      clientId: m.clientId,
      instance: m.instanceId ?? null,
      host: m.host,
      sessionTimeoutMs: m.sessionTimeoutMs,
      rebalanceTimeoutMs: m.rebalanceTimeoutMs,
      generation: m.generation,
      owned: [...m.owned].sort((a, b) => a - b),
      target: m.target,
      needsRejoin: m.needsRejoin,
      ...(m.reset.size > 0 ? { reset: [...m.reset].sort((a, b) => a - b) } : {}),
    })),
    history: g.history,
    pendingCauses: g.pendingCauses,
    ...(g.topicShape === undefined ? {} : { topicShape: g.topicShape }),
    ...(g.emptiedAt === undefined ? {} : { emptiedAt: g.emptiedAt }),
  };
}
