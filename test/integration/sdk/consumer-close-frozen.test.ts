/**
 * close() while the group's coordinator is frozen (SIGSTOP) with an auto-commit in flight returns without
 * waiting for it to come back (docs/sdk.md, "Closing": the final commit and the leave get at most
 * min(sessionTimeoutMs, 5 s)). The auto-commit worker's own commit waited out its retry budget (30 s)
 * first, and close() with it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Consumer } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { sleep, until } from '../../helpers/util.js';

describe('close() with a frozen coordinator', () => {
  let broker: BrokerProcess;
  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--group-join-window-ms', '20'] });
  });
  afterAll(async () => {
    broker?.proc?.kill('SIGCONT');
    await broker?.dispose();
  });

  it('returns while the coordinator is still frozen, though a commit was in flight', { timeout: 60_000 }, async () => {
    const admin = await broker.connect();
    await admin.command('CREATE', { topic: 'cf', partitions: 2 });
    await admin.close();
    const producer = new Producer({ brokers: [broker.address] });
    await producer.send({ topic: 'cf', messages: Array.from({ length: 100 }, (_, i) => ({ value: `v${i}`, partition: i % 2 })) });
    await producer.close();
    const c = new Consumer({
      brokers: [broker.address],
      groupId: 'cf',
      topic: 'cf',
      autoOffsetReset: 'earliest',
      sessionTimeoutMs: 3000,
      heartbeatIntervalMs: 300,
      autoCommitIntervalMs: 50,
    });
    let handled = 0;
    const run = c.run({
      eachMessage: async () => {
        handled++;
        await sleep(20);
      },
    });
    const commits: number[] = [];
    c.on('commit', () => commits.push(Date.now()));
    await until(() => handled > 5 && commits.length > 0, 15_000, 'records handled and committed');
    broker.proc!.kill('SIGSTOP');
    try {
      // A handled record, then an auto-commit interval: a commit goes to the frozen coordinator.
      const before = handled;
      await until(() => handled > before, 5_000, 'a record handled after the freeze');
      await sleep(200);
      const outcome = await Promise.race([c.close().then(() => 'closed'), sleep(20_000).then(() => 'waiting for the coordinator')]);
      expect(outcome).toBe('closed');
    } finally {
      broker.proc!.kill('SIGCONT');
    }
    await run.catch(() => {});
  });
});
