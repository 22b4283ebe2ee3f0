/**
 * InitProducerId for a transactional id whose previous transaction is decided but whose markers cannot be
 * written yet (the partition's log refuses them, as a full disk does: failpoint
 * `partition.marker:<topic>?<file>`, armed while the file exists) is CONCURRENT_TRANSACTIONS, as Kafka's
 * coordinator answers an id in PrepareCommit or PrepareAbort: the client backs off and retries, rather
 * than looking the coordinator up again (NOT_COORDINATOR) as if it had moved. So is one that fences an open
 * transaction whose abort markers then fail. Once the markers land the same request is served, the epoch
 * bumped (docs/kafka.md, "Transactions").
 */
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawKafka } from '../../helpers/raw-kafka.js';
import { removeDir, tempDir } from '../../helpers/util.js';

const TOPIC = 'kpm-stuck';
const CONCURRENT_TRANSACTIONS = kafkaErrorCode('CONCURRENT_TRANSACTIONS');

describe('InitProducerId while the previous transaction’s markers are pending', () => {
  let broker: BrokerProcess;
  let faults: string;
  /** While this file exists, TOPIC's partition refuses markers. */
  let diskFull: string;

  beforeAll(async () => {
    faults = await tempDir('tributary-kpm-faults-');
    diskFull = path.join(faults, 'disk-full');
    broker = await BrokerProcess.start({
      args: ['--kafka-port', '0', '--offsets-topic-partitions', '1', '--transaction-state-partitions', '1'],
      env: { TRIBUTARY_FAILPOINTS: `partition.marker:${TOPIC}?${diskFull}` },
    });
  });

  afterAll(async () => {
    await broker?.dispose();
    if (faults) await removeDir(faults);
  });

  it('is CONCURRENT_TRANSACTIONS (retriable) until the markers land, then served with the epoch bumped', async () => {
    const c = await broker.connect();
    await c.command('CREATE', { topic: TOPIC, partitions: 1 });
    await c.close();
    const raw = await RawKafka.connect(broker.kafkaPort);
    try {
      const transactionalId = 'kpm-1';
      const init = await raw.call(22, 1, { transactionalId, transactionTimeoutMs: 60_000 });
      expect(init.errorCode).toBe(0);
      const p = { producerId: init.producerId, producerEpoch: init.producerEpoch };
      const added = await raw.call(24, 1, { transactionalId, ...p, topics: [{ name: TOPIC, partitions: [0] }] });
      expect(added.results).toEqual([{ name: TOPIC, results: [{ partitionIndex: 0, errorCode: 0 }] }]);

      // A second id with its transaction left open, as by a producer that crashed.
      const open = await raw.call(22, 4, { transactionalId: 'kpm-open', transactionTimeoutMs: 60_000 });
      const q = { producerId: open.producerId, producerEpoch: open.producerEpoch };
      expect((await raw.call(24, 3, { transactionalId: 'kpm-open', ...q, topics: [{ name: TOPIC, partitions: [0] }] })).results).toEqual([
        { name: TOPIC, results: [{ partitionIndex: 0, errorCode: 0 }] },
      ]);

      // The disk fills up: the commit is decided durably (EndTxn answers it), its marker refused.
      await writeFile(diskFull, '');
      expect((await raw.call(26, 1, { transactionalId, ...p, committed: true })).errorCode).toBe(0);
      // The open one's new producer fences it: the abort is decided, its marker refused.
      expect((await raw.call(22, 4, { transactionalId: 'kpm-open', transactionTimeoutMs: 60_000 })).errorCode).toBe(CONCURRENT_TRANSACTIONS);

      // A new producer of the id (kafkajs asks with v1, librdkafka with v4), and again: the retriable code.
      for (const version of [1, 4, 1]) {
        const again = await raw.call(22, version, { transactionalId, transactionTimeoutMs: 60_000 });
        expect([again.errorCode, again.producerId, again.producerEpoch], `v${version}`).toEqual([CONCURRENT_TRANSACTIONS, -1n, -1]);
      }
      // Another id is served meanwhile.
      expect((await raw.call(22, 4, { transactionalId: 'kpm-other', transactionTimeoutMs: 60_000 })).errorCode).toBe(0);

      // Room again: the same request is served (the markers written first), the epoch bumped.
      await rm(diskFull);
      const served = await raw.call(22, 4, { transactionalId, transactionTimeoutMs: 60_000 });
      expect([served.errorCode, served.producerId, served.producerEpoch]).toEqual([0, p.producerId, (p.producerEpoch as number) + 1]);
      const reopened = await raw.call(22, 4, { transactionalId: 'kpm-open', transactionTimeoutMs: 60_000 });
      expect([reopened.errorCode, reopened.producerId]).toEqual([0, q.producerId]);
      expect(reopened.producerEpoch).toBeGreaterThan(q.producerEpoch as number);
    } finally {
      raw.socket.destroy();
    }
  });
});
