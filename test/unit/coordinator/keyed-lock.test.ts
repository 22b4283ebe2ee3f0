import { describe, expect, it } from 'vitest';
import { KeyedLock } from 'tributary-broker/common/keyed-lock.js';
import { sleep } from '../../helpers/util.js';

const tick = () => sleep(1);

describe('KeyedLock', () => {
  it('runs one holder per key at a time, in call order; other keys run alongside', async () => {
    const lock = new KeyedLock();
    const log: string[] = [];
    const job = (key: string, name: string) =>
      lock.run(key, async () => {
        log.push(`${name}+`);
        await tick();
        await tick();
        log.push(`${name}-`);
        return name;
      });
    const results = await Promise.all([job('a', 'a1'), job('a', 'a2'), job('b', 'b1'), job('a', 'a3')]);
    expect(results).toEqual(['a1', 'a2', 'b1', 'a3']);
    const a = log.filter((e) => e.startsWith('a'));
    expect(a).toEqual(['a1+', 'a1-', 'a2+', 'a2-', 'a3+', 'a3-']);
    // b1 started before a1 ended: keys do not wait for each other
    expect(log.indexOf('b1+')).toBeLessThan(log.indexOf('a1-'));
  });

  it('a holder that throws releases the lock; idle() waits for queued holders', async () => {
    const lock = new KeyedLock();
    await expect(lock.run('k', () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    let done = false;
    void lock.run('k', async () => {
      await tick();
      done = true;
    });
    await lock.idle();
    expect(done).toBe(true);
    expect(await lock.run('k', () => 7)).toBe(7);
  });
});
