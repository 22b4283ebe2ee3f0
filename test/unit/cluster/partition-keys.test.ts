/**
 * cluster/partition-keys.ts: the listing of per-partition records, which keeps its sorted keys while the
 * set of keys is unchanged and each entry's listed form while the entry is. Fed through WatchedPrefix's
 * apply methods, as its watch and its owner's writes feed it (no etcd is contacted).
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import type { Etcd3 } from 'etcd3';
import { countByTopic, listPartitionRecords } from 'tributary-broker/cluster/partition-keys.js';
import { WatchedPrefix } from 'tributary-broker/cluster/watched-prefix.js';

function store(): WatchedPrefix<{ leader: number }> {
  return new WatchedPrefix<{ leader: number }>({} as Etcd3, '/t/partitions/', (text) => JSON.parse(text) as { leader: number });
}

/** What the listing must equal: every record built afresh and sorted, as it was computed before the cache. */
function reference(records: WatchedPrefix<{ leader: number }>, topic?: string) {
  const out = [];
  for (const [key, entry] of records.each()) {
    const slash = key.lastIndexOf('/');
    const t = key.slice(0, slash);
    if (topic !== undefined && t !== topic) continue;
    out.push({ topic: t, partition: Number(key.slice(slash + 1)), ...entry });
  }
  return out.sort((a, b) => (a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : a.partition - b.partition));
}

describe('listPartitionRecords', () => {
  it('sorts by topic then partition number, and filters one topic exactly (names that share a prefix or hold a slash)', () => {
    const s = store();
    let rev = 1;
    for (const key of ['b/10', 'b/2', 'a/1', 'ab/0', 'a/b/3', 'a/0']) s.applyPut(key, { leader: 0 }, rev++, 1);
    expect(listPartitionRecords(s).map((e) => `${e.topic}:${e.partition}`)).toEqual(['a:0', 'a:1', 'a/b:3', 'ab:0', 'b:2', 'b:10']);
    expect(listPartitionRecords(s, 'a').map((e) => e.partition)).toEqual([0, 1]);
    expect(listPartitionRecords(s, 'a/b').map((e) => e.partition)).toEqual([3]);
    expect(listPartitionRecords(s, 'c')).toEqual([]);
  });

  it('shows a new value, a new key and a deleted key at once, and keeps an unchanged entry as the same object', () => {
    const s = store();
    s.applyPut('t/0', { leader: 1 }, 10, 1);
    s.applyPut('t/1', { leader: 1 }, 11, 1);
    const first = listPartitionRecords(s);
    expect(first.map((e) => e.value.leader)).toEqual([1, 1]);
    // A newer write of t/1: its listed form changes; t/0's is the same object as before.
    s.applyPut('t/1', { leader: 2 }, 12, 1);
    const second = listPartitionRecords(s);
    expect(second.map((e) => [e.partition, e.value.leader, e.modRevision])).toEqual([
      [0, 1, 10],
      [1, 2, 12],
    ]);
    expect(second[0]).toBe(first[0]);
    expect(first[1]!.value.leader).toBe(1);
    // A stale write changes nothing.
    s.applyPut('t/1', { leader: 9 }, 11, 1);
    expect(listPartitionRecords(s)[1]!.value.leader).toBe(2);
    // A key comes (in its sorted place) and one goes.
    s.applyPut('s/5', { leader: 3 }, 13, 13);
    s.applyDelete('t/0', 14);
    expect(listPartitionRecords(s).map((e) => `${e.topic}:${e.partition}`)).toEqual(['s:5', 't:1']);
    // Each call returns its own array.
    expect(listPartitionRecords(s)).not.toBe(listPartitionRecords(s));
  });

  it('equals a listing (and per-topic counts) built afresh after any sequence of puts and deletes', () => {
    const op = fc.record({
      del: fc.boolean(),
      topic: fc.constantFrom('a', 'b', 'a/b', 'ab'),
      partition: fc.integer({ min: 0, max: 12 }),
      leader: fc.integer({ min: -1, max: 3 }),
    });
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), fc.array(fc.integer({ min: 0, max: 59 }), { maxLength: 10 }), (ops, checkpoints) => {
        const s = store();
        const at = new Set(checkpoints);
        let rev = 1;
        for (let i = 0; i < ops.length; i++) {
          const o = ops[i]!;
          const key = `${o.topic}/${o.partition}`;
          if (o.del) s.applyDelete(key, rev++);
          else s.applyPut(key, { leader: o.leader }, rev++, 1);
          if (at.has(i)) {
            expect(listPartitionRecords(s)).toEqual(reference(s));
            expect(listPartitionRecords(s, o.topic)).toEqual(reference(s, o.topic));
          }
        }
        expect(listPartitionRecords(s)).toEqual(reference(s));
        for (const t of ['a', 'b', 'a/b', 'ab']) expect(listPartitionRecords(s, t)).toEqual(reference(s, t));
        const counts = new Map<string, number>();
        for (const e of reference(s)) counts.set(e.topic, (counts.get(e.topic) ?? 0) + 1);
        expect(countByTopic(s)).toEqual(counts);
      }),
    );
  });
});
