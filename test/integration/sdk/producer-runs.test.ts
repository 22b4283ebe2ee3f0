/**
 * send(..., { metadata: 'runs' }) against a real broker: each run's offsets hold exactly the run's
 * messages when the partition is read back, with keyed, keyless and explicit-partition messages, sends
 * split over several batches and two producers writing between them.
 */
import { describe, expect, it } from 'vitest';
import type { Producer, ProducerMessage, ProducerOptions, SendRun } from 'tributary-client/producer.js';
import { useProducerSuite } from '../../helpers/sdk-producers.js';

describe("Producer send with metadata: 'runs' against a broker", () => {
  const suite = useProducerSuite();
  const { producers, readAll } = suite;
  const producer = (opts: Partial<ProducerOptions> = {}): Producer => producers.make(opts);

  it("each run's offsets hold exactly its messages, and the runs cover every message once, in order", async () => {
    const t = 'p-runs';
    await suite.admin.command('CREATE', { topic: t, partitions: 3 });
    // Small batches: sends split over several; two producers, so batches of one send have others' between them.
    const a = producer({ maxBatchRecords: 4, keylessPartitioning: 'round-robin' });
    const b = producer({ maxBatchRecords: 3 });
    const messagesOf = (name: string, n: number): ProducerMessage[] =>
      Array.from({ length: n }, (_, i) => {
        const value = `${name}-${i}`;
        if (i % 5 === 0) return { value, key: `k${i % 7}` };
        if (i % 5 === 1) return { value };
        return { value, partition: Math.floor(i / 3) % 3 };
      });
    const sends = ['a0', 'b0', 'a1', 'b1', 'a2'].map((name) => ({ name, messages: messagesOf(name, 40) }));
    const results: SendRun[][] = await Promise.all(sends.map((s) => (s.name.startsWith('a') ? a : b).send({ topic: t, messages: s.messages }, { metadata: 'runs' })));
    const logs = await Promise.all([0, 1, 2].map((p) => readAll(t, p)));
    let runCount = 0;
    sends.forEach((s, k) => {
      const runs = results[k]!;
      let next = 0;
      for (const r of runs) {
        expect(r.topic).toBe(t);
        expect(r.first).toBe(next);
        expect(r.count).toBeGreaterThan(0);
        next += r.count;
        const stored = logs[r.partition]!.slice(r.baseOffset, r.baseOffset + r.count).map((x) => x.value.toString());
        expect(stored).toEqual(s.messages.slice(r.first, r.first + r.count).map((m) => m.value));
      }
      expect(next).toBe(s.messages.length);
      runCount += runs.length;
    });
    // Fewer objects than messages is the point of runs.
    expect(runCount).toBeLessThan(sends.length * 40);
    expect(logs.reduce((n, l) => n + l.length, 0)).toBe(sends.length * 40);
  });

  it('acks 0: runs cover the messages, without offsets', async () => {
    const t = 'p-runs-acks0';
    await suite.admin.command('CREATE', { topic: t, partitions: 2 });
    const runs = await producer({ acks: 0 }).send({ topic: t, messages: [{ value: 'x', partition: 1 }, { value: 'y', partition: 1 }, { value: 'z', partition: 0 }] }, { metadata: 'runs' });
    expect(runs).toEqual([
      { topic: t, partition: 1, first: 0, count: 2, baseOffset: -1 },
      { topic: t, partition: 0, first: 2, count: 1, baseOffset: -1 },
    ]);
  });
});
