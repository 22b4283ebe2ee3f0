/**
 * common/empty.ts: the shared empty Map, Set and array that idle partitions start their producer and
 * transaction state with. Writes to them are refused (a missed replacement must not leak one partition's
 * state into another's), and a writable replacement is a collection of its own.
 */
import { describe, expect, it } from 'vitest';
import { emptyArray, emptyMap, emptySet, writableArray, writableMap, writableSet } from 'tributary-broker/common/empty.js';
import { ProducerStateTable } from 'tributary-broker/partition/producer-state.js';
import { TxnIndex } from 'tributary-broker/partition/txn-index.js';

describe('shared empty collections', () => {
  it('refuse writes and read as empty', () => {
    const m = emptyMap<string, number>();
    const s = emptySet<string>();
    const a = emptyArray<number>();
    expect(() => m.set('a', 1)).toThrow(/shared empty map/);
    expect(() => s.add('a')).toThrow(/shared empty set/);
    expect(() => a.push(1)).toThrow(TypeError);
    expect(() => a.splice(0, 0, 1)).toThrow(TypeError);
    expect(a.length).toBe(0);
    expect(emptyArray()).toBe(a);
    expect(m.size).toBe(0);
    expect(s.size).toBe(0);
    expect(m.get('a')).toBeUndefined();
    expect(emptyMap()).toBe(m);
  });

  it('are replaced by collections of their own on the first write, which then stay', () => {
    const m = writableMap(emptyMap<string, number>());
    const s = writableSet(emptySet<string>());
    const a = writableArray(emptyArray<number>());
    m.set('a', 1);
    s.add('a');
    a.push(1);
    expect(writableArray(a)).toBe(a);
    expect(emptyArray<number>().length).toBe(0);
    expect(writableMap(m)).toBe(m);
    expect(writableSet(s)).toBe(s);
    expect(writableMap(emptyMap<string, number>())).not.toBe(m);
    expect(emptyMap<string, number>().size).toBe(0);
    expect(emptySet<string>().size).toBe(0);
  });

  it('keep the state of two tables apart', () => {
    const a = new ProducerStateTable();
    const b = new ProducerStateTable();
    a.begin('p', 0, 0, 0, 1);
    expect(a.size).toBe(1);
    expect(b.size).toBe(0);
    b.fence('q', 3, 1);
    expect(b.describe('q')).toEqual({ epoch: 3, lastSeq: -1 });
    expect(a.describe('q')).toBeUndefined();
    const x = new TxnIndex();
    const y = new TxnIndex();
    x.appended(x.begin('p', 0, 10), 10);
    expect(x.firstUnstableOffset()).toBe(10);
    expect(y.firstUnstableOffset()).toBe(Infinity);
    const t = x.beginMarker('p', 0);
    expect(t).not.toBeNull();
    expect(x.markersOf('p')).toBe(1);
    expect(y.markersOf('p')).toBe(0);
    expect(x.firstUnstableOffset()).toBe(10);
    // Aborted ranges and closed transactions (the shared empty arrays until the first marker).
    x.markerWritten(t, 'abort', 12);
    expect(x.abortedTxns()).toEqual([{ producerId: 'p', firstOffset: 10, lastOffset: 12 }]);
    expect(y.abortedTxns()).toEqual([]);
    expect(x.snapshot(11).open).toEqual([{ producerId: 'p', epoch: 0, firstOffset: 10 }]);
    expect(y.snapshot(11).open).toEqual([]);
    y.prune(100);
    expect(y.abortedTxns()).toEqual([]);
  });
});
