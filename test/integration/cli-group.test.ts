/**
 * `tributary group list | describe | reset-offsets | delete` end to end: the compiled CLI as a child
 * process against a real broker, with a group made by JOIN_GROUP / SYNC_GROUP / COMMIT_OFFSET over a raw
 * connection. Checks stdout, stderr and exit codes (0 ok, 1 broker/runtime failure, 2 usage).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { type CliResult, runCli } from '../helpers/cli.js';

const cli = (args: string[], env: Record<string, string> = {}): Promise<CliResult> => runCli(args, { env: { ...process.env, TRIBUTARY_BOOTSTRAP: '', ...env } });

describe('tributary group', () => {
  let broker: BrokerProcess;
  let raw: Connection;
  let member = '';
  let generation = 0;
  const TOPIC = 'orders';
  const GROUP = 'billing';

  const run = (...args: string[]) => cli([...args, '--bootstrap', broker.address]);

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '4', '--group-join-window-ms', '20'] });
    raw = await broker.connect();
    await raw.command('CREATE', { topic: TOPIC, partitions: 3 });
    for (let p = 0; p < 3; p++) for (let i = 0; i < 4; i++) await raw.command('PUBLISH', { topic: TOPIC, partition: p, message: `p${p}-${i}` });
    // The member sends no heartbeat: a session of the broker's maximum outlasts the tests that need it
    // (the default 10 s expired it on a loaded machine, and the group with it).
    const join = await raw.command('JOIN_GROUP', { topic: TOPIC, group: GROUP, member: 'worker', session_timeout_ms: 300_000 });
    member = /member=(\S+)/.exec(join)![1]!;
    generation = Number(/generation=(\d+)/.exec(join)![1]);
    await raw.command('SYNC_GROUP', { topic: TOPIC, group: GROUP, member, generation });
    await raw.command('COMMIT_OFFSET', { topic: TOPIC, group: GROUP, partition: 0, offset: 3, member, generation });
    await raw.command('COMMIT_OFFSET', { topic: TOPIC, group: GROUP, partition: 2, offset: 4, member, generation });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('group list prints one group per line; --json an array', async () => {
    const r = await run('group', 'list');
    expect(r).toEqual({ code: 0, stdout: `${GROUP}\n`, stderr: '' });
    const j = await run('group', 'list', '--json');
    expect(j.code).toBe(0);
    expect(JSON.parse(j.stdout)).toEqual([GROUP]);
  });

  it('group describe prints state, members with assignments, offsets with lag and the generations', async () => {
    const r = await run('group', 'describe', GROUP);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const lines = r.stdout.split('\n');
    expect(lines).toContain(`group:       ${GROUP}`);
    expect(lines).toContain(`topic:       ${TOPIC}`);
    expect(lines).toContain('state:       Stable');
    expect(lines).toContain(`generation:  ${generation}`);
    expect(lines).toContain(`leader:      ${member}`);
    expect(lines).toContain('members (1):');
    const header = lines.find((l) => l.trim().startsWith('MEMBER'))!;
    expect(header.trim().split(/\s{2,}/)).toEqual(['MEMBER', 'CLIENT', 'INSTANCE', 'HOST', 'GEN', 'ASSIGNED', 'PENDING', 'HEARTBEAT', 'REJOIN']);
    const row = lines.find((l) => l.trim().startsWith(member))!;
    expect(row.trim().split(/\s{2,}/)).toEqual([member, 'worker', '-', expect.stringMatching(/^127\.0\.0\.1:\d+$/), String(generation), '0,1,2', '-', expect.stringMatching(/^\d+ ms ago$/), 'no']);
    expect(lines).toContain('offsets (total lag 1):');
    const offsetRows = lines.filter((l) => /^\s+\d+\s{2,}/.test(l) && !l.includes('ms ago') && lines.indexOf(l) > lines.indexOf('offsets (total lag 1):'));
    expect(offsetRows.slice(0, 3).map((l) => l.trim().split(/\s{2,}/))).toEqual([
      ['0', '3', '4', '1', member],
      ['1', '-', '4', '-', member],
      ['2', '4', '4', '0', member],
    ]);
    const genIdx = lines.findIndex((l) => l.startsWith('generations (last'));
    expect(genIdx).toBeGreaterThan(0);
    expect(lines[genIdx + 1]!.trim().split(/\s{2,}/)).toEqual(['GEN', 'AT', 'REBALANCE', 'CAUSES']);
    expect(lines[genIdx + 2]).toContain(`join ${member}`);
  });

  it('group describe --json prints the GROUP_STATUS JSON', async () => {
    const r = await run('group', 'describe', GROUP, '--json');
    expect(r.code).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j).toMatchObject({ group: GROUP, topic: TOPIC, state: 'Stable', generation, total_lag: 1 });
    expect(j.members[0]).toMatchObject({ member_id: member, assignments: [0, 1, 2] });
  });

  it('reset-offsets --dry-run on a group with members changes nothing; delete refuses it (exit 1, the broker error)', async () => {
    const r = await run('group', 'reset-offsets', GROUP, '--topic', TOPIC, '--to-earliest', '--dry-run');
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout.split('\n')[0]).toBe(`would reset 3 partitions of ${TOPIC} for group ${GROUP} (dry run: nothing changed)`);
    const j = JSON.parse((await run('group', 'describe', GROUP, '--json')).stdout);
    expect(j.total_lag).toBe(1);
    const d = await run('group', 'delete', GROUP);
    expect(d).toEqual({ code: 1, stdout: '', stderr: `error: group_not_empty group=${GROUP} members=1\n` });
  });

  it('reset-offsets moves the offsets of an empty group: earliest, latest, offset, timestamp', async () => {
    await raw.command('LEAVE_GROUP', { topic: TOPIC, group: GROUP, member });

    const e = await run('group', 'reset-offsets', GROUP, '--topic', TOPIC, '--to-earliest');
    expect(e.stderr).toBe('');
    expect(e.code).toBe(0);
    expect(e.stdout).toBe(`reset 3 partitions of ${TOPIC} for group ${GROUP}\n  PARTITION  OFFSET\n  0          0\n  1          0\n  2          0\n`);

    const l = await run('group', 'reset-offsets', GROUP, '--topic', TOPIC, '--partition', '1', '--to-latest', '--json');
    expect(l.code).toBe(0);
    expect(JSON.parse(l.stdout)).toEqual({ group: GROUP, topic: TOPIC, dryRun: false, offsets: [{ partition: 1, offset: 4 }] });

    const o = await run('group', 'reset-offsets', GROUP, '--topic', TOPIC, '--partition', '2', '--to-offset', '2');
    expect(o.code).toBe(0);
    expect(o.stdout).toBe(`reset 1 partition of ${TOPIC} for group ${GROUP}\n  PARTITION  OFFSET\n  2          2\n`);

    // every record is older than now: a timestamp in the future resets to the end
    const future = new Date(Date.now() + 3_600_000).toISOString();
    const t = await run('group', 'reset-offsets', GROUP, '--topic', TOPIC, '--partition', '0', '--to-timestamp', future, '--json');
    expect(t.code).toBe(0);
    expect(JSON.parse(t.stdout).offsets).toEqual([{ partition: 0, offset: 4 }]);
    const ms = await run('group', 'reset-offsets', GROUP, '--topic', TOPIC, '--partition', '0', '--to-timestamp', '0', '--json');
    expect(JSON.parse(ms.stdout).offsets).toEqual([{ partition: 0, offset: 0 }]);

    const j = JSON.parse((await run('group', 'describe', GROUP, '--json')).stdout);
    expect(j.state).toBe('Empty');
    expect(j.offsets.map((x: { committed: number }) => x.committed)).toEqual([0, 4, 2]);

    const bad = await run('group', 'reset-offsets', GROUP, '--topic', TOPIC, '--partition', '0', '--to-offset', '99');
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^error: OFFSET_OUT_OF_RANGE .*requested=99/);
  });

  it('reset-offsets usage mistakes exit 2 before contacting the broker', async () => {
    const none = await run('group', 'reset-offsets', GROUP, '--topic', TOPIC);
    expect(none).toEqual({ code: 2, stdout: '', stderr: 'error: give exactly one of --to-earliest, --to-latest, --to-offset, --to-timestamp\n' });
    const two = await run('group', 'reset-offsets', GROUP, '--topic', TOPIC, '--to-earliest', '--to-offset', '1');
    expect(two.code).toBe(2);
    const noTopic = await run('group', 'reset-offsets', GROUP, '--to-earliest');
    expect(noTopic.code).toBe(2);
    expect(noTopic.stderr).toContain("required option '--topic <topic>' not specified");
    const badTs = await run('group', 'reset-offsets', GROUP, '--topic', TOPIC, '--to-timestamp', 'yesterday');
    expect(badTs.code).toBe(2);
    expect(badTs.stderr).toContain('must be milliseconds since the epoch or an ISO 8601 date');
    const badOffset = await run('group', 'reset-offsets', GROUP, '--topic', TOPIC, '--to-offset', '1e3');
    expect(badOffset.code).toBe(2);
    const badBootstrap = await cli(['group', 'list', '--bootstrap', 'nohost']);
    expect(badBootstrap).toEqual({ code: 2, stdout: '', stderr: 'error: --bootstrap must be host:port[,host:port...], got "nohost"\n' });
  });

  it('unknown groups and topics are broker errors (exit 1)', async () => {
    expect(await run('group', 'describe', 'nobody')).toEqual({ code: 1, stdout: '', stderr: 'error: group_not_found group=nobody\n' });
    expect(await run('group', 'delete', 'nobody')).toEqual({ code: 1, stdout: '', stderr: 'error: group_not_found group=nobody\n' });
    const r = await run('group', 'reset-offsets', GROUP, '--topic', 'no-such-topic', '--to-earliest');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error: topic_not_found /);
  });

  it('group delete removes an empty group', async () => {
    expect(await run('group', 'delete', 'nobody', '--json')).toEqual({ code: 1, stdout: '', stderr: 'error: group_not_found group=nobody\n' });
    const d = await run('group', 'delete', GROUP, '--json');
    expect(d).toEqual({ code: 0, stdout: `${JSON.stringify({ group: GROUP, deleted: true })}\n`, stderr: '' });
    expect(await run('group', 'list')).toEqual({ code: 0, stdout: 'no consumer groups\n', stderr: '' });
    expect((await run('group', 'list', '--json')).stdout).toBe('[]\n');
    expect((await run('group', 'list', '--format', 'json')).stdout).toBe('[]\n');
  });

  it('takes the broker from TRIBUTARY_BOOTSTRAP; an unreachable broker exits 1 saying the connection was refused', async () => {
    const env = await cli(['group', 'list', '--json'], { TRIBUTARY_BOOTSTRAP: broker.address });
    expect(env.code).toBe(0);
    const r = await cli(['group', 'list', '--bootstrap', '127.0.0.1:1']);
    expect(r).toEqual({ code: 1, stdout: '', stderr: 'error: connection refused by 127.0.0.1:1: is a broker running there? (start one with `npm start`)\n' });
  });
});
