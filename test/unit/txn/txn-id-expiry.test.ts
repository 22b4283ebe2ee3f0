/**
 * Transactional ids expire after an idle time (Kafka's transactional.id.expiration.ms), on a fake clock:
 * an id with no transaction open is forgotten once idle long enough, durably (a restart does not bring it
 * back), its old producer is refused, and the id starts over with a new producer id. An open transaction
 * never expires. Real partitions in a temporary directory; no server.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type Coordinators, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { errorCode, expectError, rec, removeDir, tempDir, until } from '../../helpers/util.js';

const TOPIC = 'data';
const EXPIRY = 20_000;

let dir: string;
let clock: FakeClock;
let c: Coordinators;

const open = () => openCoordinators(dir, clock, { topics: { [TOPIC]: 1 }, txn: { idExpirationMs: EXPIRY } });

beforeEach(async () => {
  dir = await tempDir('trib-txn-expiry-');
  clock = new FakeClock();
  c = await open();
});

afterEach(async () => {
  await c.close();
  await removeDir(dir);
});

/** Whether the coordinator knows the id (status() throws transactional_id_not_found otherwise). */
function known(id: string): boolean {
  try {
    c.txns.status(id);
    return true;
  } catch (err) {
    if (err instanceof TributaryError && err.code === 'transactional_id_not_found') return false;
    throw err;
  }
}

describe('transactional id expiry', () => {
  it('forgets an idle id durably, refuses its old producer, and starts the id over; an open transaction stays', async () => {
    const old = await c.txns.initProducerId('idle', 60_000);
    await c.txns.begin('idle', old.producerId, 0);
    await c.txns.publish('idle', old.producerId, 0, TOPIC, 0, rec('a'), 1);
    expect(await c.txns.endTxn('idle', old.producerId, 0, 'commit')).toBe('committed');
    const endedAt = clock.now();
    // Another id stays open past the expiration (its timeout is longer).
    const busy = await c.txns.initProducerId('busy', 600_000);
    await c.txns.begin('busy', busy.producerId, 0);
    await c.txns.publish('busy', busy.producerId, 0, TOPIC, 0, rec('b'), 1);

    await clock.advanceTo(endedAt + EXPIRY - 1);
    expect(known('idle')).toBe(true);
    // The sweep runs at least every quarter of the expiration: by then the id is gone.
    await clock.advance(EXPIRY / 4 + 1);
    await until(() => !known('idle'), 5000, 'the idle id to be forgotten');
    expect(c.txns.status('busy')).toMatchObject({ state: 'open', epoch: 0 });

    // Its producer is refused everywhere it would act.
    await expectError(c.txns.begin('idle', old.producerId, 0), 'transactional_id_not_found');
    expect(await errorCode((async () => c.txns.publish('idle', old.producerId, 0, TOPIC, 0, rec('late'), 2))())).toBe('transactional_id_not_found');

    // Durable: a restart replays the tombstone.
    await c.close();
    c = await open();
    expect(known('idle')).toBe(false);
    expect(known('busy')).toBe(true); // (open across a restart: the coordinator aborts it, as ever)

    // The id starts over: a new producer id at epoch 0; the old one is another producer.
    const again = await c.txns.initProducerId('idle', 60_000);
    expect(again.epoch).toBe(0);
    expect(again.producerId).not.toBe(old.producerId);
    await expectError(c.txns.begin('idle', old.producerId, 0), 'invalid_producer_epoch');
  });

  it('any change keeps an id alive: a new epoch restarts its idle time', async () => {
    const p = await c.txns.initProducerId('kept', 60_000);
    await clock.advance(EXPIRY - 1000);
    await c.txns.initProducerId('kept', 60_000);
    await clock.advance(EXPIRY - 1000);
    expect(c.txns.status('kept')).toMatchObject({ producerId: p.producerId, epoch: 1 });
    await clock.advance(1000 + EXPIRY / 4 + 1);
    await until(() => !known('kept'), 5000, 'the id to be forgotten once idle');
  });
});
