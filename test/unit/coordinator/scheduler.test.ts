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

it('keeps cancelled far deadlines from piling up: the heap stays within twice the live entries (plus a margin), and live ones still fire', async () => {
  const fake = new FakeClock();
  const scheduler = new Scheduler(fake);
  let fired = 0;
  scheduler.schedule('kept', fake.monotonic() + 7 * DAY, () => fired++);
  // A group that empties and comes back 20,000 times within the retention.
  for (let i = 0; i < 20_000; i++) {
    scheduler.schedule('expire:g', fake.monotonic() + 7 * DAY, () => fired++);
    scheduler.cancel('expire:g');
  }
  const heap = (scheduler as unknown as { heap: unknown[] }).heap;
  expect(heap.length).toBeLessThanOrEqual(2 * scheduler.size + 1025);
  await fake.advance(7 * DAY);
  expect(fired).toBe(1);
});
