/**
 * The README's "Using it" walkthrough, run as written: the broker line with the README's flags (on
 * free ports and a fresh data directory instead of 9000 and ./data), then every `npx tributary` line in
 * order through the built CLI, against that broker (TRIBUTARY_BOOTSTRAP). Each must exit 0, and what
 * they leave behind must be what the README says.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Admin } from 'tributary-client/admin.js';
import { BrokerProcess, CLI, ROOT } from '../helpers/launcher.js';
import { trackChild } from '../helpers/process-registry.js';
import { removeDir, tempDir } from '../helpers/util.js';

/** The lines of the first ```sh block after "## Using it", without comments and continuation-less blanks. */
function walkthrough(): string[] {
  const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Using it'));
  const block = /```sh\n([\s\S]*?)```/.exec(section)![1]!;
  return block
    .split('\n')
    .map((l) => l.replace(/\s+#.*$/, '').trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
}

function sh(command: string, cwd: string, env: NodeJS.ProcessEnv): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = trackChild(execFile('sh', ['-c', command], { cwd, env, timeout: 60_000, maxBuffer: 16 * 1024 * 1024 }), 'cli');
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d) => (stdout += d));
  child.stderr!.on('data', (d) => (stderr += d));
  return new Promise((resolve) => child.once('exit', (code) => resolve({ code: code ?? -1, stdout, stderr })));
}

describe('README walkthrough', () => {
  let broker: BrokerProcess | undefined;
  let dir: string | undefined;

  afterAll(async () => {
    await broker?.dispose();
    if (dir) await removeDir(dir);
  });

  it('runs every command of "Using it" in order, and ends with the group caught up', async () => {
    const lines = walkthrough();
    const start = lines[0]!;
    expect(start).toMatch(/^npm start -- /);
    // The README's own flags, with the port left to the launcher and a fresh data directory.
    const flags = start
      .replace(/^npm start -- /, '')
      .replace(/--port \d+/, '')
      .replace(/--data-dir \S+/, '')
      .split(/\s+/)
      .filter(Boolean);
    dir = await tempDir('tributary-readme-');
    broker = await BrokerProcess.start({ args: flags });
    const env = { ...process.env, TRIBUTARY_BOOTSTRAP: broker.address };
    const commands = lines.slice(1);
    expect(commands.length).toBeGreaterThanOrEqual(5);
    const outputs: string[] = [];
    for (const line of commands) {
      expect(line, 'every command is copy-pasteable from a clone').toMatch(/(^|\| )npx tributary /);
      const r = await sh(line.replaceAll('npx tributary', `"${process.execPath}" "${CLI}"`), dir, env);
      expect({ line, code: r.code, stderr: r.stderr }).toEqual({ line, code: 0, stderr: '' });
      outputs.push(r.stdout);
    }
    // The first look printed JSON records; the group member printed the 1000 values.
    const look = outputs[commands.findIndex((l) => l.includes('--format json --max'))]!.trim().split('\n');
    expect(look.map((l) => Object.keys(JSON.parse(l)))).toEqual(Array(look.length).fill(['topic', 'partition', 'offset', 'timestamp', 'key', 'value', 'headers']));
    const member = outputs[commands.findIndex((l) => l.includes('--group billing'))]!.trim().split('\n');
    expect(member.map(Number).sort((a, b) => a - b)).toEqual(Array.from({ length: 1000 }, (_, i) => i + 1));
    const described = outputs[commands.findIndex((l) => l.includes('group describe billing'))]!;
    expect(described).toMatch(/offsets \(total lag 0\)/);
    // The member committed what it printed and left.
    const admin = new Admin({ brokers: [broker.address] });
    try {
      const g = await admin.describeGroup('billing');
      expect(g.members).toEqual([]);
      let committed = 0;
      for (let p = 0; p < 12; p++) {
        const o = await admin.fetchOffset('billing', 'orders', p);
        if (o.committed) committed += o.offset;
      }
      expect(committed).toBe(1000);
    } finally {
      await admin.close();
    }
  }, 120_000);
});
