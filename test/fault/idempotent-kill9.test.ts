/**
 * kill -9 and idempotent producers: a batch acknowledged before the crash, resent after the restart, is
 * answered as a duplicate with its original offsets (the producer state is rebuilt from the log past the
 * last snapshot), and nothing is stored twice.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Batch } from 'tributary-protocol/batch.js';
import { parseLine } from 'tributary-protocol/command.js';
import { BrokerProcess } from '../helpers/launcher.js';

const BASE_ARGS = ['--offsets-topic-partitions', '1', '--flush', 'always'];

/** The producer id INIT_PRODUCER_ID gave this file's producer (before its first batch). */
let pid = '';

function idemBatch(first: number, values: string[], epoch = 0): Batch {
  return {
    topic: 'k9i',
    partition: 0,
    acks: 'all',
    idempotent: true,
    firstSequence: first,
    lastSequence: first + values.length - 1,
    records: values.map((v, i) => ({
      offset: 0,
      sequence: first + i,
      producerId: pid,
      key: null,
      epoch,
      value: Buffer.from(v),
      timestamp: 0,
      attributes: 0,
      headers: [],
    })),
  };
}

describe('idempotent producer state across kill -9', () => {
  let broker: BrokerProcess | undefined;
  afterEach(async () => {
    await broker?.dispose();
    broker = undefined;
  });

  it('answers a batch resent after kill -9 with its original offsets', async () => {
    broker = await BrokerProcess.start({ args: BASE_ARGS });
    let c = await broker.connect();
    await c.command('CREATE', { topic: 'k9i', partitions: 1 });
    pid = parseLine(await c.command('INIT_PRODUCER_ID')).params.get('producerId')!;
    await c.command('PUBLISH', { topic: 'k9i', partition: 0, message: 'plain' });
    const a = await c.produceBatch(idemBatch(0, ['a', 'b', 'c']));
    const b = await c.produceBatch(idemBatch(3, ['d']));
    expect(a).toMatchObject({ base_offset: 1, last_offset: 3, count: 3 });
    await broker.kill('SIGKILL');
    await broker.relaunch();
    c = await broker.connect();
    expect(await c.produceBatch(idemBatch(3, ['d']))).toEqual(b);
    expect(await c.produceBatch(idemBatch(0, ['a', 'b', 'c']))).toEqual(a);
    await expect(c.produceBatch(idemBatch(7, ['x']))).rejects.toMatchObject({ code: 'out_of_order_sequence' });
    const next = await c.produceBatch(idemBatch(4, ['e']));
    expect(next.base_offset).toBe(5);

    // and once more, after a state that itself came from a replay
    await broker.kill('SIGKILL');
    await broker.relaunch();
    c = await broker.connect();
    expect(await c.produceBatch(idemBatch(4, ['e']))).toEqual(next);
    const offsets = parseLine(await c.command('LIST_OFFSETS', { topic: 'k9i' })).params.get('offsets')!;
    expect(offsets).toContain('leo=6');
    const recs = (await c.consume({ topic: 'k9i', partition: 0, offset: 0, batch: 100 })).records;
    expect(recs.map((r) => r.value.toString())).toEqual(['plain', 'a', 'b', 'c', 'd', 'e']);
    expect(recs.slice(1).map((r) => r.sequence)).toEqual([0, 1, 2, 3, 4]);
  });
});
