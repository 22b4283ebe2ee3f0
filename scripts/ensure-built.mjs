// Installs dependencies and compiles when needed, so `npm start` works on a fresh clone.
import { execSync } from 'node:child_process';
import { existsSync, statSync, readdirSync } from 'node:fs';
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

export function ensureBuilt({ force = false } = {}) {
  const out = path.join(root, 'dist', 'src', 'cli', 'main.js');
  const sources = Math.max(newest(path.join(root, 'src')), newest(path.join(root, 'bench')), statSync(path.join(root, 'tsconfig.json')).mtimeMs);
  if (force || !existsSync(out) || statSync(out).mtimeMs < sources) {
    console.error('compiling TypeScript...');
    run('npx tsc -p tsconfig.json');
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  ensureDependencies();
  ensureBuilt();
}
