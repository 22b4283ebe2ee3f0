/**
 * The SDK as a Node user gets it: `tributary-client` and `tributary-protocol` packed with `npm pack`,
 * installed into an empty app (offline: nothing may come from the registry), pull in nothing else, and
 * the installed SDK produces to and consumes from a real broker.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrokerProcess, ROOT } from '../helpers/launcher.js';
import { removeDir, tempDir } from '../helpers/util.js';

const npm = (args: string[], cwd: string) => execFileSync('npm', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, npm_config_audit: 'false', npm_config_fund: 'false' } });

describe('the client package installed from its tarball', () => {
  let app: string;
  let packs: string;
  let broker: BrokerProcess;

  beforeAll(async () => {
    packs = await tempDir('tributary-packs-');
    app = await tempDir('tributary-app-');
    broker = await BrokerProcess.start();
  });
  afterAll(async () => {
    await broker?.dispose();
    await removeDir(app);
    await removeDir(packs);
  });

  it('installs offline with only tributary-protocol beside it, and talks to a broker', async () => {
    const out = JSON.parse(npm(['pack', '--json', '--workspace', 'packages/protocol', '--workspace', 'packages/client', '--pack-destination', packs], ROOT)) as Array<{ filename: string; files: Array<{ path: string }> }>;
    const tarballs = out.map((p) => path.join(packs, p.filename));
    expect(tarballs.map((t) => path.basename(t)).sort()).toEqual(['tributary-client-0.1.0.tgz', 'tributary-protocol-0.1.0.tgz']);
    // Only the compiled sources, their types, the manifest, the license (and a README if any): no
    // source maps without their sources, no build info, no tests or benchmarks.
    for (const pack of out) {
      const files = pack.files.map((f) => f.path);
      expect(files, pack.filename).toContain('LICENSE');
      expect(files, pack.filename).toContain('dist/index.js');
      expect(files, pack.filename).toContain('dist/index.d.ts');
      expect(files.filter((f) => !/^(dist\/.*\.(js|d\.ts)|LICENSE|package\.json|README\.md)$/.test(f)), pack.filename).toEqual([]);
    }

    writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true, type: 'module' }));
    npm(['install', '--offline', '--no-package-lock', ...tarballs], app);
    const installed = npm(['ls', '--all', '--parseable'], app)
      .trim()
      .split('\n')
      .slice(1) // the app itself
      .map((p) => path.relative(path.join(app, 'node_modules'), p))
      .sort();
    expect(installed).toEqual(['tributary-client', 'tributary-protocol']);

    writeFileSync(
      path.join(app, 'main.mjs'),
      `import { Admin, Producer, Consumer } from 'tributary-client';
const brokers = [process.argv[2]];
const admin = new Admin({ brokers });
await admin.createTopic({ topic: 'packed', partitions: 1 });
await admin.close();
const producer = new Producer({ brokers });
const [sent] = await producer.send({ topic: 'packed', messages: [{ value: 'from the tarball' }] });
await producer.close();
const consumer = new Consumer({ brokers, groupId: 'packed-app', topic: 'packed', autoOffsetReset: 'earliest' });
for await (const m of consumer) {
  console.log(JSON.stringify({ offset: sent.offset, read: m.value.toString() }));
  break;
}
await consumer.close();
`,
    );
    const printed = execFileSync(process.execPath, ['main.mjs', broker.address], { cwd: app, encoding: 'utf8', timeout: 30_000 });
    expect(JSON.parse(printed.trim())).toEqual({ offset: 0, read: 'from the tarball' });
    // The manifest is importable (exports './package.json'), and subpath imports carry their types.
    writeFileSync(path.join(app, 'meta.mjs'), `import pkg from 'tributary-client/package.json' with { type: 'json' };\nconsole.log(pkg.name, pkg.license);\n`);
    expect(execFileSync(process.execPath, ['meta.mjs'], { cwd: app, encoding: 'utf8' }).trim()).toBe('tributary-client Apache-2.0');
    expect(existsSync(path.join(app, 'node_modules', 'tributary-client', 'dist', 'consumer.d.ts'))).toBe(true);
  }, 120_000);
});
