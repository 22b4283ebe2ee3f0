/**
 * A broker creates its data directory and every file in it without group or other access, whatever the
 * umask it was started with (docs/security.md "Secrets", Files): the segments hold records of ACL-protected topics.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Connection } from 'tributary-protocol/connection.js';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BrokerProcess } from '../../helpers/launcher.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
let broker: BrokerProcess | undefined;
beforeAll(async () => {
  dir = await tempDir('tributary-data-mode-');
});
afterAll(async () => {
  await broker?.dispose();
  if (dir) await removeDir(dir);
});

function walk(p: string, out: Array<{ path: string; mode: number }>): typeof out {
  const st = fs.lstatSync(p);
  out.push({ path: p, mode: st.mode & 0o777 });
  if (st.isDirectory()) for (const e of fs.readdirSync(p)) walk(path.join(p, e), out);
  return out;
}

it('data directories and files have no group/other bits under umask 022', { timeout: 60_000 }, async () => {
  const dataDir = path.join(dir, 'data', 'broker');
  const old = process.umask(0o022); // the broker inherits it
  try {
    broker = await BrokerProcess.start({ dataDir, args: ['--offsets-topic-partitions', '1'] });
  } finally {
    process.umask(old);
  }
  const c = await Connection.connect({ host: '127.0.0.1', port: broker.port });
  await c.command('CREATE', { topic: 'secret', partitions: 2 });
  await c.command('PUBLISH', { topic: 'secret', partition: 0, message: 'private' });
  await c.close();
  await broker.stop();
  const entries = walk(path.join(dir, 'data'), []);
  expect(entries.length).toBeGreaterThan(3);
  // The parent `data` was created by the broker too (mkdir -p): it is 0700 as well.
  expect(entries.filter((e) => (e.mode & 0o077) !== 0)).toEqual([]);
});
