/**
 * A group's lag and offset resets on a cluster whose coordinator hosts only some of the topic's partitions
 * (replication factor 1 over 3 brokers): GROUP_STATUS, the tributary_group_lag gauge and RESET_OFFSETS take
 * each partition's ends from its leader, not from the coordinator's own copy, which it does not have.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseLine } from 'tributary-protocol/command.js';
import { runCli } from '../../helpers/cli.js';
import { TestCluster } from '../../helpers/cluster.js';

const TOPIC = 'lagged';
const PARTITIONS = 6;
const GROUP = 'g-lag';

describe('group lag and offset resets across brokers', () => {
  let cluster: TestCluster;

  beforeAll(async () => {
    cluster = await TestCluster.start(3);
  }, 120_000);

  afterAll(async () => {
    await cluster?.dispose();
  });

  it('GROUP_STATUS, the lag gauge and RESET_OFFSETS use every partition leader’s log end', async () => {
    const admin = await cluster.connect(0);
    try {
      await admin.command('CREATE', { topic: TOPIC, partitions: PARTITIONS, replication_factor: 1 });
      // Partition p holds 3 + p records, written on its leader.
      const leaders: number[] = [];
      for (let p = 0; p < PARTITIONS; p++) {
        const leader = await cluster.waitFor(`${TOPIC}[${p}] led`, async () => {
          const l = await cluster.leaderOf(TOPIC, p);
          return l.id >= 0 ? l : false;
        });
        leaders.push(leader.id);
        const c = await cluster.connect(leader.id);
        try {
          for (let i = 0; i < 3 + p; i++) await c.command('PUBLISH', { topic: TOPIC, partition: p, acks: 'all', message: `m${i}` });
        } finally {
          await c.close();
        }
      }
      const coord = Number(parseLine(await admin.command('FIND_COORDINATOR', { group: GROUP })).params.get('coordinator_id'));
      // The case that matters: some partitions are led (and, at replication factor 1, only stored) elsewhere.
      expect(leaders.some((id) => id !== coord)).toBe(true);
      const c = await cluster.connect(coord);
      try {
        const latest = parseLine(await c.command('RESET_OFFSETS', { group: GROUP, topic: TOPIC, to: 'latest' })).params.get('offsets');
        expect(latest).toBe(Array.from({ length: PARTITIONS }, (_, p) => `P${p}:${3 + p}`).join(','));
        // An explicit offset is checked against each leader's log: 2 is in range on every partition.
        const two = parseLine(await c.command('RESET_OFFSETS', { group: GROUP, topic: TOPIC, to: 'offset', offset: 2 })).params.get('offsets');
        expect(two).toBe(Array.from({ length: PARTITIONS }, (_, p) => `P${p}:2`).join(','));

        const status = JSON.parse(await c.command('GROUP_STATUS', { group: GROUP })) as {
          offsets: Array<{ partition: number; committed: number; log_end: number; lag: number }>;
          total_lag: number;
        };
        expect(status.offsets.map((o) => [o.partition, o.committed, o.log_end, o.lag])).toEqual(
          Array.from({ length: PARTITIONS }, (_, p) => [p, 2, 3 + p, 1 + p]),
        );
        expect(status.total_lag).toBe(Array.from({ length: PARTITIONS }, (_, p) => 1 + p).reduce((a, b) => a + b, 0));

        const metrics = (await cluster.broker(coord).health('/metrics')).body;
        for (let p = 0; p < PARTITIONS; p++) {
          expect(metrics).toContain(`tributary_group_lag{group="${GROUP}",topic="${TOPIC}",partition="${p}"} ${1 + p}`);
        }
      } finally {
        await c.close();
      }
    } finally {
      await admin.close();
    }
  }, 120_000);

  it("LIST_OFFSETS and topic describe give each partition's offsets as its leader has them; with the leader down, an error or '-', not zeros", async () => {
    const hwms = async (via: number) => {
      const c = await cluster.connect(via);
      try {
        const offsets = parseLine(await c.command('LIST_OFFSETS', { topic: TOPIC })).params.get('offsets')!;
        return offsets.split(',').map((e) => Number(/hwm=(\d+)/.exec(e)![1]));
      } finally {
        await c.close();
      }
    };
    // The records the first test wrote: partition p holds 3 + p, whichever broker answers.
    const expected = Array.from({ length: PARTITIONS }, (_, p) => 3 + p);
    for (let via = 0; via < 3; via++) expect(await hwms(via)).toEqual(expected);
    const describe = async (via: number) =>
      (JSON.parse((await runCli(['topic', 'describe', TOPIC, '--format', 'json', '--bootstrap', cluster.broker(via).address])).stdout) as { partitions: Array<{ hwm: number | null }> }).partitions.map((x) => x.hwm);
    for (let via = 0; via < 3; via++) expect(await describe(via)).toEqual(expected);
    // Partition 0's only replica is killed: a broker without a copy must not answer that it is empty.
    const leader = (await cluster.leaderOf(TOPIC, 0)).id;
    const other = [0, 1, 2].find((id) => id !== leader)!;
    await cluster.broker(leader).kill();
    const c = await cluster.connect(other);
    try {
      const refused = await cluster.waitFor('LIST_OFFSETS refused for the partition without a leader', async () =>
        c.command('LIST_OFFSETS', { topic: TOPIC, partition: 0 }).then(
          () => false,
          (err: { code?: string }) => err.code ?? 'error',
        ),
      );
      expect(refused).toBeTruthy();
    } finally {
      await c.close();
    }
    expect((await describe(other))[0]).toBeNull();
  }, 120_000);
});
