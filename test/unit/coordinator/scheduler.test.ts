/**
 * The coordinator's scheduler arms one Node timer for its earliest deadline. Node fires a timer whose delay
 * exceeds 2^31-1 ms at once, so a deadline further away (an offsets retention of 30 days) must be reached
 * in capped steps, not by a timer that fires immediately and is armed again in a loop.
 */
import { expect, it } from 'vitest';
import { Scheduler } from 'tributary-broker/coordinator/scheduler.js';
import type { Clock } from 'tributary-broker/common/clock.js';
import { FakeClock } from '../../helpers/fake-clock.js';

const DAY = 86_400_000;

it('a deadline beyond the longest Node timer is reached in steps no Node timer overflows on', async () => {
  const fake = new FakeClock();
  const delays: number[] = [];
  const clock: Clock = {
    now: () => fake.now(),
    monotonic: () => fake.monotonic(),
    setTimeout: (fn, ms) => {
      delays.push(ms);
      return fake.setTimeout(fn, ms);
    },
    clearTimeout: (t) => fake.clearTimeout(t),
  };
  const scheduler = new Scheduler(clock);
  let fired = 0;
  scheduler.schedule('far', fake.monotonic() + 30 * DAY, () => fired++);
  await fake.advance(30 * DAY - 1);
  expect(fired).toBe(0);
  await fake.advance(1);
  expect(fired).toBe(1);
  expect(Math.max(...delays)).toBeLessThanOrEqual(0x7fffffff);
  scheduler.stop();
});
