/**
 * Partition assignment strategies for consumer groups. The broker's group coordinator runs these for
 * server-side assignment (the default), and the SDK runs the same code when the group leader assigns
 * client-side (Kafka classic protocol), so both sides always compute the same plan for the same input.
 *
 * A Tributary group consumes one topic today, but the API takes a list of topic-partitions so that
 * multi-topic groups need no new interface.
 *
 * Everything here is a pure function of its input: member order, owned-list order and topic-list order
 * do not change the result. Members are ordered by their sort key — `instanceId` when present (so a
 * restarted static member keeps its slot), otherwise `memberId` — with `memberId` breaking ties.
 * Strings compare by UTF-16 code unit, never by locale.
 */

export type AssignorName = 'range' | 'roundrobin' | 'sticky' | 'cooperative-sticky';

export const ASSIGNORS: readonly AssignorName[] = ['range', 'roundrobin', 'sticky', 'cooperative-sticky'];

export interface TopicPartition {
  topic: string;
  partition: number;
}

export interface MemberSubscription {
  memberId: string;
  /** Subscribed topics. Topics missing from `AssignmentInput.partitions` are ignored. */
  topics: string[];
  /** What the member currently owns (read by the sticky assignors; may be empty, stale or overlapping). */
  owned: TopicPartition[];
  /** Static members: the sort key for every assignor, so a restarted static member keeps its slot. */
  instanceId?: string;
}

export interface AssignmentInput {
  members: MemberSubscription[];
  /** topic → partition count */
  partitions: Record<string, number>;
}

/** memberId → partitions sorted by (topic, partition). Every member is present, possibly with `[]`. */
export type Assignment = Map<string, TopicPartition[]>;

export function isAssignorName(s: string): s is AssignorName {
  return (ASSIGNORS as readonly string[]).includes(s);
}

/**
 * Computes an assignment. Throws `RangeError` for an unknown assignor name, duplicate member ids or a
 * partition count that is not a non-negative safe integer. The result map iterates members in sort-key
 * order. Zero members gives an empty map; zero partitions gives every member an empty list.
 */
export function assign(name: AssignorName, input: AssignmentInput): Assignment {
  const ctx = normalize(input);
  let owner: Int32Array;
  switch (name) {
    case 'range':
      owner = rangeAssign(ctx);
      break;
    case 'roundrobin':
      owner = roundRobinAssign(ctx);
      break;
    // In Kafka, `sticky` runs under the eager protocol (everything is revoked before every rebalance)
    // and `cooperative-sticky` under the incremental one (only partitions that move are revoked, in an
    // extra round). Tributary's coordinator runs every assignor under the incremental, revoke-before-
    // reassign protocol, so that difference lives in the coordinator; both names compute the same target.
    case 'sticky':
    case 'cooperative-sticky':
      owner = stickyAssign(ctx);
      break;
    default:
      throw new RangeError(`unknown assignor ${JSON.stringify(name as string)}`);
  }
  return toAssignment(ctx, owner);
}

/**
 * Checks a plan (e.g. one sent by a client-side group leader) against its input. Returns `undefined`
 * when the plan is valid, else the first problem found: an unknown member, a partition out of range
 * (unknown topic or index outside `[0, count)`), a partition assigned to a member not subscribed to its
 * topic, a partition assigned twice, or a partition of a subscribed topic assigned to nobody.
 * Partitions of topics no member subscribes to need not be assigned. A member missing from the plan is
 * treated as assigned nothing. Balance is not checked: a client-side leader may use its own strategy.
 * Throws `RangeError` for malformed input, as `assign` does.
 */
export function validatePlan(input: AssignmentInput, plan: Assignment): string | undefined {
  const ctx = normalize(input);
  const byId = new Map<string, Member>();
  for (const m of ctx.members) byId.set(m.id, m);
  const ownerOf = new Int32Array(ctx.total).fill(-1);
  for (const [memberId, list] of plan) {
    const member = byId.get(memberId);
    if (member === undefined) return `unknown member ${JSON.stringify(memberId)}`;
    if (!Array.isArray(list)) return `assignment of member ${JSON.stringify(memberId)} is not a list`;
    for (const tp of list as unknown[]) {
      const t = typeof tp === 'object' && tp !== null ? (tp as Partial<TopicPartition>) : {};
      const topic = typeof t.topic === 'string' ? t.topic : undefined;
      const p = t.partition;
      const name = `${topic === undefined ? String(t.topic) : topic}-${String(p)}`;
      const ti = topic === undefined ? undefined : ctx.topicIndex.get(topic);
      if (ti === undefined) {
        return `partition ${name} assigned to ${JSON.stringify(memberId)} is out of range (unknown topic)`;
      }
      if (typeof p !== 'number' || !Number.isInteger(p) || p < 0 || p >= ctx.count[ti]!) {
        return `partition ${name} assigned to ${JSON.stringify(memberId)} is out of range (topic has ${ctx.count[ti]} partitions)`;
      }
      if (!member.topicSet.has(ti)) {
        return `partition ${name} assigned to ${JSON.stringify(memberId)}, which is not subscribed to ${JSON.stringify(topic)}`;
      }
      const g = ctx.offset[ti]! + p;
      const prev = ownerOf[g]!;
      if (prev !== -1) {
        const who = prev === member.index ? `${JSON.stringify(memberId)} twice` : `${JSON.stringify(ctx.members[prev]!.id)} and ${JSON.stringify(memberId)}`;
        return `partition ${name} assigned twice (to ${who})`;
      }
      ownerOf[g] = member.index;
    }
  }
  for (let ti = 0; ti < ctx.topics.length; ti++) {
    if (ctx.subscribers[ti]!.length === 0) continue;
    const base = ctx.offset[ti]!;
    for (let p = 0; p < ctx.count[ti]!; p++) {
      if (ownerOf[base + p] === -1) return `partition ${ctx.topics[ti]}-${p} is missing from the plan (assigned to no member)`;
    }
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------------
// Normalized input: topics sorted and numbered, every partition given a global index
// (offset[topic] + partition, so ascending global index = ascending (topic, partition)), members sorted.

interface Member {
  id: string;
  key: string;
  /** position in `Ctx.members` (sort order) */
  index: number;
  /** indices of the subscribed topics that exist with at least one partition, ascending */
  topics: number[];
  topicSet: Set<number>;
  owned: TopicPartition[];
}

interface Ctx {
  members: Member[];
  topics: string[];
  topicIndex: Map<string, number>;
  count: number[];
  offset: number[];
  /** total number of partitions over all topics */
  total: number;
  /** global partition index → topic index */
  topicOf: Int32Array;
  /** per topic: subscribed members, in sort order */
  subscribers: Member[][];
}

const cmp = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

function normalize(input: AssignmentInput): Ctx {
  const topics = Object.keys(input.partitions).sort(cmp);
  const topicIndex = new Map<string, number>();
  const count: number[] = [];
  const offset: number[] = [];
  let total = 0;
  for (let i = 0; i < topics.length; i++) {
    const t = topics[i]!;
    const n = input.partitions[t];
    if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) {
      throw new RangeError(`partition count of topic ${JSON.stringify(t)} must be a non-negative integer, got ${String(n)}`);
    }
    topicIndex.set(t, i);
    count.push(n);
    offset.push(total);
    total += n;
  }
  const topicOf = new Int32Array(total);
  for (let i = 0; i < topics.length; i++) topicOf.fill(i, offset[i]!, offset[i]! + count[i]!);

  const seen = new Set<string>();
  const members: Member[] = [];
  for (const s of input.members) {
    if (seen.has(s.memberId)) throw new RangeError(`duplicate member id ${JSON.stringify(s.memberId)}`);
    seen.add(s.memberId);
    const topicSet = new Set<number>();
    for (const t of s.topics) {
      const ti = topicIndex.get(t);
      if (ti !== undefined && count[ti]! > 0) topicSet.add(ti);
    }
    members.push({
      id: s.memberId,
      key: s.instanceId ?? s.memberId,
      index: 0,
      topics: [...topicSet].sort((a, b) => a - b),
      topicSet,
      owned: s.owned ?? [],
    });
  }
  members.sort((a, b) => cmp(a.key, b.key) || cmp(a.id, b.id));
  const subscribers: Member[][] = topics.map(() => []);
  for (let i = 0; i < members.length; i++) {
    const m = members[i]!;
    m.index = i;
    for (const ti of m.topics) subscribers[ti]!.push(m);
  }
  return { members, topics, topicIndex, count, offset, total, topicOf, subscribers };
}

/** owner[g] = member index, or -1 for partitions of topics nobody subscribes to. */
function toAssignment(ctx: Ctx, owner: Int32Array): Assignment {
  const lists: TopicPartition[][] = ctx.members.map(() => []);
  for (let g = 0; g < ctx.total; g++) {
    const o = owner[g]!;
    if (o < 0) continue;
    const ti = ctx.topicOf[g]!;
    lists[o]!.push({ topic: ctx.topics[ti]!, partition: g - ctx.offset[ti]! });
  }
  const out: Assignment = new Map();
  for (const m of ctx.members) out.set(m.id, lists[m.index]!);
  return out;
}

// ---------------------------------------------------------------------------------------------------
// range: per topic, contiguous ranges over the sorted subscribers; the first (n mod m) get one extra.

function rangeAssign(ctx: Ctx): Int32Array {
  const owner = new Int32Array(ctx.total).fill(-1);
  for (let ti = 0; ti < ctx.topics.length; ti++) {
    const subs = ctx.subscribers[ti]!;
    const m = subs.length;
    if (m === 0) continue;
    const n = ctx.count[ti]!;
    const q = Math.floor(n / m);
    const r = n % m;
    let g = ctx.offset[ti]!;
    for (let i = 0; i < m; i++) {
      const len = q + (i < r ? 1 : 0);
      owner.fill(subs[i]!.index, g, g + len);
      g += len;
    }
  }
  return owner;
}

// ---------------------------------------------------------------------------------------------------
// roundrobin: every topic-partition in (topic, partition) order, dealt one at a time to the sorted
// members, the dealer skipping members not subscribed to the partition's topic (one dealer across
// all topics, as in Kafka).

function roundRobinAssign(ctx: Ctx): Int32Array {
  const owner = new Int32Array(ctx.total).fill(-1);
  const m = ctx.members.length;
  let next = 0;
  for (let ti = 0; ti < ctx.topics.length; ti++) {
    if (ctx.subscribers[ti]!.length === 0) continue; // someone is subscribed, so the skip loop ends
    const base = ctx.offset[ti]!;
    for (let p = 0; p < ctx.count[ti]!; p++) {
      while (!ctx.members[next]!.topicSet.has(ti)) next = (next + 1) % m;
      owner[base + p] = next;
      next = (next + 1) % m;
    }
  }
  return owner;
}

// ---------------------------------------------------------------------------------------------------
// sticky: balanced, keeping as much of the current ownership as balance allows.
//
// Balanced means: no member holds two or more partitions more than another member subscribed to the
// topic of one of its partitions (Kafka's definition). When every member that subscribes to anything
// subscribes to the same topics (always the case in Tributary today) this is exactly "each member has
// ⌊n/m⌋ or ⌈n/m⌉ of the n partitions", and the constrained algorithm below applies: when no partition
// is claimed twice it keeps the maximum number of owned partitions balance allows. Otherwise a general
// keep-owned, greedy fill, then rebalance pass is used.

function stickyAssign(ctx: Ctx): Int32Array {
  const owner = new Int32Array(ctx.total).fill(-1);
  const active = ctx.members.filter((m) => m.topics.length > 0);
  if (active.length === 0) return owner;
  const counts = new Int32Array(ctx.members.length);
  const kept = claimOwned(ctx, owner, counts);
  const sig = active[0]!.topics.join(',');
  if (active.every((m) => m.topics.join(',') === sig)) constrainedSticky(ctx, active, owner, counts, kept);
  else generalSticky(ctx, owner, counts);
  return owner;
}

/**
 * Gives every member the partitions it owns that still exist and that it is still subscribed to.
 * A partition claimed by several members goes to the claimant holding the fewest partitions at that
 * point (ties: sort order), which keeps the most ownership once quotas are applied. Returns each
 * member's kept partitions (global indices).
 */
function claimOwned(ctx: Ctx, owner: Int32Array, counts: Int32Array): number[][] {
  const lastClaimer = new Int32Array(ctx.total).fill(-1);
  const claims = new Int32Array(ctx.total);
  const valid: number[][] = [];
  for (const m of ctx.members) {
    const list: number[] = [];
    for (const tp of m.owned) {
      if (typeof tp !== 'object' || tp === null) continue;
      const ti = ctx.topicIndex.get(tp.topic);
      const p = tp.partition;
      if (ti === undefined || !m.topicSet.has(ti) || !Number.isInteger(p) || p < 0 || p >= ctx.count[ti]!) continue;
      const g = ctx.offset[ti]! + p;
      if (lastClaimer[g] === m.index) continue; // listed twice by the same member
      lastClaimer[g] = m.index;
      claims[g]!++;
      list.push(g);
    }
    valid.push(list);
  }
  const kept: number[][] = ctx.members.map(() => []);
  const contested = new Map<number, number[]>();
  for (const m of ctx.members) {
    for (const g of valid[m.index]!) {
      if (claims[g] === 1) {
        owner[g] = m.index;
        counts[m.index]!++;
        kept[m.index]!.push(g);
      } else {
        const c = contested.get(g);
        // members are visited in sort order, so claimants are too
        if (c === undefined) contested.set(g, [m.index]);
        else c.push(m.index);
      }
    }
  }
  for (const g of [...contested.keys()].sort((a, b) => a - b)) {
    let best = -1;
    for (const i of contested.get(g)!) if (best === -1 || counts[i]! < counts[best]!) best = i;
    owner[g] = best;
    counts[best]!++;
    kept[best]!.push(g);
  }
  return kept;
}

function constrainedSticky(ctx: Ctx, active: Member[], owner: Int32Array, counts: Int32Array, kept: number[][]): void {
  const topics = active[0]!.topics;
  let n = 0;
  for (const ti of topics) n += ctx.count[ti]!;
  const m = active.length;
  const minQ = Math.floor(n / m);
  let extraSlots = n % m; // members that may end with minQ + 1

  // Trim everyone down to quota: min(kept, minQ), or minQ + 1 while extra slots remain.
  for (const mem of active) {
    const list = kept[mem.index]!;
    if (list.length <= minQ) continue;
    list.sort((a, b) => a - b);
    let keep = minQ;
    if (extraSlots > 0) {
      keep++;
      extraSlots--;
    }
    for (let k = keep; k < list.length; k++) owner[list[k]!] = -1;
    counts[mem.index] = keep;
  }

  const free: number[] = [];
  for (const ti of topics) {
    const end = ctx.offset[ti]! + ctx.count[ti]!;
    for (let g = ctx.offset[ti]!; g < end; g++) if (owner[g] === -1) free.push(g);
  }
  let f = 0;
  // Fewest first, ties in sort order: level by level up to minQ ...
  let low = minQ;
  for (const mem of active) low = Math.min(low, counts[mem.index]!);
  for (let level = low; level < minQ; level++) {
    for (const mem of active) {
      if (counts[mem.index]! <= level) {
        owner[free[f++]!] = mem.index;
        counts[mem.index]!++;
      }
    }
  }
  // ... then the leftover (exactly the unused extra slots) one each to members at minQ.
  for (const mem of active) {
    if (f >= free.length) break;
    if (counts[mem.index] === minQ) {
      owner[free[f++]!] = mem.index;
      counts[mem.index]!++;
    }
  }
  if (f !== free.length) throw new Error(`sticky assignor left ${free.length - f} partitions unassigned`); // unreachable
}

function generalSticky(ctx: Ctx, owner: Int32Array, counts: Int32Array): void {
  const M = ctx.members.length;
  // Unowned partitions of subscribed topics, most constrained topic first, each to the subscriber with
  // the fewest partitions (ties: sort order). Counts only grow here, and within one topic only that
  // topic's subscribers change, so a heap keyed by (count, index) built per topic stays exact.
  const order = ctx.topics
    .map((_, ti) => ti)
    .filter((ti) => ctx.subscribers[ti]!.length > 0)
    .sort((a, b) => ctx.subscribers[a]!.length - ctx.subscribers[b]!.length || a - b);
  for (const ti of order) {
    const heap = new MinHeap(ctx.subscribers[ti]!.map((s) => counts[s.index]! * M + s.index));
    const end = ctx.offset[ti]! + ctx.count[ti]!;
    for (let g = ctx.offset[ti]!; g < end; g++) {
      if (owner[g] !== -1) continue;
      const to = heap.pop() % M;
      owner[g] = to;
      counts[to]!++;
      heap.push(counts[to]! * M + to);
    }
  }
  // Move partitions off members holding at least two more than some other subscriber of the topic until
  // none does. Each move lowers the sum of squared counts, so this terminates. `floor[t]` is a lower
  // bound of the fewest held by a subscriber of t, so most partitions are skipped without a scan.
  const floor = new Int32Array(ctx.topics.length);
  const fewest = (ti: number): number => {
    let best = -1;
    for (const s of ctx.subscribers[ti]!) if (best === -1 || counts[s.index]! < counts[best]!) best = s.index;
    floor[ti] = counts[best]!;
    return best;
  };
  for (let moved = true; moved; ) {
    moved = false;
    for (let ti = 0; ti < ctx.topics.length; ti++) if (ctx.subscribers[ti]!.length > 0) fewest(ti);
    for (let g = 0; g < ctx.total; g++) {
      const from = owner[g]!;
      if (from < 0) continue;
      const ti = ctx.topicOf[g]!;
      if (counts[from]! - 2 < floor[ti]!) continue;
      const to = fewest(ti);
      if (counts[to]! <= counts[from]! - 2) {
        owner[g] = to;
        counts[from]!--;
        counts[to]!++;
        for (const t of ctx.members[from]!.topics) if (counts[from]! < floor[t]!) floor[t] = counts[from]!;
        moved = true;
      }
    }
  }
}

/** A binary min-heap of numbers. */
class MinHeap {
  private readonly a: number[];
  constructor(items: number[]) {
    this.a = items;
    for (let i = (items.length >> 1) - 1; i >= 0; i--) this.down(i);
  }
  push(x: number): void {
    const a = this.a;
    let i = a.length;
    a.push(x);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (a[p]! <= x) break;
      a[i] = a[p]!;
      i = p;
    }
    a[i] = x;
  }
  pop(): number {
    const a = this.a;
    const top = a[0]!;
    const last = a.pop()!;
    if (a.length > 0) {
      a[0] = last;
      this.down(0);
    }
    return top;
  }
  private down(i: number): void {
    const a = this.a;
    const n = a.length;
    const x = a[i]!;
    for (;;) {
      let c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && a[c + 1]! < a[c]!) c++;
      if (a[c]! >= x) break;
      a[i] = a[c]!;
      i = c;
    }
    a[i] = x;
  }
}
