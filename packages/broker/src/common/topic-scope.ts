/**
 * The topics a principal may describe, as METADATA and LIST decide: all of them (authentication off), or
 * those its permissions and the topic ACLs allow. The security layer decides it (broker/security.ts
 * `topicScope`); the group checks read it (docs/security.md, "Groups and topic ACLs"). A check, not a
 * set: the ACLs apply to any name, a topic deleted since a group committed to it included.
 */
export type TopicScope = { readonly all: true } | { readonly all: false; readonly describable: (topic: string) => boolean };

/** Authentication off: every topic, and so every group, whatever its members' bytes. */
export const ALL_TOPICS: TopicScope = { all: true };

export function inScope(scope: TopicScope, topic: string): boolean {
  return scope.all || scope.describable(topic);
}
