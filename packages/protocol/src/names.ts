/**
 * Suggestions for misspelt names (parameters, options, flags): unknown names are refused, and the
 * refusal names the nearest valid one when there is a close one (docs/protocol.md, "Text commands").
 */

/** Edit distance (insertions, deletions, substitutions, and swaps of neighbours), case-insensitive. */
export function editDistance(a: string, b: string): number {
  a = a.toLowerCase();
  b = b.toLowerCase();
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/** The candidate closest to `name`, if one is close enough to be a likely typo (or differs only in case or `_`). */
export function nearestName(name: string, candidates: Iterable<string>): string | undefined {
  const squash = (s: string) => s.toLowerCase().replace(/[_-]/g, '');
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const c of candidates) {
    const dist = squash(c) === squash(name) ? 0 : editDistance(name, c);
    if (dist < bestDistance) {
      best = c;
      bestDistance = dist;
    }
  }
  return best !== undefined && bestDistance <= Math.max(1, Math.min(3, Math.floor(name.length / 3))) ? best : undefined;
}
