/**
 * `--offset-store memory` on a real broker process: commits work as with the other stores while the
 * process lives, a restart forgets them (documented as not durable, docs/architecture.md), and a
 * cluster broker refuses the setting at start.
 */
import { execFile } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { parseLine } from 'tributary-protocol/command.js';
import { BrokerProcess, CLI } from '../helpers/launcher.js';
import { trackChild } from '../helpers/process-registry.js';
import { removeDir, tempDir } from '../helpers/util.js';

const brokers: BrokerProcess[] = [];

afterEach(async () => {
  await Promise.all(brokers.splice(0).map((b) => b.dispose()));
});

async function fetchOffset(b: BrokerProcess, partition: number): Promise<Map<string, string>> {
  const c = await b.connect();
  return parseLine(await c.command('FETCH_OFFSET', { group: 'g', topic: 't', partition })).params;
}

describe('--offset-store memory', () => {
  it('keeps commits while the broker runs and forgets them on restart', async () => {
    const b = await BrokerProcess.start({ args: ['--offset-store', 'memory', '--offsets-topic-partitions', '2'] });
    brokers.push(b);
    const c = await b.connect();
    await c.command('CREATE', { topic: 't', partitions: 2 });
    await c.command('RESET_OFFSETS', { group: 'g', topic: 't', partition: 0, to: 'offset', offset: 0 });
    for (let i = 0; i < 5; i++) await c.command('PUBLISH', { topic: 't', partition: 0, message: `m${i}` });
    await c.command('RESET_OFFSETS', { group: 'g', topic: 't', partition: 0, to: 'offset', offset: 4 });
    expect(Object.fromEntries(await fetchOffset(b, 0))).toMatchObject({ offset: '4', committed: 'true' });
    const ready = await b.health('/ready');
    expect(ready.status).toBe(200);
    await b.restart();
    // the topic and its records survive (the log is durable); the commit does not
    expect(Object.fromEntries(await fetchOffset(b, 0))).toMatchObject({ committed: 'false' });
    const c2 = await b.connect();
    expect(parseLine(await c2.command('LIST_OFFSETS', { topic: 't', partition: 0 })).params.get('offsets')).toMatch(/latest=5/);
  });

  it('is refused by a cluster broker at start, before it contacts etcd', async () => {
    const dir = await tempDir('tributary-memory-');
    try {
      const child = trackChild(
        execFile(process.execPath, [CLI, 'broker', 'start', '--data-dir', dir, '--port', '0', '--health-port', '0', '--cluster', '--etcd', '127.0.0.1:1', '--broker-id', '0', '--offset-store', 'memory']),
        'broker',
      );
      let stderr = '';
      child.stderr!.on('data', (d) => (stderr += d));
      const code = await new Promise<number>((resolve) => child.once('exit', (c) => resolve(c ?? -1)));
      expect(code).not.toBe(0);
      expect(stderr).toMatch(/offsetStore memory is for a standalone broker/);
    } finally {
      await removeDir(dir);
    }
  });
});
