/**
 * TurnWrites (src/broker/turn-writes.ts): a socket is corked at its first reply of a turn and uncorked once,
 * in the check phase; sockets carrying anything but produce acknowledgements are uncorked before those
 * carrying only acks, and a socket whose uncork throws does not keep the others corked.
 */
import { describe, expect, it } from 'vitest';
import { COMMANDS } from 'tributary-broker/broker/commands.js';
import { PRODUCE_ACKS, TurnWrites } from 'tributary-broker/broker/turn-writes.js';

const nextCheck = () => new Promise<void>((resolve) => setImmediate(resolve));

class FakeSocket {
  corks = 0;
  uncorks = 0;
  constructor(
    readonly name: string,
    private readonly log: string[],
    private readonly fail = false,
  ) {}
  cork(): void {
    this.corks++;
  }
  uncork(): void {
    this.uncorks++;
    this.log.push(this.name);
    if (this.fail) throw new Error(`${this.name} broke`);
  }
}

describe('TurnWrites', () => {
  it('uncorks every socket of the turn once, deliveries before produce acks, in the order they corked within each', async () => {
    const log: string[] = [];
    const errors: unknown[] = [];
    const tw = new TurnWrites((e) => errors.push(e));
    const ack1 = new FakeSocket('ack1', log);
    const consumer = new FakeSocket('consumer', log);
    const ack2 = new FakeSocket('ack2', log);
    const mixed = new FakeSocket('mixed', log);
    const group = new FakeSocket('group', log);
    tw.corkFor(ack1, true);
    tw.corkFor(consumer, false);
    tw.corkFor(ack2, true);
    tw.corkFor(ack1, true);
    // An ack first, then a read reply on the same connection: it carries a delivery this turn.
    tw.corkFor(mixed, true);
    tw.corkFor(mixed, false);
    // A delivery first, then an ack: still a delivery.
    tw.corkFor(group, false);
    tw.corkFor(group, true);
    expect(log).toEqual([]);
    expect([ack1, consumer, ack2, mixed, group].map((s) => s.corks)).toEqual([1, 1, 1, 1, 1]);
    await nextCheck();
    expect(log).toEqual(['consumer', 'mixed', 'group', 'ack1', 'ack2']);
    expect([ack1, consumer, ack2, mixed, group].map((s) => s.uncorks)).toEqual([1, 1, 1, 1, 1]);
    expect(errors).toEqual([]);

    // The next turn starts afresh: ack1 carries a delivery now.
    log.length = 0;
    tw.corkFor(ack2, true);
    tw.corkFor(ack1, false);
    await nextCheck();
    expect(log).toEqual(['ack1', 'ack2']);
    expect(ack1.corks).toBe(2);
  });

  it('a socket whose uncork throws is reported and the others are uncorked', async () => {
    const log: string[] = [];
    const errors: unknown[] = [];
    const tw = new TurnWrites((e) => errors.push(e));
    const a = new FakeSocket('a', log, true);
    const b = new FakeSocket('b', log);
    const c = new FakeSocket('c', log);
    tw.corkFor(a, false);
    tw.corkFor(b, false);
    tw.corkFor(c, true);
    await nextCheck();
    expect(log).toEqual(['a', 'b', 'c']);
    expect(errors.map((e) => (e as Error).message)).toEqual(['a broke']);

    // Nor when the report itself throws.
    log.length = 0;
    const throwing = new TurnWrites(() => {
      throw new Error('report failed');
    });
    throwing.corkFor(a, false);
    throwing.corkFor(c, true);
    await nextCheck();
    expect(log).toEqual(['a', 'c']);
  });

  it('names produce commands the broker serves (BATCH is the binary batch frame), no read among them', () => {
    for (const name of PRODUCE_ACKS) if (name !== 'BATCH') expect(Object.hasOwn(COMMANDS, name), name).toBe(true);
    for (const read of ['CONSUME', 'REPLICA_FETCH', 'FETCH_OFFSET']) {
      expect(Object.hasOwn(COMMANDS, read), read).toBe(true);
      expect(PRODUCE_ACKS.has(read)).toBe(false);
    }
  });
});
