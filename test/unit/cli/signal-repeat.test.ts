import { expect, it } from 'vitest';
import { REPEAT_GRACE_MS, signalAction } from 'tributary-broker/cli/signal-repeat.js';

// GNU `timeout` signals the broker and its process group: one request arriving twice (docs/operations.md, "Shutdown").
it('a repeat of the first signal within the grace period is ignored; a later one or another signal exits', () => {
  expect(signalAction(undefined, 'SIGTERM', 5)).toBe('stop');
  const first = { signal: 'SIGTERM' as const, at: 1000 };
  expect(signalAction(first, 'SIGTERM', 1000)).toBe('ignore');
  expect(signalAction(first, 'SIGTERM', 1000 + REPEAT_GRACE_MS - 1)).toBe('ignore');
  expect(signalAction(first, 'SIGTERM', 1000 + REPEAT_GRACE_MS)).toBe('exit');
  expect(signalAction(first, 'SIGINT', 1001)).toBe('exit');
});
