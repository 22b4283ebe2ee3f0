/**
 * Group ACLs (docs/security.md, "Group ACLs"): `groupAcls` maps a group id, or a prefix written `<prefix>*`
 * (Kafka's PREFIXED pattern), to the principals allowed to use the groups it matches (`*`: any
 * authenticated principal). Kept apart from broker/security.ts so the config's validation and the unit
 * tests use the same matching the broker enforces.
 */

export type GroupAcls = Readonly<Record<string, readonly string[]>>;

/** A key of `groupAcls` that names a prefix: `billing-*`; `*` alone is the empty prefix (every group). */
export function isPrefixKey(key: string): boolean {
  return key.endsWith('*');
}

/**
 * The principals the ACL lists for `group`: an exact entry beats any prefix, else the longest matching
 * prefix; undefined when no entry matches (the group is used as without ACLs).
 */
export function groupAclFor(acls: GroupAcls, group: string): readonly string[] | undefined {
  if (Object.hasOwn(acls, group) && !isPrefixKey(group)) return acls[group];
  let best: string | undefined;
  for (const key of Object.keys(acls)) {
    if (!isPrefixKey(key)) continue;
    const prefix = key.slice(0, -1);
    if (group.startsWith(prefix) && (best === undefined || prefix.length > best.length - 1)) best = key;
  }
  return best === undefined ? undefined : acls[best];
}

/** Whether the ACL lets `principal` use `group`: no entry matches, or the entry lists it or `*`. */
export function groupAllowed(acls: GroupAcls, group: string, principal: string): boolean {
  const list = groupAclFor(acls, group);
  return list === undefined || list.includes(principal) || list.includes('*');
}

/**
 * Why a `groupAcls` key is refused, or undefined: a `*` anywhere but at the end would read as a pattern
 * this matching does not have (only exact names and prefixes, as Kafka's LITERAL and PREFIXED).
 */
export function groupAclKeyProblem(key: string): string | undefined {
  const star = key.indexOf('*');
  if (star >= 0 && star !== key.length - 1) return "'*' may only end a key (a prefix: billing-*); a group id with '*' inside cannot be named";
  return undefined;
}
