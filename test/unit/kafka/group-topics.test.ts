/**
 * The topics a Kafka consumer group names, for the group checks (docs/security.md, "Groups and topic
 * ACLs"): its offsets' topics and its members' subscriptions and assignments, decoded once per member's
 * bytes rather than on every LIST_GROUPS or DescribeGroups; bytes that do not parse hide the group.
 */
import { describe, expect, it } from 'vitest';
import type { ClassicGroups } from 'tributary-broker/coordinator/classic-groups.js';
import { groupTopics } from 'tributary-broker/kafka/group-visibility.js';
import { encodeAssignment, encodeSubscription } from 'tributary-broker/kafka/protocol/consumer-protocol.js';

/** A ClassicGroups that knows one consumer group with these members' bytes. */
function groupsWith(f: { subscriptions: Buffer[]; assignments: Buffer[] }): ClassicGroups {
  return { footprint: (id: string) => (id === 'g' ? { topics: ['committed'], protocolType: 'consumer', ...f } : undefined) } as unknown as ClassicGroups;
}

describe('groupTopics', () => {
  it("names the offsets, subscriptions and assignments; undefined when a member's bytes do not parse; [] for an unknown group", () => {
    const subscription = encodeSubscription(0, { topics: ['s'], userData: null });
    const assignment = encodeAssignment(0, { assignedPartitions: [{ topic: 'a', partitions: [0] }], userData: null });
    expect(groupTopics(groupsWith({ subscriptions: [subscription], assignments: [assignment, Buffer.alloc(0)] }), 'g')).toEqual(['committed', 's', 'a']);
    expect(groupTopics(groupsWith({ subscriptions: [subscription], assignments: [Buffer.from([0, 0, 0xff])] }), 'g')).toBeUndefined();
    expect(groupTopics(groupsWith({ subscriptions: [], assignments: [] }), 'other')).toEqual([]);
  });

  it("decodes a member's bytes once: the same bytes object is not decoded again, new bytes are", () => {
    const subscription = encodeSubscription(0, { topics: ['s'], userData: null });
    const assignment = encodeAssignment(0, { assignedPartitions: [{ topic: 'a', partitions: [0] }], userData: null });
    const groups = groupsWith({ subscriptions: [subscription], assignments: [assignment] });
    expect(groupTopics(groups, 'g')).toEqual(['committed', 's', 'a']);
    // Bytes that would no longer parse: still the topics decoded the first time, so they were not decoded again.
    assignment.fill(0xff);
    subscription.fill(0xff);
    expect(groupTopics(groups, 'g')).toEqual(['committed', 's', 'a']);
    // A new assignment (a SyncGroup replaces the bytes object) is decoded.
    expect(groupTopics(groupsWith({ subscriptions: [subscription], assignments: [Buffer.from(assignment)] }), 'g')).toBeUndefined();
  });
});
