// The full test suite, runnable on a fresh machine: installs what the tests need, builds, runs every
// tier (unit, integration against real broker processes, fault), and prints one summary line.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { ensureBuilt, ensureDependencies } from './ensure-built.mjs';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
process.chdir(root);

/** Directories a Debian package may put its binaries in besides PATH (PostgreSQL's are versioned). */
function postgresBinDirs() {
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return [];
  return readdirSync(base).map((v) => path.join(base, v, 'bin'));
}

function findBinary(binary, dirs = []) {
  const pathDirs = (process.env.PATH ?? '').split(path.delimiter).filter(Boolean);
  return [...pathDirs, ...dirs].some((d) => existsSync(path.join(d, binary)));
}

let aptUpdated = false;
/**
 * Installs the Debian packages whose binary is missing: `[{ binary, package, dirs? }]`, where `dirs` are
 * extra directories to look in besides PATH. Only as root on a machine with apt-get; otherwise it warns
 * and the tests that need the binary fail with their own error.
 */
function ensureDebianPackages(wanted) {
  const missing = wanted.filter((w) => !findBinary(w.binary, w.dirs));
  if (missing.length === 0) return;
  const names = missing.map((w) => w.package);
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  if (!isRoot || !findBinary('apt-get')) {
    console.error(`warning: missing ${missing.map((w) => w.binary).join(', ')}; install the Debian package(s) ${names.join(' ')} (needs root and apt-get)`);
    return;
  }
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const apt = (args) => {
    const r = spawnSync('apt-get', args, { stdio: ['ignore', 'inherit', 'inherit'], env });
    if (r.status !== 0) throw new Error(`apt-get ${args.join(' ')} failed (exit ${r.status ?? r.signal})`);
  };
  if (!aptUpdated) {
    console.error('updating the apt package index...');
    apt(['update']);
    aptUpdated = true;
  }
  console.error(`installing ${names.join(' ')}...`);
  apt(['install', '-y', '--no-install-recommends', ...names]);
}

ensureDebianPackages([
  { binary: 'initdb', package: 'postgresql', dirs: postgresBinDirs() },
  { binary: 'etcd', package: 'etcd-server' },
  // The web console's browser tests (test/integration/console.test.ts).
  { binary: 'chromium', package: 'chromium' },
  // librdkafka's command-line client, against the Kafka codecs (test/unit/kafka/librdkafka-capture.test.ts).
  { binary: 'kcat', package: 'kcat' },
]);
ensureDependencies();
ensureBuilt({ force: true });

// The chaos suite (test/chaos, a short run) keeps both cores busy with its own cluster: it runs after
// the other tiers, alone. `npm test -- <tiers>` runs just those.
const argTiers = process.argv.slice(2);
const runs = argTiers.length > 0 ? [argTiers] : [['test/unit', 'test/integration', 'test/fault'], ['test/chaos']];
mkdirSync('.test-results', { recursive: true });

let passed = 0;
let failed = 0;
let skipped = 0;
let ok = true;
const failures = [];
runs.forEach((tiers, i) => {
  const report = path.join('.test-results', `vitest-${i}.json`);
  const suiteErrorsFile = path.join('.test-results', `suite-errors-${i}.json`);
  // A run that dies before writing its reports must not be read as the previous run's results.
  rmSync(report, { force: true });
  rmSync(suiteErrorsFile, { force: true });
  const res = spawnSync(
    'npx',
    ['vitest', 'run', ...tiers, '--reporter=default', '--reporter=json', `--outputFile.json=${report}`, '--reporter=./scripts/suite-errors-reporter.mjs'],
    { stdio: 'inherit', env: { ...process.env, TRIBUTARY_SKIP_BUILD: '1', TRIBUTARY_SUITE_ERRORS: suiteErrorsFile } },
  );
  const suiteErrors = existsSync(suiteErrorsFile) ? JSON.parse(readFileSync(suiteErrorsFile, 'utf8')) : { files: {}, unhandled: [] };
  for (const e of suiteErrors.unhandled) failures.push({ name: 'unhandled error', message: e });
  if (res.status !== 0) ok = false;
  if (existsSync(report)) {
    const r = JSON.parse(readFileSync(report, 'utf8'));
    passed += r.numPassedTests;
    failed += r.numFailedTests;
    skipped += r.numPendingTests + (r.numTodoTests ?? 0);
    for (const file of r.testResults ?? []) {
      const rel = path.relative(root, file.name);
      for (const t of file.assertionResults ?? []) {
        if (t.status === 'failed') failures.push({ name: `${rel} > ${t.fullName}`, message: (t.failureMessages ?? []).join('\n') });
      }
      // A file that failed to load or crashed has no failed test of its own: report the file.
      if (file.status === 'failed' && !(file.assertionResults ?? []).some((t) => t.status === 'failed')) {
        failures.push({ name: rel, message: [file.message ?? '', ...(suiteErrors.files[file.name] ?? [])].join('\n') });
      }
    }
  } else {
    ok = false;
  }
});
// The failures again, last, so that a log cut to its tail still names them.
for (const f of failures) {
  console.log(`FAILED ${f.name}`);
  const lines = f.message.split('\n').filter((l) => l.trim() !== '').slice(0, 20);
  for (const l of lines) console.log(`    ${l.slice(0, 300)}`);
}
console.log(`tests: ${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(ok && failed === 0 && passed > 0 ? 0 : 1);
