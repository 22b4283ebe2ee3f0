/**
 * Group requests whose size is bounded by what a legal one needs (docs/protocol.md, "Consumer groups"):
 * offset lists and leader plans are refused past the topic's partitions before the broker builds them, so
 * one frame cannot hold the event loop for seconds or take gigabytes. Each case checks the refusal, that
 * the group is exactly as it was, and that the broker answers another connection.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import type { BrokerProcess } from '../../helpers/launcher.js';
import { RawClient, peakRssMb } from '../../helpers/raw-client.js';
import { expectError } from '../../helpers/util.js';
import { maxPlanLength } from 'tributary-broker/broker/group-commands.js';
import { GroupMember, kv, stableStatus, startBroker } from './helpers.js';

const TOPIC = 'bounds-t';
const GROUP = 'bounds-g';

/** One frame of `head` then `P0:1,P0:1,...`, just under the 64 MiB frame limit: 13 million entries. */
function hugeEntries(head: string): Buffer {
  const n = Math.floor((64 * 1024 * 1024 - head.length - 16) / 5);
  return Buffer.from(`${head} ${'P0:1,'.repeat(n - 1)}P0:1`);
}

describe('group request bounds', () => {
  let broker: BrokerProcess;
  let admin: Connection;
  let a: GroupMember;
  let snapshot: unknown;

  beforeAll(async () => {
    broker = await startBroker();
    admin = await broker.connect();
    await admin.command('CREATE', { topic: TOPIC, partitions: 4 });
    a = await GroupMember.connect(broker, TOPIC, GROUP, 'a');
    await a.join();
    await a.sync();
    expect(kv(await a.batchCommit('P0:0,P1:0,P2:0,P3:0')).get('batched')).toBe('4');
    snapshot = await stableStatus(admin, GROUP);
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  /** The group is as it was, its member still heartbeats, and a new connection is answered. */
  async function unchanged(): Promise<void> {
    expect(await stableStatus(admin, GROUP)).toEqual(snapshot);
    expect(kv(await a.heartbeat()).get('generation')).toBe(String(a.generation));
    const other = await RawClient.connect(broker.port);
    try {
      expect(await other.command('PROTOCOL_INFO')).toMatch(/^OK protocol=tributary /);
    } finally {
      other.destroy();
    }
  }

  it('BATCH_COMMIT names at most as many entries as the topic has partitions', async () => {
    const err = await expectError(a.batchCommit('P0:1,P1:1,P2:1,P3:1,P4:1'), 'invalid_parameter', { param: 'entries' });
    expect(err.fields.reason).toMatch(/more than 4 entries/);
    // Empty items between commas are bounded too.
    await expectError(a.batchCommit(`P0:1${','.repeat(10)}`), 'invalid_parameter', { param: 'entries' });
    await unchanged();
  });

  it('a 64 MiB BATCH_COMMIT or SEND_OFFSETS_TO_TXN of 13 million entries is refused without building them', async () => {
    for (const head of [
      `BATCH_COMMIT topic=${TOPIC} group=no-such-group member=m generation=1`,
      `SEND_OFFSETS_TO_TXN transactional_id=no-such-txn producerId=1 epoch=0 topic=${TOPIC} group=${GROUP} member=${a.id} generation=${a.generation}`,
    ]) {
      const body = hugeEntries(head);
      const before = peakRssMb(broker);
      const c = await RawClient.connect(broker.port);
      try {
        const reply = await c.command(body, 120_000);
        expect(reply).toMatch(/^ERROR: invalid_parameter .*param=entries/);
        expect(reply).toMatch(/more than (4|100000) entries/);
      } finally {
        c.destroy();
      }
      // The frame and its text are some 200 MB; splitting it into entries took over 2 GB.
      expect(peakRssMb(broker) - before).toBeLessThan(700);
      await unchanged();
    }
  }, 180_000);

  it("SYNC_GROUP: a leader's plan names at most the topic's partitions, and is at most 299 characters a partition long", async () => {
    const l = await GroupMember.connect(broker, TOPIC, 'bounds-client', 'lead');
    await l.join({ protocol: 'client' });
    const before = await stableStatus(admin, 'bounds-client');
    const refused = async (plan: string, reason: RegExp) => {
      const err = await expectError(l.sync({ plan }), 'invalid_parameter', { param: 'plan' });
      expect(err.fields.reason).toMatch(reason);
      expect(await stableStatus(admin, 'bounds-client')).toEqual(before);
    };
    await refused(`${l.id}:0,1,2,3,0`, /more than 4 partitions/);
    // 40,000 parts naming the leader: each once copied the leader's whole list so far (quadratic).
    await refused(`${l.id}:0;`.repeat(40_000), /more than 4 partitions/);
    // A valid plan padded with empty parts past the longest legal one (--max-partitions 10000).
    const valid = `${l.id}:0,1,2,3`;
    await refused(valid + ';'.repeat(maxPlanLength(10_000) + 1 - valid.length), /longer than 2990000 characters/);
    expect(await l.sync({ plan: valid })).toEqual([0, 1, 2, 3]);
    await unchanged();
  });
});
