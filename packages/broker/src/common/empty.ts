/**
 * Shared empty collections for state that most partitions of a big broker never fill (producer state,
 * open transactions): an empty Map or Set costs about 150 bytes, and a broker with 10,000 idle
 * partitions kept seven of them each, enough retained heap to lengthen its garbage collections
 * (bench/README.md, "scale"). A field starts as the shared one and is replaced on its first write; the
 * shared one refuses writes, so a missed replacement fails loudly instead of leaking state between owners.
 */
class EmptyMap<K, V> extends Map<K, V> {
  override set(): this {
    throw new Error('write to the shared empty map');
  }
}

class EmptySet<T> extends Set<T> {
  override add(): this {
    throw new Error('write to the shared empty set');
  }
}

const MAP = new EmptyMap<never, never>();
const SET = new EmptySet<never>();
/** Frozen: a push or splice on it throws. */
const ARRAY: readonly never[] = Object.freeze([]);

/** The shared empty Map (read-only in effect): start a field with it, replace it on the first write. */
export function emptyMap<K, V>(): Map<K, V> {
  return MAP as unknown as Map<K, V>;
}

/** The shared empty Set (read-only in effect): start a field with it, replace it on the first write. */
export function emptySet<T>(): Set<T> {
  return SET as unknown as Set<T>;
}

/** The shared empty array (frozen): start a field with it, replace it on the first write. */
export function emptyArray<T>(): T[] {
  return ARRAY as unknown as T[];
}

/** `a`, or a new array in its place when `a` is the shared empty one. */
export function writableArray<T>(a: T[]): T[] {
  return a === (ARRAY as unknown) ? [] : a;
}

/** `m`, or a new Map in its place when `m` is the shared empty one. */
export function writableMap<K, V>(m: Map<K, V>): Map<K, V> {
  return m === (MAP as unknown) ? new Map<K, V>() : m;
}

/** `s`, or a new Set in its place when `s` is the shared empty one. */
export function writableSet<T>(s: Set<T>): Set<T> {
  return s === (SET as unknown) ? new Set<T>() : s;
}
