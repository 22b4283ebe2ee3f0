/**
 * A producer sends the batches of one synchronous burst in one writev (docs/sdk.md, "Producer"): their
 * linger ends with one setImmediate for all of them, at the end of the turn with `lingerMs` 0, and at the
 * end of the turn their timers fire in otherwise. With a callback each, the connection's uncork ran
 * between them and each batch left in a write call of its own.
 */
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { useProducerSuite } from '../../helpers/sdk-producers.js';

type WriteFn = (this: net.Socket, ...args: unknown[]) => unknown;

/** Counts the socket write calls (`_write`: one chunk, `_writev`: several) made to `port` while `fn` runs. */
async function countWrites(port: number, fn: () => Promise<unknown>): Promise<number[]> {
  const proto = net.Socket.prototype as unknown as { _write: WriteFn; _writev: WriteFn };
  const { _write, _writev } = proto;
  const calls: number[] = [];
  proto._write = function (...args) {
    if (this.remotePort === port) calls.push(1);
    return _write.apply(this, args);
  };
  proto._writev = function (...args) {
    if (this.remotePort === port) calls.push((args[0] as unknown[]).length);
    return _writev.apply(this, args);
  };
  try {
    await fn();
  } finally {
    proto._write = _write;
    proto._writev = _writev;
  }
  return calls;
}

describe('Producer: one write per burst', () => {
  const suite = useProducerSuite();
  const { producers } = suite;

  it.each([0, 5])('lingerMs %i: the batches of one synchronous burst to six partitions leave together, not in a write call each', async (lingerMs) => {
    const t = `turn-writes-${lingerMs}`;
    await suite.admin.command('CREATE', { topic: t, partitions: 6 });
    const producer = producers.make({ lingerMs });
    const partitions = [0, 1, 2, 3, 4, 5];
    // Metadata and the connection first, so the burst below is the only thing written.
    await Promise.all(partitions.map((partition) => producer.send({ topic: t, messages: [{ value: 'warm', partition }] })));
    const port = Number(suite.broker.address.split(':').pop());
    const calls = await countWrites(port, () => Promise.all(partitions.map((partition) => producer.send({ topic: t, messages: [{ value: `v${partition}`, partition }] }))));
    if (lingerMs === 0) expect(calls).toEqual([6]);
    else {
      // Timers armed on both sides of a millisecond boundary (Node reads the clock as it arms each) fire in
      // two timer phases, so two writes at most; a write per batch would be six.
      expect(calls.reduce((a, b) => a + b, 0)).toBe(6);
      expect(calls.length).toBeLessThanOrEqual(2);
    }
    for (const partition of partitions) {
      const batch = await suite.admin.consume({ topic: t, partition, offset: 0, batch: 10 });
      expect(batch.records.map((r) => String(r.value))).toEqual(['warm', `v${partition}`]);
    }
  });
});
