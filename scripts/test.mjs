// The full test suite, runnable on a fresh machine: installs what the tests need, builds, runs every
// tier (unit, integration against real broker processes, fault), and prints one summary line.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { ensureBuilt, ensureDependencies } from './ensure-built.mjs';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
process.chdir(root);
ensureDependencies();
ensureBuilt({ force: true });

const tiers = process.argv.slice(2).length > 0 ? process.argv.slice(2) : ['test/unit', 'test/integration', 'test/fault'];
mkdirSync('.test-results', { recursive: true });
const report = path.join('.test-results', 'vitest.json');
const res = spawnSync(
  'npx',
  ['vitest', 'run', ...tiers, '--reporter=default', '--reporter=json', `--outputFile.json=${report}`],
  { stdio: 'inherit', env: { ...process.env, TRIBUTARY_SKIP_BUILD: '1' } },
);

let passed = 0;
let failed = 0;
let skipped = 0;
if (existsSync(report)) {
  const r = JSON.parse(readFileSync(report, 'utf8'));
  passed = r.numPassedTests;
  failed = r.numFailedTests;
  skipped = r.numPendingTests + (r.numTodoTests ?? 0);
}
console.log(`tests: ${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(res.status === 0 && failed === 0 && passed > 0 ? 0 : 1);
