import { execSync } from 'node:child_process';
import { createRegistry, describeSurvivors, reapSurvivors } from './process-registry.js';

/**
 * Integration tests run the compiled broker; compile once unless the test script already did. The
 * teardown fails the run if a process the tests started outlived them.
 */
export default function setup(): () => Promise<void> {
  if (process.env.TRIBUTARY_SKIP_BUILD !== '1') execSync('npx tsc -b', { stdio: 'inherit' });
  const registry = createRegistry();
  return async () => {
    const left = await reapSurvivors(registry);
    if (left.length === 0) return;
    // vitest only logs a teardown error: the exit code is ours to set.
    process.exitCode = 1;
    throw new Error(describeSurvivors(left));
  };
}
