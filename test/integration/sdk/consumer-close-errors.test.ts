/**
 * A clean Consumer.close() gets no error reply: tributary_request_errors_total (docs/operations.md,
 * "Metrics") counts failures, and every closed consumer counted one member_not_found.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Consumer } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { until } from '../../helpers/util.js';

describe('clean consumer close', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1'] });
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'cc', partitions: 2 });
    await c.close();
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('five consumers that read and close add no error reply', async () => {
    const producer = new Producer({ brokers: [broker.address] });
    await producer.send({ topic: 'cc', messages: Array.from({ length: 10 }, (_, i) => ({ value: `v${i}` })) });
    await producer.close();
    for (let n = 0; n < 5; n++) {
      const consumer = new Consumer({ brokers: [broker.address], groupId: `cc-${n}`, topic: 'cc', autoOffsetReset: 'earliest', sessionTimeoutMs: 3000, heartbeatIntervalMs: 200, maxWaitMs: 100 });
      let got = 0;
      void consumer.run({ eachMessage: async () => void got++ });
      await until(() => got === 10, 10_000, 'every record read');
      await consumer.close();
    }
    const { body } = await broker.health('/metrics');
    expect(body.split('\n').filter((l) => l.startsWith('tributary_request_errors_total{'))).toEqual([]);
  });
});
