// Installs dependencies and compiles when needed, so `npm start` works on a fresh clone.
import { execSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const run = (cmd) => execSync(cmd, { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });

function newest(dir) {
  let t = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    t = Math.max(t, e.isDirectory() ? newest(p) : statSync(p).mtimeMs);
  }
  return t;
}

export function ensureDependencies() {
  const marker = path.join(root, 'node_modules', '.package-lock.json');
  const lock = path.join(root, 'package-lock.json');
  if (!existsSync(marker) || (existsSync(lock) && statSync(lock).mtimeMs > statSync(marker).mtimeMs)) {
    console.error('installing npm dependencies...');
    run(existsSync(lock) ? 'npm ci --no-audit --no-fund' : 'npm install --no-audit --no-fund');
  }
}

// tsc -b rewrites only the outputs that change: a stamp, not main.js, says when the build last ran.
const stamp = path.join(root, 'dist', '.build-stamp');

/** Records that a whole build (tsc -b and the console) just ran: `npm run build` ends with it too. */
export function writeStamp() {
  mkdirSync(path.dirname(stamp), { recursive: true });
  writeFileSync(stamp, `${new Date().toISOString()}\n`);
}

export function ensureBuilt({ force = false } = {}) {
  const out = path.join(root, 'packages', 'broker', 'dist', 'cli', 'main.js');
  const sources = Math.max(
    ...['protocol', 'client', 'broker'].map((p) => Math.max(newest(path.join(root, 'packages', p, 'src')), statSync(path.join(root, 'packages', p, 'package.json')).mtimeMs)),
    newest(path.join(root, 'packages', 'broker', 'console')),
    newest(path.join(root, 'bench')),
    statSync(path.join(root, 'tsconfig.base.json')).mtimeMs,
  );
  if (force || !existsSync(out) || !existsSync(stamp) || statSync(stamp).mtimeMs < sources) {
    console.error('compiling TypeScript...');
    run('npx tsc -b');
    run('node scripts/build-console.mjs');
    writeStamp();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  // `--stamp`: the last step of `npm run build`, which has just compiled everything.
  if (process.argv.includes('--stamp')) writeStamp();
  else {
    ensureDependencies();
    ensureBuilt();
  }
}
