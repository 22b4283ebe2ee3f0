import { execSync } from 'node:child_process';

/** Integration tests run the compiled broker; compile once unless the test script already did. */
export default function setup(): void {
  if (process.env.TRIBUTARY_SKIP_BUILD === '1') return;
  execSync('npx tsc -p tsconfig.json', { stdio: 'inherit' });
}
