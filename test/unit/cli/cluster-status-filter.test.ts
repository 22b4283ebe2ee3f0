/**
 * `cluster status` narrows its JSON as it narrows its tables (--topic, --internal), and a --topic the
 * cluster does not have is an error (exit 1), not an empty report. In-process, against a scripted broker
 * that answers CLUSTER_STATUS.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { cliInProcess as cli } from '../../helpers/cli-in-process.js';
import { ScriptedServer } from '../../helpers/scripted-server.js';

const part = (topic: string, partition: number) => ({ topic, partition, leader: 0, leader_epoch: 0, isr: [0], hwm: 0 });
const STATUS = {
  mode: 'standalone',
  broker_id: 0,
  controller: 0,
  brokers: [{ id: 0, host: '127.0.0.1', port: 9000 }],
  partitions: [part('t2', 0), part('t1', 1), part('t1', 0), part('__consumer_offsets', 0)],
  under_replicated: 0,
  leaderless: 0,
};

let server: ScriptedServer;
beforeAll(async () => {
  server = await ScriptedServer.start({ script: { CLUSTER_STATUS: () => JSON.stringify({ status: 'OK', ...STATUS }) } });
});
afterAll(async () => {
  await server.close();
});

const status = (...args: string[]) => cli('cluster', 'status', '--bootstrap', server.address, ...args);
const topicsOf = (stdout: string) => (JSON.parse(stdout) as { partitions: Array<{ topic: string; partition: number }> }).partitions.map((p) => `${p.topic}[${p.partition}]`);

it('--format json and --json honour --topic and --internal', async () => {
  for (const json of [['--format', 'json'], ['--json']]) {
    const one = await status(...json, '--topic', 't1');
    expect(one.code).toBe(0);
    // Before: every partition, the internal one too.
    expect(topicsOf(one.stdout)).toEqual(['t1[0]', 't1[1]']);
    expect(topicsOf((await status(...json)).stdout)).toEqual(['t1[0]', 't1[1]', 't2[0]']);
    expect(topicsOf((await status(...json, '--internal')).stdout)).toEqual(['__consumer_offsets[0]', 't1[0]', 't1[1]', 't2[0]']);
    expect(topicsOf((await status(...json, '--topic', '__consumer_offsets')).stdout)).toEqual(['__consumer_offsets[0]']);
  }
});

it('an unknown --topic is an error, in tables and JSON', async () => {
  for (const json of [[], ['--json']]) {
    const r = await status(...json, '--topic', 'nope');
    // Before: exit 0 and "partitions (0 of nope): (none)".
    expect([r.code, r.stdout, r.stderr]).toEqual([1, '', 'error: topic_not_found topic=nope\n']);
  }
});

// A cluster with broker 2 down: wide[0] under-replicated, wide[1] led by the dead broker (leaderless and
// under-replicated), solo[0] fine, __consumer_offsets[0] under-replicated.
const TROUBLED = {
  mode: 'cluster',
  broker_id: 0,
  controller: 0,
  brokers: [
    { id: 0, address: '127.0.0.1:9000', started_at: 0 },
    { id: 1, address: '127.0.0.1:9001', started_at: 0 },
  ],
  partitions: [
    { topic: 'wide', partition: 0, leader: 0, leader_epoch: 1, replicas: [0, 1, 2], isr: [0, 1] },
    { topic: 'wide', partition: 1, leader: 2, leader_epoch: 1, replicas: [2, 0], isr: [2] },
    { topic: 'solo', partition: 0, leader: 0, leader_epoch: 0, replicas: [0], isr: [0] },
    { topic: '__consumer_offsets', partition: 0, leader: 1, leader_epoch: 2, replicas: [0, 1, 2], isr: [0, 1] },
  ],
  under_replicated: 3,
  leaderless: 1,
};

it('the under-replicated and leaderless counts are of the partitions shown, in tables and JSON', async () => {
  const troubled = await ScriptedServer.start({ script: { CLUSTER_STATUS: () => JSON.stringify({ status: 'OK', ...TROUBLED }) } });
  try {
    const run = (...args: string[]) => cli('cluster', 'status', '--bootstrap', troubled.address, ...args);
    const counts = async (...args: string[]) => {
      const s = JSON.parse((await run('--json', ...args)).stdout) as { under_replicated: number; leaderless: number };
      return [s.under_replicated, s.leaderless];
    };
    // Before: 3 and 1, the whole cluster's, whatever --topic or --internal said.
    expect(await counts('--topic', 'solo')).toEqual([0, 0]);
    expect(await counts('--topic', 'wide')).toEqual([2, 1]);
    expect(await counts('--topic', '__consumer_offsets')).toEqual([1, 0]);
    expect(await counts()).toEqual([2, 1]);
    expect(await counts('--internal')).toEqual([3, 1]);
    // The internal partitions the default leaves out are counted apart in JSON too, and only then.
    const apart = async (...args: string[]) => {
      const s = JSON.parse((await run('--json', ...args)).stdout) as { internal_under_replicated?: number; internal_leaderless?: number };
      return [s.internal_under_replicated, s.internal_leaderless];
    };
    expect(await apart()).toEqual([1, 0]);
    expect(await apart('--internal')).toEqual([undefined, undefined]);
    expect(await apart('--topic', 'solo')).toEqual([undefined, undefined]);
    const head = async (...args: string[]) => (await run(...args)).stdout.split('\n').slice(2, 4);
    expect(await head('--topic', 'solo')).toEqual(['under-replicated:  0', 'leaderless:        0']);
    expect(await head('--internal')).toEqual(['under-replicated:  3', 'leaderless:        1']);
    // Internal partitions left out are still named, so that the default report does not look healthy.
    expect(await head()).toEqual(['under-replicated:  2 (and 1 of internal topics: --internal shows them)', 'leaderless:        1']);
  } finally {
    await troubled.close();
  }
});
