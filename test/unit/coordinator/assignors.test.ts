import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  ASSIGNORS,
  type Assignment,
  type AssignmentInput,
  type AssignorName,
  assign,
  isAssignorName,
  type MemberSubscription,
  type TopicPartition,
  validatePlan,
} from 'tributary-protocol/assignors.js';

const T = 'orders';
const RUNS = { numRuns: 150 };

// ---------------------------------------------------------------------------------------------------
// helpers

const key = (tp: TopicPartition): string => `${tp.topic}\u0000${tp.partition}`;

function member(memberId: string, owned: number[] = [], extra: Partial<MemberSubscription> = {}): MemberSubscription {
  return { memberId, topics: [T], owned: owned.map((partition) => ({ topic: T, partition })), ...extra };
}

/** memberId → partition numbers, for single-topic examples. */
function numbers(plan: Assignment): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const [id, list] of plan) out[id] = list.map((tp) => tp.partition);
  return out;
}

function ownerMap(plan: Assignment): Map<string, string> {
  const out = new Map<string, string>();
  for (const [id, list] of plan) for (const tp of list) out.set(key(tp), id);
  return out;
}

function subscribed(input: AssignmentInput, topic: string): MemberSubscription[] {
  return input.members.filter((m) => m.topics.includes(topic));
}

/** An independent check of the plan invariants (not relying on validatePlan). */
function expectComplete(input: AssignmentInput, plan: Assignment): void {
  expect([...plan.keys()].sort()).toEqual(input.members.map((m) => m.memberId).sort());
  const byId = new Map(input.members.map((m) => [m.memberId, m]));
  const seen = new Set<string>();
  const problems: string[] = [];
  for (const [id, list] of plan) {
    const m = byId.get(id)!;
    for (let i = 0; i < list.length; i++) {
      const tp = list[i]!;
      if (!m.topics.includes(tp.topic)) problems.push(`${id} got ${key(tp)} unsubscribed`);
      if (!(Number.isInteger(tp.partition) && tp.partition >= 0 && tp.partition < input.partitions[tp.topic]!)) {
        problems.push(`${id} got ${key(tp)} out of range`);
      }
      if (seen.has(key(tp))) problems.push(`${key(tp)} twice`);
      seen.add(key(tp));
      const prev = list[i - 1];
      if (prev !== undefined && !(prev.topic < tp.topic || (prev.topic === tp.topic && prev.partition < tp.partition))) {
        problems.push(`${id} list not sorted`);
      }
    }
  }
  for (const [topic, n] of Object.entries(input.partitions)) {
    if (subscribed(input, topic).length === 0) continue;
    for (let p = 0; p < n; p++) if (!seen.has(key({ topic, partition: p }))) problems.push(`${topic}-${p} unassigned`);
  }
  expect(problems).toEqual([]);
}

/** Single topic: every subscribed member holds ⌊n/m⌋ or ⌈n/m⌉. */
function expectBalancedSingle(input: AssignmentInput, plan: Assignment, topic = T): void {
  const subs = subscribed(input, topic);
  if (subs.length === 0) return;
  const n = input.partitions[topic]!;
  const lo = Math.floor(n / subs.length);
  const hi = Math.ceil(n / subs.length);
  const off = subs.map((m) => plan.get(m.memberId)!.length).filter((c) => c < lo || c > hi);
  expect(off, `counts outside ${lo}..${hi}`).toEqual([]);
}

/** General balance: no partition could move to another subscriber of its topic holding 2+ fewer. */
function expectBalancedGeneral(input: AssignmentInput, plan: Assignment): void {
  const count = (id: string) => plan.get(id)!.length;
  const fewest = new Map<string, number>();
  for (const topic of Object.keys(input.partitions)) {
    const counts = subscribed(input, topic).map((m) => count(m.memberId));
    if (counts.length > 0) fewest.set(topic, Math.min(...counts));
  }
  const problems: string[] = [];
  for (const [id, list] of plan) {
    for (const topic of new Set(list.map((tp) => tp.topic))) {
      if (fewest.get(topic)! < count(id) - 1) problems.push(`${id} holds ${count(id)}; a ${topic} subscriber holds ${fewest.get(topic)}`);
    }
  }
  expect(problems).toEqual([]);
}

function shuffled<T>(xs: readonly T[], keys: readonly number[]): T[] {
  return xs
    .map((x, i) => ({ x, k: (keys.length > 0 ? keys[i % keys.length]! : 0) * 1000 + i }))
    .sort((a, b) => a.k - b.k)
    .map((e) => e.x);
}

function reorder(input: AssignmentInput, keys: readonly number[]): AssignmentInput {
  const partitions: Record<string, number> = {};
  for (const t of shuffled(Object.keys(input.partitions), keys)) partitions[t] = input.partitions[t]!;
  return {
    partitions,
    members: shuffled(input.members, keys).map((m, i) => ({
      ...m,
      topics: shuffled(m.topics, keys.slice(i)).concat(m.topics.slice(0, 1)), // also a duplicated topic
      owned: shuffled(m.owned, keys.slice(i + 1)),
    })),
  };
}

/** Number of partitions whose owner differs between the owned sets of `input` and `plan`. */
function moves(before: Map<string, string>, plan: Assignment): number {
  let moved = 0;
  for (const [k, id] of ownerMap(plan)) if (before.get(k) !== id) moved++;
  return moved;
}

// ---------------------------------------------------------------------------------------------------
// generators

const memberIdArb = fc.string({ minLength: 1, maxLength: 6 });

const ownedArb = (n: number): fc.Arbitrary<TopicPartition> =>
  fc.oneof(
    { weight: 12, arbitrary: fc.record({ topic: fc.constant(T), partition: fc.integer({ min: 0, max: Math.max(0, n - 1) }) }) },
    { weight: 2, arbitrary: fc.record({ topic: fc.constant(T), partition: fc.integer({ min: -3, max: n + 3 }) }) },
    { weight: 1, arbitrary: fc.record({ topic: fc.constant(T), partition: fc.constantFrom(0.5, Number.NaN, -0, 1e9) }) },
    { weight: 1, arbitrary: fc.record({ topic: fc.constantFrom('gone', 'other'), partition: fc.integer({ min: 0, max: 5 }) }) },
  );

/** One topic `orders` with 0..200 partitions, 0..30 members (a few unsubscribed), messy owned sets. */
const singleTopicArb: fc.Arbitrary<AssignmentInput> = fc.integer({ min: 0, max: 200 }).chain((n) =>
  fc
    .uniqueArray(
      fc.record({
        memberId: memberIdArb,
        topics: fc.oneof({ weight: 8, arbitrary: fc.constant([T]) }, { weight: 1, arbitrary: fc.constantFrom([], ['gone'], [T, 'gone']) }),
        owned: fc.oneof(fc.constant([]), fc.array(ownedArb(n), { maxLength: 30 })),
        instanceId: fc.option(fc.string({ maxLength: 3 }), { nil: undefined, freq: 3 }),
      }),
      { maxLength: 30, selector: (m) => m.memberId },
    )
    .map((members) => ({
      partitions: { [T]: n },
      members: members.map((m): MemberSubscription => {
        const base = { memberId: m.memberId, topics: [...m.topics], owned: [...m.owned] };
        return m.instanceId === undefined ? base : { ...base, instanceId: m.instanceId };
      }),
    })),
);

/** Several topics, heterogeneous subscriptions, owned sets over all of them. */
const multiTopicArb: fc.Arbitrary<AssignmentInput> = fc
  .record({ a: fc.integer({ min: 0, max: 60 }), b: fc.integer({ min: 0, max: 60 }), c: fc.integer({ min: 0, max: 10 }) })
  .chain((partitions) =>
    fc
      .uniqueArray(
        fc.record({
          memberId: memberIdArb,
          topics: fc.subarray(['a', 'b', 'c', 'gone']),
          owned: fc.array(
            fc.record({ topic: fc.constantFrom('a', 'b', 'c', 'gone'), partition: fc.integer({ min: -1, max: 62 }) }),
            { maxLength: 30 },
          ),
        }),
        { maxLength: 30, selector: (m) => m.memberId },
      )
      .map((members) => ({ partitions, members })),
  );

/** A valid balanced single-topic assignment of `n` partitions over `m` members, as owned sets. */
const balancedArb: fc.Arbitrary<{ n: number; input: AssignmentInput }> = fc
  .record({ n: fc.integer({ min: 0, max: 200 }), m: fc.integer({ min: 1, max: 30 }) })
  .chain(({ n, m }) =>
    fc
      .record({
        order: fc.shuffledSubarray(
          Array.from({ length: n }, (_, i) => i),
          { minLength: n, maxLength: n },
        ),
        who: fc.shuffledSubarray(
          Array.from({ length: m }, (_, i) => i),
          { minLength: m, maxLength: m },
        ),
      })
      .map(({ order, who }) => {
        const q = Math.floor(n / m);
        const r = n % m;
        const owned: number[][] = Array.from({ length: m }, () => []);
        let at = 0;
        for (let k = 0; k < m; k++) {
          const len = q + (k < r ? 1 : 0);
          owned[who[k]!] = order.slice(at, at + len);
          at += len;
        }
        return { n, input: { partitions: { [T]: n }, members: owned.map((o, i) => member(`m${String(i).padStart(2, '0')}`, o)) } };
      }),
  );

const permutationKeys = fc.array(fc.integer({ min: 0, max: 1000 }), { minLength: 1, maxLength: 40 });

// ---------------------------------------------------------------------------------------------------

describe('assignor names', () => {
  it('lists the four assignors and recognises exactly those names', () => {
    expect(ASSIGNORS).toEqual(['range', 'roundrobin', 'sticky', 'cooperative-sticky']);
    for (const n of ASSIGNORS) expect(isAssignorName(n)).toBe(true);
    for (const n of ['', 'Range', 'round-robin', 'cooperative', 'toString', '__proto__']) expect(isAssignorName(n)).toBe(false);
  });

  it('rejects an unknown name, duplicate member ids and bad partition counts', () => {
    expect(() => assign('nope' as AssignorName, { members: [], partitions: {} })).toThrow(RangeError);
    expect(() => assign('range', { members: [member('a'), member('a')], partitions: { [T]: 3 } })).toThrow(/duplicate member/);
    for (const bad of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => assign('sticky', { members: [member('a')], partitions: { [T]: bad } })).toThrow(RangeError);
    }
  });
});

describe.each(ASSIGNORS)('%s: properties', (name) => {
  it('assigns every partition to exactly one subscribed member, and lists every member', () => {
    fc.assert(
      fc.property(singleTopicArb, (input) => {
        const plan = assign(name, input);
        expectComplete(input, plan);
        expect(validatePlan(input, plan)).toBeUndefined();
      }),
      RUNS,
    );
  });

  it('balances a single topic within one partition', () => {
    fc.assert(
      fc.property(singleTopicArb, (input) => {
        expectBalancedSingle(input, assign(name, input));
      }),
      RUNS,
    );
  });

  it('is deterministic: member, topic and owned order do not matter', () => {
    fc.assert(
      fc.property(singleTopicArb, permutationKeys, (input, keys) => {
        const a = assign(name, input);
        const b = assign(name, reorder(input, keys));
        expect([...b.entries()]).toEqual([...a.entries()]);
      }),
      RUNS,
    );
  });

  it('gives unsubscribed members nothing; handles zero members and zero partitions', () => {
    fc.assert(
      fc.property(singleTopicArb, (input) => {
        const plan = assign(name, input);
        for (const m of input.members) if (!m.topics.includes(T)) expect(plan.get(m.memberId)).toEqual([]);
      }),
      RUNS,
    );
    expect(assign(name, { members: [], partitions: { [T]: 10 } }).size).toBe(0);
    expect(assign(name, { members: [], partitions: {} }).size).toBe(0);
    const empty = assign(name, { members: [member('a', [0, 1]), member('b')], partitions: { [T]: 0 } });
    expect([...empty.entries()]).toEqual([
      ['a', []],
      ['b', []],
    ]);
    const noTopic = assign(name, { members: [member('a', [0])], partitions: {} });
    expect([...noTopic.entries()]).toEqual([['a', []]]);
  });

  it('produces valid plans for several topics with mixed subscriptions', () => {
    fc.assert(
      fc.property(multiTopicArb, permutationKeys, (input, keys) => {
        const plan = assign(name, input);
        expectComplete(input, plan);
        expect(validatePlan(input, plan)).toBeUndefined();
        expect([...assign(name, reorder(input, keys)).entries()]).toEqual([...plan.entries()]);
      }),
      RUNS,
    );
  });

  it('keeps a static member slot across a restart (new member id, same instance id)', () => {
    const before = assign(name, {
      partitions: { [T]: 10 },
      members: [member('x-1', [], { instanceId: 'b' }), member('y-1', [], { instanceId: 'a' }), member('z-1', [], { instanceId: 'c' })],
    });
    const after = assign(name, {
      partitions: { [T]: 10 },
      members: [
        member('zz-2', name.includes('sticky') ? before.get('y-1')!.map((tp) => tp.partition) : [], { instanceId: 'a' }),
        member('x-1', name.includes('sticky') ? before.get('x-1')!.map((tp) => tp.partition) : [], { instanceId: 'b' }),
        member('z-1', name.includes('sticky') ? before.get('z-1')!.map((tp) => tp.partition) : [], { instanceId: 'c' }),
      ],
    });
    expect(after.get('zz-2')).toEqual(before.get('y-1'));
    expect(after.get('x-1')).toEqual(before.get('x-1'));
    expect(after.get('z-1')).toEqual(before.get('z-1'));
  });
});

describe.each(['range', 'roundrobin'] as const)('%s: ignores ownership', (name) => {
  it('gives the same result whatever the members own', () => {
    fc.assert(
      fc.property(singleTopicArb, (input) => {
        const bare = { ...input, members: input.members.map((m) => ({ ...m, owned: [] })) };
        expect([...assign(name, input).entries()]).toEqual([...assign(name, bare).entries()]);
      }),
      RUNS,
    );
  });
});

describe('range', () => {
  it('splits 7 partitions over 3 members as [0,1,2] [3,4] [5,6]', () => {
    const plan = assign('range', { partitions: { [T]: 7 }, members: [member('c'), member('a'), member('b')] });
    expect([...plan.keys()]).toEqual(['a', 'b', 'c']);
    expect(numbers(plan)).toEqual({ a: [0, 1, 2], b: [3, 4], c: [5, 6] });
  });

  it('sorts by instance id when present, and gives more members than partitions nothing extra', () => {
    const plan = assign('range', {
      partitions: { [T]: 2 },
      members: [member('a', [], { instanceId: 'z' }), member('b', [], { instanceId: 'y' }), member('c')],
    });
    // sort keys: c → "c", b → "y", a → "z"
    expect(numbers(plan)).toEqual({ c: [0], b: [1], a: [] });
  });

  it('ranges each topic separately over its own subscribers', () => {
    const plan = assign('range', {
      partitions: { t1: 5, t2: 3, unused: 4 },
      members: [
        { memberId: 'a', topics: ['t1', 't2'], owned: [] },
        { memberId: 'b', topics: ['t1'], owned: [] },
        { memberId: 'c', topics: ['t2', 'missing'], owned: [] },
      ],
    });
    expect(Object.fromEntries([...plan].map(([id, l]) => [id, l.map((tp) => `${tp.topic}-${tp.partition}`)]))).toEqual({
      a: ['t1-0', 't1-1', 't1-2', 't2-0', 't2-1'],
      b: ['t1-3', 't1-4'],
      c: ['t2-2'],
    });
  });
});

describe('roundrobin', () => {
  it('deals 7 partitions over 3 members as [0,3,6] [1,4] [2,5]', () => {
    const plan = assign('roundrobin', { partitions: { [T]: 7 }, members: [member('b'), member('c'), member('a')] });
    expect(numbers(plan)).toEqual({ a: [0, 3, 6], b: [1, 4], c: [2, 5] });
  });

  it('deals across topics with one dealer, skipping unsubscribed members', () => {
    const plan = assign('roundrobin', {
      partitions: { t1: 3, t2: 3 },
      members: [
        { memberId: 'a', topics: ['t1', 't2'], owned: [] },
        { memberId: 'b', topics: ['t1'], owned: [] },
        { memberId: 'c', topics: ['t2'], owned: [] },
      ],
    });
    // t1-0→a t1-1→b t1-2→a (c skipped) t2-0→c t2-1→a (b skipped) t2-2→c
    expect(Object.fromEntries([...plan].map(([id, l]) => [id, l.map((tp) => `${tp.topic}-${tp.partition}`)]))).toEqual({
      a: ['t1-0', 't1-2', 't2-1'],
      b: ['t1-1'],
      c: ['t2-0', 't2-2'],
    });
  });
});

describe.each(['sticky', 'cooperative-sticky'] as const)('%s', (name) => {
  it('returns an already valid balanced assignment unchanged', () => {
    fc.assert(
      fc.property(balancedArb, ({ input }) => {
        const plan = assign(name, input);
        for (const m of input.members) {
          expect(plan.get(m.memberId)!.map((tp) => tp.partition)).toEqual(m.owned.map((tp) => tp.partition).sort((a, b) => a - b));
        }
      }),
      RUNS,
    );
  });

  it('moves only the new member share when a member joins', () => {
    fc.assert(
      fc.property(balancedArb, memberIdArb, ({ n, input }, id) => {
        const before = ownerMap(assign(name, input));
        const m = input.members.length;
        const joined = { ...input, members: [...input.members, member(`new-${id}`)] };
        const plan = assign(name, joined);
        expectBalancedSingle(joined, plan);
        const moved = moves(before, plan);
        expect(moved).toBeLessThanOrEqual(Math.ceil(n / (m + 1)));
        expect(moved).toBe(plan.get(`new-${id}`)!.length);
      }),
      RUNS,
    );
  });

  it('moves only the leaving member partitions when a member leaves', () => {
    fc.assert(
      fc.property(balancedArb, fc.nat(), ({ input }, pick) => {
        const gone = input.members[pick % input.members.length]!;
        const left = { ...input, members: input.members.filter((m) => m !== gone) };
        const plan = assign(name, left);
        expectBalancedSingle(left, plan);
        const owners = ownerMap(plan);
        for (const m of left.members) for (const tp of m.owned) expect(owners.get(key(tp))).toBe(m.memberId);
      }),
      RUNS,
    );
  });

  it('keeps the most ownership balance allows when owned sets do not overlap', () => {
    const arb = fc.record({ n: fc.integer({ min: 0, max: 200 }), m: fc.integer({ min: 1, max: 30 }) }).chain(({ n, m }) =>
      fc.record({
        n: fc.constant(n),
        m: fc.constant(m),
        // owner of each partition: a member index, or m (= nobody)
        owners: fc.array(fc.integer({ min: 0, max: m }), { minLength: n, maxLength: n }),
      }),
    );
    fc.assert(
      fc.property(arb, ({ n, m, owners }) => {
        const owned: number[][] = Array.from({ length: m }, () => []);
        owners.forEach((o, p) => {
          if (o < m) owned[o]!.push(p);
        });
        const input = { partitions: { [T]: n }, members: owned.map((o, i) => member(`m${i}`, o)) };
        const plan = assign(name, input);
        expectComplete(input, plan);
        expectBalancedSingle(input, plan);
        const q = Math.floor(n / m);
        const r = n % m;
        const best = owned.reduce((s, o) => s + Math.min(o.length, q), 0) + Math.min(owned.filter((o) => o.length > q).length, r);
        let kept = 0;
        input.members.forEach((mem) => {
          const now = new Set(plan.get(mem.memberId)!.map((tp) => tp.partition));
          for (const tp of mem.owned) if (now.has(tp.partition)) kept++;
        });
        expect(kept).toBe(best);
      }),
      RUNS,
    );
  });

  it('gives a partition claimed by two members to one of them', () => {
    const plan = assign(name, { partitions: { [T]: 4 }, members: [member('a', [0, 1, 2, 3]), member('b', [3])] });
    expect(numbers(plan)).toEqual({ a: [0, 1], b: [2, 3] });
    const tie = assign(name, { partitions: { [T]: 2 }, members: [member('b', [0, 1]), member('a', [0, 1])] });
    // both claim both: each contested partition goes to the claimant holding fewer at that point
    expect(numbers(tie)).toEqual({ a: [0], b: [1] });
  });

  it('drops owned partitions that no longer exist or are no longer subscribed', () => {
    const plan = assign(name, {
      partitions: { [T]: 4, other: 2 },
      members: [
        { memberId: 'a', topics: [T], owned: [{ topic: T, partition: 7 }, { topic: 'other', partition: 0 }, { topic: T, partition: 3 }] },
        { memberId: 'b', topics: [T], owned: [{ topic: 'deleted', partition: 0 }] },
      ],
    });
    // a keeps 3; the free 0, 1, 2 go fewest-first (b, then a, then b)
    expect(numbers(plan)).toEqual({ a: [1, 3], b: [0, 2] });
  });

  it('balances multi-topic groups with identical subscriptions to ⌊n/m⌋..⌈n/m⌉ of the total', () => {
    fc.assert(
      fc.property(multiTopicArb, (input) => {
        const same = { ...input, members: input.members.map((m) => ({ ...m, topics: ['a', 'b', 'c'] })) };
        const plan = assign(name, same);
        expectComplete(same, plan);
        const n = same.partitions.a! + same.partitions.b! + same.partitions.c!;
        const m = same.members.length;
        for (const list of plan.values()) {
          expect(list.length).toBeGreaterThanOrEqual(Math.floor(n / m));
          expect(list.length).toBeLessThanOrEqual(Math.ceil(n / m));
        }
      }),
      RUNS,
    );
  });

  it('balances heterogeneous subscriptions (no partition could go to a subscriber with two fewer)', () => {
    fc.assert(
      fc.property(multiTopicArb, (input) => {
        expectBalancedGeneral(input, assign(name, input));
      }),
      RUNS,
    );
  });

  it('keeps a valid balanced heterogeneous assignment unchanged', () => {
    fc.assert(
      fc.property(multiTopicArb, (input) => {
        const first = assign(name, input);
        const again = {
          ...input,
          members: input.members.map((m) => ({ ...m, owned: first.get(m.memberId)! })),
        };
        expect([...assign(name, again).entries()]).toEqual([...first.entries()]);
      }),
      RUNS,
    );
  });
});

describe('sticky and cooperative-sticky', () => {
  it('compute the same target', () => {
    fc.assert(
      fc.property(fc.oneof(singleTopicArb, multiTopicArb), (input) => {
        expect([...assign('cooperative-sticky', input).entries()]).toEqual([...assign('sticky', input).entries()]);
      }),
      RUNS,
    );
  });
});

describe('validatePlan', () => {
  const input: AssignmentInput = {
    partitions: { [T]: 4, other: 2 },
    members: [member('a'), member('b'), { memberId: 'c', topics: ['other'], owned: [] }],
  };
  const tp = (partition: number, topic = T): TopicPartition => ({ topic, partition });
  const good = (): Assignment =>
    new Map([
      ['a', [tp(0), tp(1)]],
      ['b', [tp(2), tp(3)]],
      ['c', [tp(0, 'other'), tp(1, 'other')]],
    ]);

  it('accepts a valid plan, in any order, and a plan that omits a member with nothing', () => {
    expect(validatePlan(input, good())).toBeUndefined();
    const unsorted = new Map([
      ['c', [tp(1, 'other'), tp(0, 'other')]],
      ['b', [tp(3), tp(0)]],
      ['a', [tp(2), tp(1)]],
    ]);
    expect(validatePlan(input, unsorted)).toBeUndefined();
    const onlyA = new Map([['a', [tp(0), tp(1), tp(2), tp(3)]]]);
    expect(validatePlan({ partitions: { [T]: 4 }, members: [member('a'), member('b')] }, onlyA)).toBeUndefined();
    // partitions of topics nobody subscribes to need not be assigned
    expect(validatePlan({ partitions: { [T]: 1, idle: 3 }, members: [member('a')] }, new Map([['a', [tp(0)]]]))).toBeUndefined();
    expect(validatePlan({ partitions: { [T]: 3 }, members: [] }, new Map())).toBeUndefined();
  });

  it('rejects an unknown member', () => {
    const plan = good();
    plan.set('ghost', []);
    expect(validatePlan(input, plan)).toMatch(/unknown member "ghost"/);
  });

  it('rejects a partition assigned twice, across members or within one', () => {
    const across = good();
    across.get('b')!.push(tp(0));
    expect(validatePlan(input, across)).toMatch(/orders-0 assigned twice \(to "a" and "b"\)/);
    const within = good();
    within.get('a')!.push(tp(1));
    expect(validatePlan(input, within)).toMatch(/orders-1 assigned twice \(to "a" twice\)/);
  });

  it('rejects a partition of a topic the member is not subscribed to', () => {
    const plan = good();
    plan.get('c')!.push(tp(3));
    plan.get('b')!.pop();
    expect(validatePlan(input, plan)).toMatch(/orders-3 assigned to "c", which is not subscribed/);
  });

  it('rejects a missing partition', () => {
    const plan = good();
    plan.get('b')!.shift();
    expect(validatePlan(input, plan)).toMatch(/orders-2 is missing/);
    expect(validatePlan(input, new Map())).toMatch(/missing/);
  });

  it('rejects partitions out of range, unknown topics and malformed entries', () => {
    for (const bad of [tp(4), tp(-1), tp(1.5), tp(Number.NaN), tp(0, 'nope'), { topic: 3, partition: 0 }, null, 'orders-0']) {
      const plan = good();
      plan.get('a')!.push(bad as TopicPartition);
      expect(validatePlan(input, plan), JSON.stringify(bad)).toMatch(/out of range/);
    }
    const notList = good();
    notList.set('a', 'x' as unknown as TopicPartition[]);
    expect(validatePlan(input, notList)).toMatch(/not a list/);
  });

  it('rejects every broken variant of any assignor output (property)', () => {
    const mutation = fc.constantFrom('unknown', 'twice', 'unsubscribed', 'missing', 'range');
    fc.assert(
      fc.property(fc.constantFrom(...ASSIGNORS), singleTopicArb, mutation, fc.nat(), (name, raw, kind, pick) => {
        const n = raw.partitions[T]!;
        // ensure at least one subscribed member, one unsubscribed member and one partition
        const input: AssignmentInput = {
          partitions: { [T]: Math.max(1, n) },
          members: [...raw.members.filter((m) => !m.memberId.startsWith('~')), member('~sub1'), member('~sub2'), { memberId: '~none', topics: [], owned: [] }],
        };
        const plan = assign(name, input);
        expect(validatePlan(input, plan)).toBeUndefined();
        const withTps = [...plan].filter(([, l]) => l.length > 0);
        const [victim, list] = withTps[pick % withTps.length]!;
        const stolen = list[pick % list.length]!;
        const broken = new Map([...plan].map(([id, l]) => [id, [...l]]));
        switch (kind) {
          case 'unknown':
            broken.set('~ghost', []);
            expect(validatePlan(input, broken)).toMatch(/unknown member/);
            break;
          case 'twice': {
            const other = input.members.find((m) => m.memberId !== victim && m.topics.includes(T))!;
            broken.get(other.memberId)!.push(stolen);
            expect(validatePlan(input, broken)).toMatch(/assigned twice/);
            break;
          }
          case 'unsubscribed':
            broken.set(victim, list.filter((x) => x !== stolen));
            broken.set('~none', [stolen]);
            expect(validatePlan(input, broken)).toMatch(/not subscribed/);
            break;
          case 'missing':
            broken.set(victim, list.filter((x) => x !== stolen));
            expect(validatePlan(input, broken)).toMatch(/missing/);
            break;
          case 'range':
            broken.get(victim)!.push({ topic: T, partition: input.partitions[T]! + (pick % 3) });
            expect(validatePlan(input, broken)).toMatch(/out of range/);
            break;
        }
      }),
      RUNS,
    );
  });
});

// Correctness at scale; speed is measured by benchmarks, not asserted here.
describe('large groups', () => {
  const M = 1000;
  const N = 10_000;
  const fresh: AssignmentInput = {
    partitions: { [T]: N },
    members: Array.from({ length: M }, (_, i) => member(`consumer-${i}-${(i * 7919) % 1000}`)),
  };
  // A realistic rebalance: the group was 999 members (owned sets from a previous assignment), one joins.
  const previous = assign('roundrobin', { ...fresh, members: fresh.members.slice(1) });
  const rebalance: AssignmentInput = {
    ...fresh,
    members: fresh.members.map((m) => ({ ...m, owned: previous.get(m.memberId) ?? [] })),
  };

  it.each(ASSIGNORS)('%s assigns 10,000 partitions over 1,000 members validly and balanced', (name) => {
    for (const input of [fresh, rebalance]) {
      const plan = assign(name, input);
      expect(validatePlan(input, plan)).toBeUndefined();
      expectBalancedSingle(input, plan);
    }
  });

  it('sticky handles 1,000 members with heterogeneous subscriptions over 10,000 partitions', () => {
    const input: AssignmentInput = {
      partitions: { a: 4000, b: 3000, c: 3000 },
      members: Array.from({ length: M }, (_, i) => ({
        memberId: `c${i}`,
        topics: [['a'], ['a', 'b'], ['b', 'c'], ['a', 'b', 'c']][i % 4]!,
        owned: i % 3 === 0 ? [{ topic: 'a', partition: i }] : [],
      })),
    };
    const plan = assign('sticky', input);
    expect(validatePlan(input, plan)).toBeUndefined();
    expectBalancedGeneral(input, plan);
  });
});
