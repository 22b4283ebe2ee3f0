/**
 * `--transactional-id-expiration-ms` on a real broker: an idle transactional id is forgotten, stays
 * forgotten across a restart, and starts over with a new producer id; its old producer is refused.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawTxnProducer } from './helpers.js';
import { eventually, expectError } from '../../helpers/util.js';

describe('transactional id expiry', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--transaction-state-partitions', '2', '--transactional-id-expiration-ms', '400'] });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('forgets an idle id, durably; the id starts over and its old producer is refused', async () => {
    let c = await broker.connect();
    await c.command('CREATE', { topic: 'exp', partitions: 1 });
    const old = new RawTxnProducer(c, 'exp-1');
    await old.init();
    await old.begin();
    await old.publish('exp', 'x', { partition: 0 });
    expect(await old.end('commit')).toBe('committed');
    await eventually('the idle id to be forgotten', () =>
      c.command('TXN_STATUS', { transactional_id: 'exp-1' }).then(
        () => false,
        (err: { code?: string }) => err.code === 'transactional_id_not_found',
      ),
    );
    await expectError(old.begin(), 'transactional_id_not_found');

    await broker.restart();
    c = await broker.connect();
    await expectError(c.command('TXN_STATUS', { transactional_id: 'exp-1' }), 'transactional_id_not_found');
    const fresh = new RawTxnProducer(c, 'exp-1');
    await fresh.init();
    expect(fresh.epoch).toBe(0);
    expect(fresh.producerId).not.toBe(old.producerId);
    await expectError(c.command('BEGIN_TXN', { transactional_id: 'exp-1', producerId: old.producerId, epoch: old.epoch }), 'invalid_producer_epoch');
  });
});
