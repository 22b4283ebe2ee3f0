/**
 * A transaction's seqNum reused for another topic or partition against a real broker process: it is
 * out_of_order_sequence and changes nothing, not a retry answered with another record's place; a genuine
 * retry (same seqNum, topic and partition) keeps its original offset (docs/protocol.md, TXN_PUBLISH and
 * section 5.3). The SDK's transactional producer, whose seqNums span topics and partitions, still commits.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import type { Batch, BatchRecord } from 'tributary-protocol/batch.js';
import { Producer } from 'tributary-client/producer.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { batchRec, expectError } from '../../helpers/util.js';
import { RawTxnProducer, offsets, readAll } from './helpers.js';

interface TxnAck {
  records: Array<{ partition: number; offset: number; duplicate?: true }>;
}

function frame(p: RawTxnProducer, topic: string, partition: number, firstSequence: number, records: BatchRecord[]): Batch {
  return {
    topic,
    partition,
    acks: 'all',
    idempotent: false,
    firstSequence,
    lastSequence: firstSequence + records.length - 1,
    records,
    txn: { transactionalId: p.id, producerId: p.producerId, epoch: p.epoch, coordinatorPartition: -1, coordinatorEpoch: -1 },
  };
}

describe('transaction seqNum reused for another topic or partition', () => {
  let broker: BrokerProcess;
  let c: Connection;

  const leos = (topic: string) => Promise.all([0, 1].map(async (p) => (await offsets(c, topic, p)).leo));
  const committed = async (topic: string, partition: number) => (await readAll(c, topic, partition, 'read_committed')).map((r) => r.value);

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '2', '--transaction-state-partitions', '2'] });
    c = await broker.connect();
    for (const topic of ['ra', 'rb', 'fa', 'fb', 'sa', 'sb']) await c.command('CREATE', { topic, partitions: 2 });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('TXN_PUBLISH: another topic or partition is out_of_order_sequence and writes nothing; a retry is a duplicate', async () => {
    const p = new RawTxnProducer(c, 'reuse-text');
    await p.init();
    await p.begin();
    const first = await p.publish('ra', 'a1', { partition: 0 });
    await p.publish('ra', 'a2', { partition: 1 });
    const before = [...(await leos('ra')), ...(await leos('rb'))];

    await expectError(p.publish('rb', 'b1', { partition: 0, seqNum: 1 }), 'out_of_order_sequence', { sequence: '1', expected: '3', reason: 'seqNum 1 was taken by topic ra partition 0' });
    await expectError(p.publish('rb', 'b1', { seqNum: 1 }), 'out_of_order_sequence', { expected: '3' });
    await expectError(p.publish('ra', 'a1', { partition: 1, seqNum: 1 }), 'out_of_order_sequence', { sequence: '1', expected: '3' });
    expect([...(await leos('ra')), ...(await leos('rb'))]).toEqual(before);

    // The same seqNum, topic and partition is a retry: the original place, nothing appended.
    expect(await p.publish('ra', 'a1', { partition: 0, seqNum: 1 })).toEqual({ ...first, duplicate: true });
    expect(await p.publish('ra', 'a1', { seqNum: 1 })).toEqual({ ...first, duplicate: true });
    expect([...(await leos('ra')), ...(await leos('rb'))]).toEqual(before);

    // The refusals took no seqNum: the next is still 3, and the transaction commits what it wrote.
    await p.publish('rb', 'b3', { partition: 0, seqNum: 3 });
    expect(await p.end('commit')).toBe('committed');
    expect(await committed('ra', 0)).toEqual(['a1']);
    expect(await committed('ra', 1)).toEqual(['a2']);
    expect(await committed('rb', 0)).toEqual(['b3']);
    expect(await committed('rb', 1)).toEqual([]);
  });

  it('a transactional batch frame reusing seqNums for another topic or partition is refused whole; its retry is a duplicate', async () => {
    const p = new RawTxnProducer(c, 'reuse-frame');
    await p.init();
    await p.begin();
    const f = frame(p, 'fa', 0, 1, [batchRec('a1'), batchRec('a2')]);
    const ack = await c.produceBatch<TxnAck>(f);
    const before = [...(await leos('fa')), ...(await leos('fb'))];

    await expectError(c.produceBatch(frame(p, 'fb', 0, 1, [batchRec('b1'), batchRec('b2')])), 'out_of_order_sequence', { sequence: '1', expected: '3' });
    await expectError(c.produceBatch(frame(p, 'fa', 1, 1, [batchRec('a1'), batchRec('a2')])), 'out_of_order_sequence', { sequence: '1', expected: '3' });
    // Part retry, part new: the reused seqNum 2 refuses the frame, and seqNum 3 is not taken.
    await expectError(c.produceBatch(frame(p, 'fb', -1, 2, [batchRec('b2'), batchRec('b3')])), 'out_of_order_sequence', { sequence: '2', expected: '3' });
    expect([...(await leos('fa')), ...(await leos('fb'))]).toEqual(before);

    const again = await c.produceBatch<TxnAck>(f);
    expect(again.records).toEqual(ack.records.map((r) => ({ ...r, duplicate: true })));
    expect([...(await leos('fa')), ...(await leos('fb'))]).toEqual(before);

    const next = await c.produceBatch<TxnAck>(frame(p, 'fb', 1, 3, [batchRec('b3')]));
    expect(next.records).toHaveLength(1);
    expect(await p.end('commit')).toBe('committed');
    expect(await committed('fa', 0)).toEqual(['a1', 'a2']);
    expect(await committed('fa', 1)).toEqual([]);
    expect(await committed('fb', 0)).toEqual([]);
    expect(await committed('fb', 1)).toEqual(['b3']);
  });

  it("the SDK's seqNums span the transaction's topics and partitions: nothing it sends is refused", async () => {
    const producer = new Producer({ brokers: [broker.address], transactionalId: 'reuse-sdk' });
    try {
      const t = await producer.transaction();
      await t.send({ topic: 'sa', messages: [{ value: 'x0', partition: 0 }, { value: 'x1', partition: 1 }, { key: 'k', value: 'xk' }] });
      await t.send({ topic: 'sb', messages: [{ value: 'y0', partition: 0 }, { value: 'y-any' }] });
      await t.commit();
      const sa = (await Promise.all([0, 1].map((q) => committed('sa', q)))).flat();
      const sb = (await Promise.all([0, 1].map((q) => committed('sb', q)))).flat();
      expect(sa.sort()).toEqual(['x0', 'x1', 'xk']);
      expect(sb.sort()).toEqual(['y-any', 'y0']);
    } finally {
      await producer.close({ signal: AbortSignal.timeout(5000) }).catch(() => {});
    }
  });
});
