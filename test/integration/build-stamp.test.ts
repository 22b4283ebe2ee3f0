/**
 * `npm run build` leaves the stamp scripts/ensure-built.mjs checks, so the `npm start` after it starts
 * at once instead of compiling again. Run in a copy of the built tree (its own dist, the repository's
 * dependencies), so that the console files the build rewrites are not the ones other tests serve.
 */
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/launcher.js';
import { removeDir, tempDir } from '../helpers/util.js';

describe('npm run build', () => {
  let copy: string;

  beforeAll(async () => {
    copy = await tempDir('tributary-build-stamp-');
    for (const f of ['package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.base.json', 'scripts', 'bench', 'dist']) {
      cpSync(path.join(ROOT, f), path.join(copy, f), { recursive: true, preserveTimestamps: true });
    }
    for (const p of ['protocol', 'client', 'broker']) {
      cpSync(path.join(ROOT, 'packages', p), path.join(copy, 'packages', p), { recursive: true, preserveTimestamps: true, filter: (src) => path.basename(src) !== 'node_modules' });
    }
    // The dependencies of the repository, but the workspace packages of the copy.
    mkdirSync(path.join(copy, 'node_modules'));
    for (const e of readdirSync(path.join(ROOT, 'node_modules'))) {
      const own = /^tributary-(protocol|client|broker)$/.exec(e);
      symlinkSync(own ? path.join(copy, 'packages', own[1]!) : path.join(ROOT, 'node_modules', e), path.join(copy, 'node_modules', e));
    }
    rmSync(path.join(copy, 'dist', '.build-stamp'), { force: true });
  }, 60_000);

  afterAll(async () => {
    if (copy) await removeDir(copy);
  });

  it('writes the stamp ensure-built checks: the next npm start does not compile again', () => {
    execFileSync('npm', ['run', 'build'], { cwd: copy, stdio: 'pipe' });
    expect(existsSync(path.join(copy, 'dist', '.build-stamp'))).toBe(true);
    // What `npm start` runs first; it says on stderr when it compiles.
    const said = execFileSync('sh', ['-c', 'node scripts/ensure-built.mjs 2>&1'], { cwd: copy, encoding: 'utf8' });
    expect(said).toBe('');
  }, 120_000);
});
