/**
 * `tributary partitions reassign` checks its arguments before connecting, like the other commands: a
 * usage error (bad flag value, unreadable plan file, malformed JSON, a plan entry it cannot send, options
 * that do not go together, an unknown option) exits 2 with its message, never a connection error. The
 * bootstrap address has nothing listening: before, most of these cases reached the connect and failed it
 * (exit 1, "connection refused").
 */
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { envWithoutTributary, runCli } from '../helpers/cli.js';
import { removeDir, tempDir } from '../helpers/util.js';

const NOWHERE = ['--bootstrap', '127.0.0.1:1'];
const reassign = (...args: string[]) => runCli(['partitions', 'reassign', ...args, ...NOWHERE], { env: envWithoutTributary() });

describe('partitions reassign usage errors', () => {
  let dir: string;
  const file = (name: string) => path.join(dir, name);

  beforeAll(async () => {
    dir = await tempDir('trib-reassign-usage-');
    await writeFile(file('ok.json'), JSON.stringify({ partitions: [{ topic: 't', partition: 0, replicas: [1, 2] }] }));
    await writeFile(file('broken.json'), '{"partitions": [');
    await writeFile(file('extra.json'), JSON.stringify({ partitions: [{ topic: 't', partition: 0, replicas: [1, 2], leader: 1 }] }));
    await writeFile(
      file('twice.json'),
      JSON.stringify({
        partitions: [
          { topic: 't', partition: 0, replicas: [1, 2] },
          { topic: 'u', partition: 0, replicas: [1, 2] },
          { topic: 't', partition: 0, replicas: [2, 3] },
        ],
      }),
    );
    await writeFile(file('badname.json'), JSON.stringify({ partitions: [{ topic: 'a:b', partition: 0, replicas: [1, 2] }] }));
  });

  afterAll(async () => {
    await removeDir(dir);
  });

  it('exit 2 with the usage message, before any connection attempt', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['--plan', '/nonexistent/plan.json'], /^error: cannot read plan \/nonexistent\/plan\.json: ENOENT/],
      [['--plan', 'BROKEN'], /^error: plan .*broken\.json is not JSON/],
      [['--plan', 'EXTRA'], /^error: plan .*extra\.json: entry 0 has unknown field\(s\) leader/],
      [['--plan', 'TWICE'], /^error: plan .*twice\.json: entry 2 repeats t\[0\] \(entry 0\)/],
      [['--plan', 'BADNAME'], /^error: plan .*badname\.json: entry 0 needs "topic" \(a topic name\)/],
      [['--plan', 'OK', '--topic', 't'], /^error: --plan takes no --topic, --partition or --replicas/],
      [['--topic', 't', '--partition', '0', '--replicas', '1,x'], /^error: --replicas must be broker ids/],
      [['--replicas', '1,2'], /^error: --replicas needs --topic and --partition/],
      [['--topic', 'a:b', '--partition', '0', '--replicas', '1,2'], /^error: --topic must be a topic name/],
      [['--cancel', '--partition', '0'], /^error: --partition needs --topic/],
      [['--throttle', '5', '--partition', '0'], /^error: --partition needs --topic/],
      [['--cancel', '--throttle', '5'], /^error: --throttle cannot be combined with --cancel/],
      [['--status', '--cancel'], /^error: give one of --plan/],
      [['--status', '--partition', '3'], /^error: --partition narrows/],
      [['--topic', 't', '--partition', 'abc', '--replicas', '1,2'], /^error: option '--partition <n>' argument 'abc' is invalid/],
      [['--throttle', '-1'], /^error: option '--throttle <bytes\/s>' argument '-1' is invalid/],
      [['--format', 'yaml'], /^error: option '--format <format>' argument 'yaml' is invalid/],
      [['--bogus'], /^error: unknown option '--bogus'/],
    ];
    const named: Record<string, string> = { BROKEN: file('broken.json'), EXTRA: file('extra.json'), TWICE: file('twice.json'), BADNAME: file('badname.json'), OK: file('ok.json') };
    for (const [args, message] of cases) {
      const r = await reassign(...args.map((a) => named[a] ?? a));
      const what = args.join(' ');
      expect(r.stderr, what).toMatch(message);
      expect(r.stderr, what).not.toMatch(/connection refused|cannot reach|no broker/);
      expect([r.code, r.stdout], what).toEqual([2, '']);
    }
  }, 60_000);

  it('a good plan gets as far as the connection (exit 1)', async () => {
    const r = await reassign('--plan', file('ok.json'));
    expect(r).toEqual({ code: 1, stdout: '', stderr: 'error: connection refused by 127.0.0.1:1: is a broker running there? (start one with `npm start`)\n' });
  });
});
