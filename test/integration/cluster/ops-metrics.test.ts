/**
 * docs/operations.md, "Metrics", against a real cluster: figures summed over brokers count each event or
 * partition once, and the cluster's log lines say what happened.
 */
import { describe, expect, it } from 'vitest';
import { useCluster } from '../../helpers/cluster.js';

/** The sum over brokers of a metric's samples whose labels contain `labels` (`topic="t"`). */
function sample(body: string, name: string, labels = ''): number {
  let sum = 0;
  for (const line of body.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (labels && !line.includes(labels)) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** The keys of a JSON object's top level, in order, duplicates kept (JSON.parse keeps only the last). */
function topLevelKeys(line: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i];
    if (ch === '"') {
      let j = i + 1;
      while (line[j] !== '"') j += line[j] === '\\' ? 2 : 1;
      if (depth === 1 && /^\s*:/.test(line.slice(j + 1))) keys.push(JSON.parse(line.slice(i, j + 1)) as string);
      i = j;
    } else if (ch === '{' || ch === '[') depth++;
    else if (ch === '}' || ch === ']') depth--;
  }
  return keys;
}

describe('ISR shrinks in a cluster', () => {
  const cluster = useCluster(3);

  it('a follower killed with -9 is one shrink summed over brokers, logged as an ISR change, not a leader move', async () => {
    const c = cluster();
    const leader = await c.createInSync('shrinks');
    const controller = (await c.status()).controller;
    const victim = [0, 1, 2].find((id) => id !== leader.id && id !== controller)!;
    await c.broker(victim).kill();
    await c.waitFor('the killed follower out of the ISR', async () => !(await c.leaderOf('shrinks', 0)).isr.includes(victim));
    const live = [0, 1, 2].filter((id) => id !== victim);
    let shrinks = 0;
    for (const id of live) shrinks += sample((await c.broker(id).health('/metrics')).body, 'tributary_isr_shrinks_total', 'topic="shrinks"');
    expect(shrinks).toBe(1);
    const lines = live.flatMap((id) => c.broker(id).stderr.split('\n')).filter((l) => l.startsWith('{'));
    const moves = lines.map((l) => JSON.parse(l) as { msg: string; from?: number; to?: number }).filter((l) => l.msg === 'leader moved');
    expect(moves.filter((m) => m.from === m.to)).toEqual([]);
    await c.broker(victim).relaunch();
  }, 90_000);

  it('every JSON log line has each key once; cluster parts are one component each', async () => {
    const c = cluster();
    const lines = [0, 1, 2].flatMap((id) => c.broker(id).stderr.split('\n')).filter((l) => l.startsWith('{'));
    const twice = lines.filter((l) => new Set(topLevelKeys(l)).size !== topLevelKeys(l).length);
    expect(twice.slice(0, 3)).toEqual([]);
    const components = new Set(lines.map((l) => (JSON.parse(l) as { component?: string }).component));
    expect(components).toContain('cluster.controller');
  });

  it('tributary_partitions and tributary_log_size_bytes are the replicas each broker holds: the sum over brokers counts each replica once', async () => {
    const c = cluster();
    const admin = await c.connect(0);
    try {
      await admin.command('CREATE', { topic: 'placed', partitions: 3, replication_factor: 1 });
    } finally {
      await admin.close();
    }
    await c.waitFor('every broker exporting exactly the replicas it holds', async () => {
      const s = await c.status();
      const placed = s.partitions.filter((p) => p.topic === 'placed');
      if (placed.length !== 3) return false;
      let partitions = 0;
      for (const id of [0, 1, 2]) {
        const body = (await c.broker(id).health('/metrics')).body;
        partitions += sample(body, 'tributary_partitions');
        const series = body.split('\n').filter((l) => l.startsWith('tributary_log_size_bytes{') && l.includes('topic="placed"')).length;
        if (series !== placed.filter((p) => p.replicas.includes(id)).length) return false;
      }
      return partitions === s.partitions.reduce((n, p) => n + p.replicas.length, 0);
    });
  }, 60_000);
});
