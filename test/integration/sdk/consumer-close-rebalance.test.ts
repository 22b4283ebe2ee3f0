/**
 * close() racing the member's own rejoin (docs/sdk.md, "Lifecycle"): a close that cuts off a JOIN_GROUP
 * the coordinator has already taken leaves the consumer holding the generation the coordinator moved the
 * member off, and the final commit of it is refused (GEN_MISMATCH). What the member processed must still
 * be committed, or the next owner handles it again.
 */
import { describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { Consumer } from 'tributary-client/consumer.js';
import type { BrokerProcess } from '../../helpers/launcher.js';
import { useGroupBroker } from '../../helpers/group-broker.js';
import { until } from '../../helpers/util.js';

const TOPIC = 'close-rebalance';
const PARTITIONS = 2;
const RECORDS = 40;
/** Each partition's end offset once the records are in. */
const ends: number[] = [];

describe('close() racing a rebalance', () => {
  let broker: BrokerProcess;
  let admin: Connection;

  useGroupBroker({ offsetsPartitions: 1, topic: { name: TOPIC, partitions: PARTITIONS, records: RECORDS } }, (g) => {
    ({ broker, admin } = g);
    ends.push(...g.ends);
  });

  async function committed(group: string): Promise<number[]> {
    const out: number[] = [];
    for (let p = 0; p < PARTITIONS; p++) {
      const r = parseLine(await admin.command('FETCH_OFFSET', { topic: TOPIC, group, partition: p })).params;
      out.push(r.get('committed') === 'true' ? Number(r.get('offset')) : -1);
    }
    return out;
  }

  it('commits what was processed when the coordinator moved the member to a generation it never learnt', async () => {
    const group = 'g-close-join';
    const a = new Consumer({
      brokers: [broker.address],
      groupId: group,
      topic: TOPIC,
      clientId: 'a',
      autoOffsetReset: 'earliest',
      // Only close() commits: what it commits is exactly what was processed.
      autoCommit: false,
      sessionTimeoutMs: 6000,
      heartbeatIntervalMs: 200,
      maxWaitMs: 100,
      // Two slots: the held handler of partition 1 does not hold partition 0 back.
      partitionsConsumedConcurrently: 2,
    });
    // The last record of partition 1 holds its handler: close() waits for it before its final commit.
    let release = () => {};
    const held = new Promise<void>((r) => {
      release = r;
    });
    try {
      const processed = ends.map(() => 0);
      let holding = false;
      void a.run({
        eachMessage: async ({ message }) => {
          if (message.partition === 1 && message.offset === ends[1]! - 1) {
            holding = true;
            await held;
            return; // returns after the close began: not counted (docs/sdk.md, "Concurrency")
          }
          processed[message.partition] = message.offset + 1;
        },
      });
      await until(() => holding && processed[0] === ends[0] && processed[1] === ends[1]! - 1, 20_000, 'a handled every record but the held one');
      const generation = a.generation;
      const closed = a.close();
      // Another member joins (a new generation), and a JOIN_GROUP of a's that its close cut off after the
      // coordinator took it, sent for a here, moves a to that generation: its reply a never reads.
      const joinAs = (member: string, gen?: number) =>
        admin.command('JOIN_GROUP', { topic: TOPIC, group, member, generation: gen, session_timeout_ms: 6000, rebalance_timeout_ms: 6000 });
      await joinAs('x');
      const join = parseLine(
await joinAs(a.memberId!, generation)).params;
      expect(Number(join.get('generation'))).toBeGreaterThan(generation);
      release();
      await closed;
      expect(a.generation).toBeGreaterThanOrEqual(generation);
      expect(await committed(group)).toEqual(processed);
    } finally {
      release();
      await a.close();
    }
  }, 60_000);
});
