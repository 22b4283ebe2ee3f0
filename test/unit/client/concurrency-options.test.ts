/**
 * run()'s `concurrency` option (docs/sdk.md, "Concurrency") and run()'s own option names: bad values
 * reject run() with invalid_config before anything connects, and leave the consumer as it was (it can
 * still be consumed). The brokers listed are never contacted.
 */
import { describe, expect, it } from 'vitest';
import { resolveConcurrency } from 'tributary-client/concurrency-options.js';
import { Consumer } from 'tributary-client/consumer.js';
import { rejection, thrown } from '../../helpers/util.js';

const consumer = () => new Consumer({ brokers: ['127.0.0.1:1'], groupId: 'g', topic: 't' });
const eachMessage = async () => {};

describe('run() concurrency options', () => {
  it('defaults: key ordering, maxBuffered 10 × perPartition; absent stays absent', () => {
    expect(resolveConcurrency(undefined, false)).toBeUndefined();
    expect(resolveConcurrency({ perPartition: 8 }, false)).toEqual({ perPartition: 8, ordering: 'key', maxBuffered: 80 });
    expect(resolveConcurrency({ perPartition: 1, ordering: 'partition', maxBuffered: 5 }, false)).toEqual({ perPartition: 1, ordering: 'partition', maxBuffered: 5 });
    expect(resolveConcurrency({ perPartition: 3, ordering: 'none' }, false)).toEqual({ perPartition: 3, ordering: 'none', maxBuffered: 30 });
  });

  it('refuses unknown names (with the nearest one), out-of-range values and combinations it does not define', () => {
    const cases: Array<[unknown, boolean, string, RegExp]> = [
      [{ perPartiton: 4 }, false, 'concurrency.perPartiton', /did you mean concurrency\.perPartition\?/],
      [{ perPartition: 4, orderng: 'key' }, false, 'concurrency.orderng', /did you mean concurrency\.ordering\?/],
      [{}, false, 'concurrency.perPartition', /required/],
      [{ perPartition: 0 }, false, 'concurrency.perPartition', /from 1 to 10000/],
      [{ perPartition: 2.5 }, false, 'concurrency.perPartition', /integer/],
      [{ perPartition: '4' }, false, 'concurrency.perPartition', /integer/],
      [{ perPartition: 4, ordering: 'keys' }, false, 'concurrency.ordering', /key, partition or none/],
      [{ perPartition: 4, ordering: 'partition' }, false, 'concurrency.perPartition', /must be 1 with ordering 'partition'/],
      [{ perPartition: 4, maxBuffered: 3 }, false, 'concurrency.maxBuffered', /at least perPartition \(4\)/],
      [{ perPartition: 4, maxBuffered: 0 }, false, 'concurrency.maxBuffered', /from 1/],
      [{ perPartition: 4 }, true, 'concurrency', /eachMessage only/],
      [7, false, 'concurrency', /expected an object/],
    ];
    for (const [c, batch, option, message] of cases) {
      const e = thrown(() => resolveConcurrency(c as never, batch));
      expect(e.code, JSON.stringify(c)).toBe('invalid_config');
      expect(e.fields.option, JSON.stringify(c)).toBe(option);
      expect(e.message).toMatch(message);
    }
  });

  it('run() rejects bad options before starting, and the consumer can still be consumed', async () => {
    const c = consumer();
    expect((await rejection(c.run({ eachMessage, concurrency: { perPartition: 4, ordering: 'partition' } }))).fields).toMatchObject({ option: 'concurrency.perPartition' });
    expect((await rejection(c.run({ eachBatch: async () => {}, concurrency: { perPartition: 2 } }))).fields).toMatchObject({ option: 'concurrency' });
    // run()'s own names are checked too: a misspelt `concurrency` would otherwise run one at a time
    const typo = await rejection(c.run({ eachMessage, concurency: { perPartition: 4 } } as never));
    expect(typo.fields).toMatchObject({ option: 'concurency', reason: 'unknown option', did_you_mean: 'concurrency' });
    expect(c.state).toBe('new');
    expect(() => c[Symbol.asyncIterator]()).not.toThrow();
    await c.close();
  });
});
