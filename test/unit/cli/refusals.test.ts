/**
 * Bad input to the CLI changes nothing and is refused, not ignored (docs/operations.md, "CLI"): `user`
 * commands on a missing or malformed config file, an empty token, conflicting output options,
 * an empty `--data-dir`, config files too large, full of unknown keys or with a key twice, TRIBUTARY_TLS
 * values other than yes or no, reassign options and plan fields it would not use, and dev-cluster's
 * --principal and --token for brokers without authentication. In-process, no broker.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { cliInProcess as cli } from '../../helpers/cli-in-process.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
beforeEach(async () => {
  dir = await tempDir('trib-cli-refusals-');
});
afterEach(async () => {
  await removeDir(dir);
});

it('user list and user remove neither create a missing file nor rewrite one they do not change', async () => {
  const missing = path.join(dir, 'missing.yaml');
  expect((await cli('user', 'list', '--config', missing)).code).toBe(2);
  expect((await cli('user', 'remove', 'nobody', '--config', missing)).code).toBe(2);
  expect(fs.existsSync(missing)).toBe(false);
  const file = path.join(dir, 'broker.yaml');
  fs.writeFileSync(file, 'port:   9001\n', { mode: 0o644 });
  expect((await cli('user', 'remove', 'nobody', '--config', file)).code).toBe(1);
  expect((await cli('user', 'list', '--config', file)).code).toBe(0);
  expect(fs.readFileSync(file, 'utf8')).toBe('port:   9001\n');
  expect(fs.statSync(file).mode & 0o777).toBe(0o644);
});

it('user add refuses a file whose top level or users is not a mapping, and an empty token', async () => {
  for (const [name, text] of [
    ['arr.json', '[1,2]'],
    ['users.json', '{"users":[1]}'],
    ['list.yaml', '- 1\n'],
  ] as const) {
    const f = path.join(dir, name);
    fs.writeFileSync(f, text);
    const r = await cli('user', 'add', 'bob', '--permissions', 'admin', '--config', f);
    expect(r.code, name).toBe(1);
    expect(r.stderr, name).toMatch(/cannot update/);
    expect(fs.readFileSync(f, 'utf8')).toBe(text);
  }
  const f = path.join(dir, 'broker.yaml');
  expect((await cli('user', 'add', 'bob', '--permissions', 'admin', '--token', '', '--config', f)).code).toBe(2);
  expect(fs.existsSync(f)).toBe(false);
  // Before: "user __proto__ added" (exit 0), and nothing in the file.
  const proto = await cli('user', 'add', '__proto__', '--permissions', 'admin', '--token', 't', '--config', f);
  expect([proto.code, proto.stderr]).toEqual([2, 'error: principal __proto__ is reserved\n']);
  expect(fs.existsSync(f)).toBe(false);
});

it('refuses --json beside --format, and an empty dev-cluster --data-dir', async () => {
  for (const args of [
    ['group', 'list', '--format', 'table', '--json'],
    ['group', 'describe', 'g', '--format', 'json', '--json'],
    ['cluster', 'status', '--format', 'table', '--json'],
  ]) {
    const r = await cli(...args, '--bootstrap', '127.0.0.1:1');
    expect(r.code, args.join(' ')).toBe(2);
    expect(r.stderr).toMatch(/'--json' cannot be used with option '--format/);
  }
  const r = await cli('dev-cluster', '--data-dir', '');
  expect([r.code, r.stderr]).toEqual([2, "error: option '--data-dir <dir>' argument '' is invalid. must not be empty.\n"]);
  // Before: ten brokers started, then the eleventh failed on etcd's port (exit 1).
  const crowded = await cli('dev-cluster', '--brokers', '11', '--base-port', '21000');
  expect([crowded.code, crowded.stderr]).toEqual([2, 'error: --base-port lays out at most 10 brokers (health ports port+80..port+89, etcd on port+90 and port+91)\n']);
  // What dev-cluster gives each broker of its own: given to all, they shared one data directory (the rest
  // failed on its lock, or one broker wrote outside the "temporary, removed on exit" directory it was shown),
  // one port, one broker id, or another etcd than the one dev-cluster runs. Refused as the option is read:
  // the invalid --brokers after it stops a run that took it before any cluster starts.
  for (const flag of ['--data-dir /tmp/shared', '--port 9000', '--health-port=9080', '--broker-id 7', '--etcd 127.0.0.1:2379', '--cluster']) {
    const own = await cli('dev-cluster', '--broker-args', `--log-level info ${flag}`, '--brokers', '0');
    expect([own.code, own.stderr], flag).toEqual([2, expect.stringMatching(new RegExp(`^error: option '--broker-args <flags>' argument '.*' is invalid\\. may not set ${flag.split(/[ =]/)[0]}: dev-cluster sets it for each broker`))]);
  }
  // With --tls, each broker's certificates and CAs are dev-cluster's too (before: the flag in --broker-args won).
  for (const flag of ['--tls-cert /tmp/c.pem', '--tls-key=/tmp/k.pem', '--inter-broker-tls-ca /tmp/ca.pem', '--etcd-tls-ca /tmp/e.pem', '--etcd-tls-cert /tmp/e.pem', '--etcd-tls-key /tmp/e.pem']) {
    const own = await cli('dev-cluster', '--tls', '--broker-args', flag, '--brokers', '0');
    expect([own.code, own.stderr], flag).toEqual([2, expect.stringMatching(new RegExp(`with --tls, --broker-args may not set ${flag.split(/[ =]/)[0]}: dev-cluster sets it for each broker`))]);
  }
});

it('dev-cluster refuses --principal and --token when --broker-args leave authentication off: nothing would use them', async () => {
  const noAuth = path.join(dir, 'plain.yaml');
  fs.writeFileSync(noAuth, 'logLevel: info\n');
  const withAuth = path.join(dir, 'auth.yaml');
  fs.writeFileSync(withAuth, 'authentication: true\n');
  // --brokers 11 with --base-port is refused after these checks, so no run here starts a cluster: the
  // refusal under test comes first, and where --principal is taken that refusal is the answer.
  const run = (...args: string[]) => cli('dev-cluster', ...args, '--brokers', '11', '--base-port', '21000');
  const LAYOUT = 'error: --base-port lays out at most 10 brokers (health ports port+80..port+89, etcd on port+90 and port+91)\n';
  for (const extra of [[], ['--broker-args', '--log-level info'], ['--broker-args', '--authentication false'], ['--broker-args', '--authentication=false'], ['--broker-args', `--config ${noAuth}`]]) {
    for (const given of [['--principal', 'alice'], ['--principal', 'alice', '--token', 't']]) {
      const r = await run(...given, ...extra);
      expect([r.code, r.stderr], [...given, ...extra].join(' ')).toEqual([2, expect.stringMatching(/^error: --principal and --token are for brokers with authentication on/)]);
    }
  }
  for (const extra of [['--broker-args', '--authentication'], ['--broker-args', '--log-level info --authentication true'], ['--broker-args', `--config ${withAuth}`], ['--broker-args', `--config=${withAuth}`]]) {
    const r = await run('--principal', 'alice', ...extra);
    expect([r.code, r.stderr], extra.join(' ')).toEqual([2, LAYOUT]);
  }
  // TRIBUTARY_PRINCIPAL is every command's (a shell's setting), not an option given to this one: taken.
  process.env.TRIBUTARY_PRINCIPAL = 'alice';
  try {
    expect(await run()).toMatchObject({ code: 2, stderr: LAYOUT });
  } finally {
    delete process.env.TRIBUTARY_PRINCIPAL;
  }
});

it('refuses a config file over 1 MiB unread, lists at most 20 unknown keys, and names a nested unknown key by its path', async () => {
  const big = path.join(dir, 'big.yaml');
  fs.writeFileSync(big, `# ${'x'.repeat(1 << 20)}\nport: 1\n`);
  const r1 = await cli('broker', 'start', '--config', big);
  expect([r1.code, r1.stderr]).toEqual([2, `invalid config: ${big}: larger than 1048576 bytes\n`]);
  const many = path.join(dir, 'many.yaml');
  fs.writeFileSync(many, Array.from({ length: 500 }, (_, i) => `bogus${i}: 1`).join('\n'));
  const r2 = await cli('broker', 'start', '--config', many);
  expect(r2.code).toBe(2);
  expect(r2.stderr.trimEnd().split('\n')).toHaveLength(21);
  const r3 = await cli('broker', 'start', '--users', '{"a":{"hash":"x","salt":"y","permissions":[],"extra":1}}');
  expect(r3.code).toBe(2);
  expect(r3.stderr).toMatch(/users\.a\.extra: unknown key \(flag --users\)/);
});

it('TRIBUTARY_TLS=false means no TLS, true means TLS, and any other value is refused', async () => {
  const { clientSecurity } = await import('tributary-broker/cli/client-util.js');
  expect(clientSecurity({}, { TRIBUTARY_TLS: 'false' }).tls).toBeUndefined();
  expect(clientSecurity({}, { TRIBUTARY_TLS: '' }).tls).toBeUndefined();
  expect(clientSecurity({}, { TRIBUTARY_TLS: 'true' }).tls).toEqual({});
  expect(clientSecurity({ tls: true }, { TRIBUTARY_TLS: 'false' }).tls).toEqual({});
  // Only the two words every TRIBUTARY_* boolean takes (config-loader.ts): 1, yes, TRUE are refused, not guessed at.
  for (const v of ['maybe', '1', '0', 'yes', 'on', 'TRUE', 'False']) expect(() => clientSecurity({}, { TRIBUTARY_TLS: v }), v).toThrow(/TRIBUTARY_TLS must be true or false/);
  process.env.TRIBUTARY_TLS = 'maybe';
  try {
    const r = await cli('topic', 'list', '--bootstrap', '127.0.0.1:1');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/TRIBUTARY_TLS must be true or false/);
  } finally {
    delete process.env.TRIBUTARY_TLS;
  }
});

it('refuses an empty or invalid --group, --throttle with --cancel, --partition with --status, unknown plan fields and duplicate JSON keys', async () => {
  for (const group of ['', 'a b']) {
    const r = await cli('consume', 'x', '--group', group, '--bootstrap', '127.0.0.1:1');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/groupId/);
  }
  expect((await cli('partitions', 'reassign', '--cancel', '--throttle', '5', '--bootstrap', '127.0.0.1:1')).stderr).toMatch(
    /--throttle cannot be combined with --cancel/,
  );
  const status = await cli('partitions', 'reassign', '--status', '--partition', '3', '--bootstrap', '127.0.0.1:1');
  expect(status.code).toBe(2);
  expect(status.stderr).toMatch(/--partition narrows/);

  const { readPlan } = await import('tributary-broker/cli/reassign-command.js');
  const plan = path.join(dir, 'plan.json');
  fs.writeFileSync(plan, JSON.stringify({ version: 1, partitions: [{ topic: 't', partition: 0, replicas: [1] }], throttle: 5 }));
  expect(() => readPlan(plan)).toThrow(/unknown field\(s\) throttle/);
  fs.writeFileSync(plan, JSON.stringify({ version: 1, partitions: [{ topic: 't', partition: 0, replicas: [1] }] }));
  expect(readPlan(plan)).toEqual([{ topic: 't', partition: 0, replicas: [1] }]);

  const config = path.join(dir, 'dup.json');
  fs.writeFileSync(config, '{"port": 9001, "port": 9002}');
  const dup = await cli('broker', 'start', '--config', config);
  expect(dup.code).toBe(2);
  expect(dup.stderr).toMatch(/Map keys must be unique/);
});

it('the PostgreSQL offset store settings: each needs the other, and the URL must be one (never echoed: it may hold a password)', async () => {
  const start = (...args: string[]) => cli('broker', 'start', '--data-dir', path.join(dir, 'pg'), '--port', '0', '--health-port', '0', ...args);
  const cases: Array<[string[], RegExp]> = [
    [['--offset-store', 'postgres'], /offsetStorePostgresUrl: required when offsetStore is postgres/],
    // Before: the URL alone was ignored, and commits went to the log store without a word.
    [['--offset-store-postgres-url', 'postgres://u@h/db'], /offsetStorePostgresUrl: given, but offsetStore is log/],
    // Before: pg took this for a host named "base" and the broker retried it forever.
    [['--offset-store', 'postgres', '--offset-store-postgres-url', 'this is not a url'], /expected a postgres:\/\/ or postgresql:\/\/ URL/],
    [['--offset-store', 'postgres', '--offset-store-postgres-url', 'mysql://u:hunter2@h/db'], /expected a postgres:\/\/ or postgresql:\/\/ URL/],
    // Before: "expected a postgres:// or postgresql:// URL", though it is one.
    [['--offset-store', 'postgres', '--offset-store-postgres-url', 'postgres://u:hunter2@h:99999/db'], /offsetStorePostgresUrl: its port 99999 is out of range \(1 to 65535\)/],
  ];
  for (const [args, message] of cases) {
    const r = await start(...args);
    expect([r.code, r.stderr], args.join(' ')).toEqual([2, expect.stringMatching(message)]);
    expect(r.stderr).not.toContain('hunter2');
  }
});

it('the HTTP port timeouts are refused out of range, and headers allowed longer than the whole request', async () => {
  const start = (...args: string[]) => cli('broker', 'start', '--data-dir', path.join(dir, 'http'), '--port', '0', '--health-port', '0', ...args);
  const cases: Array<[string[], RegExp]> = [
    [['--http-headers-timeout-ms', '2000', '--http-request-timeout-ms', '1000'], /httpHeadersTimeoutMs: must be <= httpRequestTimeoutMs \(1000\), got 2000 \(flag --http-headers-timeout-ms\)/],
    // The default headers timeout (5 s) is longer than this request timeout: it must be lowered too.
    [['--http-request-timeout-ms', '1000'], /httpHeadersTimeoutMs: must be <= httpRequestTimeoutMs \(1000\), got 5000 \(default\)/],
    [['--http-keep-alive-timeout-ms', '0'], /httpKeepAliveTimeoutMs: must be >= 100, got 0/],
    [['--http-headers-timeout-ms', '-1'], /httpHeadersTimeoutMs: must be >= 100, got -1/],
    // Past the longest timer Node runs (a longer one fires at once).
    [['--http-request-timeout-ms', '2147483648'], /httpRequestTimeoutMs: must be <= 2147483647/],
    [['--http-keep-alive-timeout-ms', '5s'], /httpKeepAliveTimeoutMs: expected an integer, got "5s"/],
  ];
  for (const [args, message] of cases) {
    const r = await start(...args);
    expect([r.code, r.stderr], args.join(' ')).toEqual([2, expect.stringMatching(message)]);
  }
  expect(fs.existsSync(path.join(dir, 'http'))).toBe(false);
});

it('an option given twice is refused (exit 2), not settled by the last one; nothing is written', async () => {
  const f = path.join(dir, 'broker.yaml');
  const r = await cli('user', 'add', 'bob', '--permissions', 'admin', '--permissions', 'topic.read', '--token', 'tok', '--config', f);
  expect(r.code).toBe(2);
  expect(r.stderr).toMatch(/option '--permissions <list>' given more than once/);
  expect(fs.existsSync(f)).toBe(false);
  const twiceBool = await cli('user', 'add', 'bob', '--permissions', 'admin', '--token', 'a', '--token', 'b', '--config', f);
  expect(twiceBool.code).toBe(2);
  expect(fs.existsSync(f)).toBe(false);
  // Once each: fine.
  expect((await cli('user', 'add', 'bob', '--permissions', 'admin', '--token', 'tok', '--config', f)).code).toBe(0);
});

it("launchers' defaults give way to the caller's flags, so a launched broker never gets an option twice", async () => {
  const { withOverrides } = await import('tributary-broker/cli/flags.js');
  expect(withOverrides(['--host', 'h', '--log-level', 'warn', '--cluster', '--port', '0'], ['--log-level', 'info', '--flush', 'os'])).toEqual([
    '--host',
    'h',
    '--cluster',
    '--port',
    '0',
    '--log-level',
    'info',
    '--flush',
    'os',
  ]);
  expect(withOverrides(['--cluster', '--port', '0'], ['--cluster'])).toEqual(['--port', '0', '--cluster']);
  expect(withOverrides(['--port', '0'], ['--port=9'])).toEqual(['--port=9']);
  // A flag the caller gives twice: the last stands.
  expect(withOverrides(['--host', 'h'], ['--flush', 'os', '--log-level', 'info', '--flush', 'always'])).toEqual(['--host', 'h', '--log-level', 'info', '--flush', 'always']);
});

it('broker start refuses settings it would not use, with exit 2 and nothing created', async () => {
  const data = path.join(dir, 'unused');
  const start = (...args: string[]) => cli('broker', 'start', '--data-dir', data, '--port', '0', '--health-port', '0', ...args);
  const cases: Array<[string[], RegExp]> = [
    // Before: a standalone broker started, and Kafka DescribeConfigs reported min.insync.replicas=5.
    [['--min-insync-replicas', '5'], /^invalid config: minInsyncReplicas: is for cluster mode \(--cluster\)/],
    [['--etcd', '127.0.0.1:2379'], /^invalid config: etcd: is for cluster mode/],
    [['--kafka-advertised-port', '19092'], /^invalid config: kafkaAdvertisedPort: is for the Kafka listener, which is off/],
    [['--flush-interval-ms', '50'], /^invalid config: flushIntervalMs: given, but flush is always without the journal/],
    [['--http-allowed-hosts', 'https://ops.example'], /^invalid config: httpAllowedHosts: "https:\/\/ops\.example" is not a host name/],
    // Before: both started, and an ACL that looked in force protected nothing (authentication off).
    [['--topic-acls', '{"x":{}}'], /^invalid config: topicAcls: is for authentication \(--authentication\), which is off/],
    [['--users', '{}'], /^invalid config: users: is for authentication \(--authentication\), which is off/],
    [['--group-acls', '{"billing-*":["billing"]}'], /^invalid config: groupAcls: is for authentication \(--authentication\), which is off/],
    // Before: started, with a timeout no connection was ever held to.
    [['--auth-timeout-ms', '5000'], /^invalid config: authTimeoutMs: is for authentication \(--authentication\), which is off/],
  ];
  for (const [args, message] of cases) {
    const r = await start(...args);
    expect([r.code, r.stderr], args.join(' ')).toEqual([2, expect.stringMatching(message)]);
  }
  expect(fs.existsSync(data)).toBe(false);
});

it('group reset-offsets --to-timestamp refuses a date that does not exist instead of rolling it over', async () => {
  const { parseTimestamp } = await import('tributary-broker/cli/group-command.js');
  // Before: 2026-02-30 was taken as 2026-03-02, and 2026-04-31 as 2026-05-01.
  for (const bad of ['2026-02-30', '2026-02-29T00:00:00Z', '2026-04-31', '2026-06-31T12:00:00Z', '2026-00-10', '2026-01-00']) {
    const r = await cli('group', 'reset-offsets', 'g', '--topic', 't', '--to-timestamp', bad, '--bootstrap', '127.0.0.1:1');
    expect([r.code, r.stderr], bad).toEqual([2, expect.stringMatching(/--to-timestamp .* is invalid\. must be milliseconds since the epoch or an ISO 8601 date/)]);
  }
  expect(parseTimestamp('2028-02-29')).toBe(Date.UTC(2028, 1, 29));
  expect(parseTimestamp('2026-01-31T12:00:00Z')).toBe(Date.UTC(2026, 0, 31, 12));
  expect(parseTimestamp('2026-12-31')).toBe(Date.UTC(2026, 11, 31));
  expect(parseTimestamp('1700000000000')).toBe(1_700_000_000_000);
});

it('topic create offers only the cleanup policy the broker takes for user topics', async () => {
  // Before: --cleanup-policy compact was offered, sent, and refused by the broker as invalid_parameter.
  const r = await cli('topic', 'create', 't', '--cleanup-policy', 'compact', '--bootstrap', '127.0.0.1:1');
  expect([r.code, r.stderr]).toEqual([2, "error: option '--cleanup-policy <policy>' argument 'compact' is invalid. Allowed choices are delete.\n"]);
  const help = await cli('topic', 'create', '--help');
  expect(help.stdout).toMatch(/--cleanup-policy <policy>\s+delete old segments \(compaction is for internal\s+topics only\) \(choices: "delete"\)/);
  expect(help.stdout).not.toMatch(/compact by key|"compact"/);
});
