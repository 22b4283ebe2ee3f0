import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { brokerConfigSchema, envKey, resolveConfig } from 'tributary-broker/common/config.js';
import { CONFIG_FIELDS, type ConfigResult, fieldHelp, kebabCase, loadBrokerConfig } from 'tributary-broker/cli/config-loader.js';
import { removeDirSync, tempDirSync } from '../../helpers/util.js';

const dir = tempDirSync('tributary-cli-config-');
afterAll(() => removeDirSync(dir));

function file(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

function ok(r: ConfigResult) {
  if (!r.ok) throw new Error(`expected a valid config, got:\n${r.errors.join('\n')}`);
  return r;
}

function errors(r: ConfigResult): string[] {
  if (r.ok) throw new Error('expected config errors');
  return r.errors;
}

describe('loadBrokerConfig', () => {
  it('gives the schema defaults when nothing is set', () => {
    const r = ok(loadBrokerConfig({ env: {} }));
    expect(r.config).toEqual(resolveConfig({}));
    expect(r.sources.port).toEqual({ kind: 'default' });
  });

  it('applies flags > env > file > defaults, per key', () => {
    const cfg = file('layers.yaml', 'port: 1001\nhealthPort: 1002\ndataDir: /from/file\nhost: 10.0.0.1\n');
    const r = ok(
      loadBrokerConfig({
        configFile: cfg,
        env: { TRIBUTARY_PORT: '2001', TRIBUTARY_HEALTH_PORT: '2002', TRIBUTARY_FLUSH: 'os', UNRELATED: 'x' },
        flags: { port: '3001' },
      }),
    );
    expect(r.config.port).toBe(3001); // flag beats env and file
    expect(r.config.healthPort).toBe(2002); // env beats file
    expect(r.config.flush).toBe('os'); // env beats default
    expect(r.config.dataDir).toBe('/from/file'); // file beats default
    expect(r.config.host).toBe('10.0.0.1');
    expect(r.config.logLevel).toBe('info'); // default
    expect(r.sources.port).toEqual({ kind: 'flag', name: '--port' });
    expect(r.sources.healthPort).toEqual({ kind: 'env', name: 'TRIBUTARY_HEALTH_PORT' });
    expect(r.sources.dataDir).toEqual({ kind: 'file', path: cfg, at: { line: 3, column: 1 } });
    expect(r.sources.logLevel).toEqual({ kind: 'default' });
  });

  it('reads YAML (.yaml and .yml) and JSON files', () => {
    const yaml = file('c.yaml', '# comment\nport: 9100\nlogLevel: debug\nflush: interval\nflushIntervalMs: 50\n');
    const yml = file('c.yml', 'port: 9101\n');
    const json = file('c.json', JSON.stringify({ port: 9102, dataDir: '/var/lib/tributary', retentionBytes: -1 }));
    const a = ok(loadBrokerConfig({ configFile: yaml, env: {} })).config;
    expect([a.port, a.logLevel, a.flush, a.flushIntervalMs]).toEqual([9100, 'debug', 'interval', 50]);
    expect(ok(loadBrokerConfig({ configFile: yml, env: {} })).config.port).toBe(9101);
    const c = ok(loadBrokerConfig({ configFile: json, env: {} })).config;
    expect([c.port, c.dataDir, c.retentionBytes]).toEqual([9102, '/var/lib/tributary', -1]);
  });

  it('a YAML syntax error names its line and column, never the text there (it may be a token hash)', () => {
    const cfg = file('broken.yaml', 'port: 9000\nlogLevel: [debug\nhost: x\n');
    const [e] = errors(loadBrokerConfig({ configFile: cfg, env: {} }));
    expect(e).toMatch(new RegExp(`^invalid config: cannot parse config file ${cfg}: .* at line 3, column 1$`));
    const hash = 'c2VjcmV0LWhhc2gtdmFsdWU';
    const dupKey = file('dup.yaml', `interBrokerToken: plain-secret-token\ninterBrokerToken: plain-secret-token\nusers:\n  a:\n    hash: ${hash}\n    hash: ${hash}\n`);
    const [d] = errors(loadBrokerConfig({ configFile: dupKey, env: {} }));
    expect(d).toMatch(/Map keys must be unique at line 2, column 1$/);
    const badJson = file('secret.json', `{"interBrokerToken": plain-secret-token}`);
    const dupJson = file('dup.json', `{"users": {"a": {"hash": "${hash}", "hash": "${hash}"}}}`);
    for (const f of [badJson, dupJson]) {
      const [j] = errors(loadBrokerConfig({ configFile: f, env: {} }));
      expect(j).toMatch(new RegExp(`^invalid config: cannot parse config file ${f}: `));
      expect(j).not.toContain('plain-secret');
      expect(j).not.toContain(hash);
    }
    for (const msg of [d]) {
      expect(msg).not.toContain('plain-secret');
      expect(msg).not.toContain(hash);
    }
  });

  it('an invalid setting is named by key, file, line and column, never by the text there or its secret value', () => {
    const hash = 'c2VjcmV0LWhhc2gtdmFsdWU';
    const salt = 'c2FsdHktc2FsdC12YWx1ZQ';
    const cases: Array<[string, string, RegExp]> = [
      // Before: `(file ..., line 2: "interBrokerTokn: s3cr3t-t0ken")`.
      ['unknown.yaml', 'port: 9000\ninterBrokerTokn: s3cr3t-t0ken\n', /^invalid config: interBrokerTokn: unknown key \(did you mean interBrokerToken\?\) \(file .*, line 2, column 1\)$/],
      // Before: `must be a string, got 123456789 (file ..., line 1: "interBrokerToken: 123456789")`.
      ['type.yaml', '  interBrokerToken: 123456789\n', /^invalid config: interBrokerToken: must be a string \(file .*, line 1, column 3\)$/],
      ['pg.yaml', 'offsetStorePostgresUrl: postgres://app:s3cr3t-t0ken@db/offsets\n', /^invalid config: offsetStorePostgresUrl: given, but offsetStore is log, .* \(file .*, line 1, column 1\)$/],
      ['users.yaml', `users: {eve: {hash: ${hash}, salt: ${salt}, permissions: [root]}}\n`, /^invalid config: users\.eve\.permissions\.0: must be one of .* \(file .*, line 1, column 1\)$/],
      ['unknown.json', '{"port": 9000,\n "interBrokerTokn": "s3cr3t-t0ken"}', /^invalid config: interBrokerTokn: unknown key .* \(file .*, line 2, column 2\)$/],
      ['type.json', '{"interBrokerToken": 123456789}', /^invalid config: interBrokerToken: must be a string \(file .*, line 1, column 2\)$/],
    ];
    for (const [name, text, expected] of cases) {
      const errs = errors(loadBrokerConfig({ configFile: file(name, text), env: {} }));
      expect(errs, name).toEqual([expect.stringMatching(expected)]);
      for (const secret of ['s3cr3t-t0ken', '123456789', hash, salt]) expect(errs[0], name).not.toContain(secret);
    }
  });

  it('refuses settings that the broker would start with and then break on', () => {
    const refused = (flags: Record<string, string>) => errors(loadBrokerConfig({ env: {}, flags }));
    // A Node timer fires after 1 ms past 2^31-1: every setting used as a timer's delay is bound by it.
    // Before: --auth-timeout-ms 3000000000 closed every connection at once, --retention-check-ms ran the
    // retention pass every millisecond, --flush-interval-ms left the broker NOT READY.
    const timers = ['authTimeoutMs', 'retentionCheckMs', 'flushIntervalMs', 'idleTimeoutMs', 'startupTimeoutMs', 'frameTimeoutMs', 'writeStallTimeoutMs', 'maxWaitMs'];
    // A SYNC waits out the group's rebalance timeout on a timer: above the bound it gave up at once.
    const groupTimers = ['groupRebalanceTimeoutMs'];
    for (const key of [...timers, ...groupTimers, 'streamKeepaliveMs', 'shutdownTimeoutMs', 'etcdRequestTimeoutMs', 'replicaLagMaxMs', 'replicationTimeoutMs', 'maxTransactionTimeoutMs']) {
      expect(refused({ [key]: '3000000000' }), key).toEqual([expect.stringMatching(new RegExp(`^invalid config: ${key}: must be <= 2147483647, got 3000000000 \\(flag --`))]);
      // In a cluster with flush interval and authentication, where every one of them is used.
      const used = { cluster: 'true', etcd: '127.0.0.1:2379', flush: 'interval', authentication: 'true' };
      expect(ok(loadBrokerConfig({ env: {}, flags: { [key]: '2147483647', ...used } })).config[key as 'authTimeoutMs'], key).toBe(2147483647);
    }
    // Before: every topic create failed (invalid_parameter segmentBytes, as if the client had sent it).
    expect(refused({ segmentBytes: '3000000000' })).toEqual(['invalid config: segmentBytes: must be <= 2147483647, got 3000000000 (flag --segment-bytes)']);
    expect(refused({ retentionHours: '3000000000' })).toEqual(['invalid config: retentionHours: must be <= 1000000, got 3000000000 (flag --retention-hours)']);
    // Before: every INIT_PRODUCER_ID without a timeout failed naming transaction_timeout_ms, which it never sent.
    expect(refused({ transactionTimeoutMs: '1000000' })).toEqual(['invalid config: transactionTimeoutMs: must be <= maxTransactionTimeoutMs (900000), got 1000000 (flag --transaction-timeout-ms)']);
    expect(refused({ groupMinSessionTimeoutMs: '20000' })).toEqual(['invalid config: groupSessionTimeoutMs: must be >= groupMinSessionTimeoutMs (20000), got 10000 (default)']);
    expect(refused({ groupMaxSessionTimeoutMs: '3000000000', groupSessionTimeoutMs: '3000000000' })).toEqual([
      'invalid config: groupSessionTimeoutMs: must be <= 2147483647, got 3000000000 (flag --group-session-timeout-ms)',
      'invalid config: groupMaxSessionTimeoutMs: must be <= 2147483647, got 3000000000 (flag --group-max-session-timeout-ms)',
    ]);
    expect(refused({ groupMaxSessionTimeoutMs: '5000' })).toEqual(['invalid config: groupSessionTimeoutMs: must be <= groupMaxSessionTimeoutMs (5000), got 10000 (default)']);
    expect(refused({ groupMinSessionTimeoutMs: '600000', groupMaxSessionTimeoutMs: '500000', groupSessionTimeoutMs: '550000' })).toEqual([
      'invalid config: groupMinSessionTimeoutMs: must be <= groupMaxSessionTimeoutMs (500000), got 600000 (flag --group-min-session-timeout-ms)',
    ]);
    // Before: a CREATE without partitions made 20 where the maximum was 10.
    expect(refused({ defaultPartitions: '20', maxPartitions: '10' })).toEqual(['invalid config: defaultPartitions: must be <= maxPartitions (10), got 20 (flag --default-partitions)']);
    // At the bounds: accepted.
    ok(loadBrokerConfig({ env: {}, flags: { segmentBytes: '2147483647', retentionHours: '1000000', transactionTimeoutMs: '900000', defaultPartitions: '10', maxPartitions: '10' } }));
    ok(loadBrokerConfig({ env: {}, flags: { groupMinSessionTimeoutMs: '10000', groupMaxSessionTimeoutMs: '10000' } }));
  });

  it("the largest segmentBytes and retentionHours are ones a topic's log takes", async () => {
    const { resolveOptions } = await import('tributary-broker/storage/log-options.js');
    const { MAX_SEGMENT_BYTES, MAX_RETENTION_HOURS } = await import('tributary-broker/common/config.js');
    expect(() => resolveOptions({ segmentBytes: MAX_SEGMENT_BYTES, retentionMs: MAX_RETENTION_HOURS * 3_600_000 })).not.toThrow();
    expect(() => resolveOptions({ segmentBytes: MAX_SEGMENT_BYTES + 1 })).toThrow(/segmentBytes/);
  });

  it('takes deletedTopicRetentionMs in a cluster (7 days by default, 0 keeps every tombstone) and refuses bad values and a standalone broker', () => {
    const cluster = { cluster: 'true', etcd: '127.0.0.1:2379' };
    expect(ok(loadBrokerConfig({ env: {}, flags: cluster })).config.deletedTopicRetentionMs).toBe(604_800_000);
    expect(ok(loadBrokerConfig({ env: { TRIBUTARY_DELETED_TOPIC_RETENTION_MS: '0' }, flags: cluster })).config.deletedTopicRetentionMs).toBe(0);
    expect(ok(loadBrokerConfig({ env: {}, flags: { ...cluster, deletedTopicRetentionMs: '86400000' } })).config.deletedTopicRetentionMs).toBe(86_400_000);
    const refused = (value: string) => errors(loadBrokerConfig({ env: {}, flags: { ...cluster, deletedTopicRetentionMs: value } }));
    expect(refused('-1')).toEqual(['invalid config: deletedTopicRetentionMs: must be >= 0, got -1 (flag --deleted-topic-retention-ms)']);
    expect(refused('7d')).toEqual(['invalid config: deletedTopicRetentionMs: expected an integer, got "7d" (flag --deleted-topic-retention-ms)']);
    expect(refused('1.5')).toEqual(['invalid config: deletedTopicRetentionMs: expected an integer, got "1.5" (flag --deleted-topic-retention-ms)']);
    expect(refused('9007199254740992')).toEqual(['invalid config: deletedTopicRetentionMs: expected an integer, got "9007199254740992" (too large) (flag --deleted-topic-retention-ms)']);
    const inFile = errors(loadBrokerConfig({ configFile: file('deleted-topic-retention.yaml', 'deletedTopicRetentionMs: 1.5\n'), env: {}, flags: cluster }));
    expect(inFile).toEqual([expect.stringMatching(/^invalid config: deletedTopicRetentionMs: must be an integer, got 1\.5 \(file .*deleted-topic-retention\.yaml, line 1, column 1\)$/)]);
    // Only the controller of a cluster removes tombstones: a standalone broker refuses it, as the other cluster settings.
    expect(errors(loadBrokerConfig({ env: {}, flags: { deletedTopicRetentionMs: '1000' } }))).toEqual([
      'invalid config: deletedTopicRetentionMs: is for cluster mode (--cluster); a standalone broker would not use it (flag --deleted-topic-retention-ms)',
    ]);
  });

  it('refuses a setting given that the broker would not use, naming where it came from', () => {
    const refused = (flags: Record<string, string>, env: Record<string, string> = {}) => errors(loadBrokerConfig({ env, flags }));
    // Before: each started a standalone broker without a word (DescribeConfigs then said min.insync.replicas=5).
    for (const [key, value] of [
      ['etcd', '127.0.0.1:2379'],
      ['interBrokerPrincipal', 'broker'],
      ['defaultReplicationFactor', '3'],
      ['minInsyncReplicas', '5'],
      ['replicationTimeoutMs', '1000'],
      ['etcdTlsCa', '/ca.pem'],
    ] as const) {
      const flag = `--${kebabCase(key)}`;
      expect(refused({ [key]: value }), key).toEqual([`invalid config: ${key}: is for cluster mode (--cluster); a standalone broker would not use it (flag ${flag})`]);
      ok(loadBrokerConfig({ env: {}, flags: { [key]: value, cluster: 'true', etcd: '127.0.0.1:2379' } }));
    }
    const token = refused({}, { TRIBUTARY_INTER_BROKER_TOKEN: 's3cr3t-t0ken' });
    expect(token).toEqual(['invalid config: interBrokerToken: is for cluster mode (--cluster); a standalone broker would not use it (env TRIBUTARY_INTER_BROKER_TOKEN)']);
    // A default is never refused: only what was given.
    ok(loadBrokerConfig({ env: {}, flags: {} }));

    for (const key of ['kafkaAdvertisedHost', 'kafkaHost'] as const) {
      expect(refused({ [key]: 'kafka.example' }), key).toEqual([expect.stringMatching(new RegExp(`^invalid config: ${key}: is for the Kafka listener, which is off without kafkaPort`))]);
      ok(loadBrokerConfig({ env: {}, flags: { [key]: 'kafka.example', kafkaPort: '0' } }));
      ok(loadBrokerConfig({ env: {}, flags: { [key]: 'kafka.example', kafkaPortIfFree: '9092' } }));
    }
    expect(refused({ kafkaAdvertisedPort: '19092' })).toEqual([expect.stringMatching(/^invalid config: kafkaAdvertisedPort: is for the Kafka listener/)]);

    // flushIntervalMs is the fsync period of flush interval and of journaled segments (the internal topics'
    // are journaled whatever the flush mode), and in a cluster the HWM checkpoint period too.
    expect(refused({ flushIntervalMs: '50' })).toEqual([expect.stringMatching(/^invalid config: flushIntervalMs: given, but flush is always without the journal, which does not use it on a standalone broker .* \(flag --flush-interval-ms\)$/)]);
    expect(refused({ flushIntervalMs: '50', flush: 'os' })).toEqual([expect.stringMatching(/^invalid config: flushIntervalMs: given, but flush is os/)]);
    ok(loadBrokerConfig({ env: {}, flags: { flushIntervalMs: '50', journal: 'true' } }));
    ok(loadBrokerConfig({ env: {}, flags: { flushIntervalMs: '50', flush: 'os', journal: 'true' } }));
    ok(loadBrokerConfig({ env: {}, flags: { flushIntervalMs: '50', flush: 'interval' } }));
    ok(loadBrokerConfig({ env: {}, flags: { flushIntervalMs: '50', cluster: 'true', etcd: '127.0.0.1:2379' } }));
  });

  it('refuses httpAllowedHosts entries that are not host names (a port or a scheme never matched)', () => {
    for (const bad of ['console.example:19780', 'https://ops.example', 'ops.example,console.example/', 'a b', 'ops.example.', '[::1]']) {
      const [e] = errors(loadBrokerConfig({ env: {}, flags: { httpAllowedHosts: bad } }));
      expect(e, bad).toMatch(/^invalid config: httpAllowedHosts: ".*" is not a host name: expected names only, comma-separated, without scheme, port or path \(console\.example,ops\.example\)/);
    }
    expect(ok(loadBrokerConfig({ env: {}, flags: { httpAllowedHosts: 'console.example, ops.example,10.0.0.1,my_host' } })).config.httpAllowedHosts).toBe('console.example, ops.example,10.0.0.1,my_host');
    // The Kafka listener on another address may take the same port number.
    expect(ok(loadBrokerConfig({ env: {}, flags: { port: '19911', kafkaPort: '19911', kafkaHost: '127.0.0.2' } })).config.kafkaPort).toBe(19911);
    expect(errors(loadBrokerConfig({ env: {}, flags: { port: '19911', kafkaPort: '19911' } }))[0]).toMatch(/kafkaPort: is the same port as port/);
    // A trailing comma names nothing: skipped, as the listener skips it.
    expect(ok(loadBrokerConfig({ env: {}, flags: { httpAllowedHosts: 'console.example,' } })).config.httpAllowedHosts).toBe('console.example,');
  });

  it('a key without a value is reported as null, not as the default it would have had', () => {
    const cfg = file('null.yaml', 'host: 127.0.0.1\nport:\n');
    // Before: 'port: must be a number, got 9000'.
    expect(errors(loadBrokerConfig({ configFile: cfg, env: {} }))).toEqual([`invalid config: port: must be a number, got null (file ${cfg}, line 2, column 1)`]);
  });

  it('treats an empty YAML file as no settings', () => {
    expect(ok(loadBrokerConfig({ configFile: file('empty.yaml', ''), env: {} })).config).toEqual(resolveConfig({}));
  });

  it('refuses an unknown key in the file, suggesting the real name', () => {
    const cfg = file('unknown.yaml', 'port: 9000\nprot: 1\ndata-dir: /x\n');
    expect(errors(loadBrokerConfig({ configFile: cfg, env: {} }))).toEqual([
      `invalid config: prot: unknown key (did you mean port?) (file ${cfg}, line 2, column 1)`,
      `invalid config: data-dir: unknown key (did you mean dataDir?) (file ${cfg}, line 3, column 1)`,
    ]);
  });

  it('refuses an unknown TRIBUTARY_* variable, suggesting the setting it resembles', () => {
    expect(errors(loadBrokerConfig({ env: { TRIBUTARY_PROT: '9001', TRIBUTARY_NOT_A_SETTING_AT_ALL: '1' } }))).toEqual([
      'invalid config: TRIBUTARY_PROT: unknown variable (did you mean TRIBUTARY_PORT?) (env TRIBUTARY_PROT)',
      'invalid config: TRIBUTARY_NOT_A_SETTING_AT_ALL: unknown variable (env TRIBUTARY_NOT_A_SETTING_AT_ALL)',
    ]);
  });

  it("lets through the client commands' and the test scripts' TRIBUTARY_* variables, and other prefixes", () => {
    const env = { TRIBUTARY_BOOTSTRAP: 'h:1', TRIBUTARY_TOKEN: 't', TRIBUTARY_TLS: 'false', TRIBUTARY_FAILPOINTS: '', TRIBUTARY_SKIP_BUILD: '1', TRIBUTARY: 'x', TRIBUTARYX_Y: '1', TRIBUTARY_PORT: '9001' };
    expect(ok(loadBrokerConfig({ env })).config.port).toBe(9001);
  });

  it('parses env numbers strictly (TRIBUTARY_PORT=abc)', () => {
    expect(errors(loadBrokerConfig({ env: { TRIBUTARY_PORT: 'abc' } }))).toEqual([
      'invalid config: port: expected an integer, got "abc" (env TRIBUTARY_PORT)',
    ]);
    for (const bad of ['9000abc', '1e3', '0x10', ' 9000', '90.5', '']) {
      const errs = errors(loadBrokerConfig({ env: { TRIBUTARY_PORT: bad } }));
      expect(errs).toEqual([`invalid config: port: expected an integer, got ${JSON.stringify(bad)} (env TRIBUTARY_PORT)`]);
    }
  });

  it('refuses a negative timeout flag, naming the flag', () => {
    expect(errors(loadBrokerConfig({ env: {}, flags: { idleTimeoutMs: '-5' } }))).toEqual([
      'invalid config: idleTimeoutMs: must be >= 100, got -5 (flag --idle-timeout-ms)',
    ]);
  });

  it('takes --stored-layout blocks|records (blocks by default) and refuses any other', () => {
    expect(ok(loadBrokerConfig({ env: {} })).config.storedLayout).toBe('blocks');
    expect(ok(loadBrokerConfig({ env: {}, flags: { storedLayout: 'records' } })).config.storedLayout).toBe('records');
    expect(ok(loadBrokerConfig({ env: { TRIBUTARY_STORED_LAYOUT: 'records' } })).config.storedLayout).toBe('records');
    expect(errors(loadBrokerConfig({ env: {}, flags: { storedLayout: 'block' } }))).toEqual([
      'invalid config: storedLayout: must be one of records|blocks, got "block" (flag --stored-layout)',
    ]);
  });

  it('reports range, enum and type problems with their source, all at once', () => {
    const cfg = file('types.json', JSON.stringify({ healthPort: '9080', dataDir: '' }));
    const errs = errors(
      loadBrokerConfig({
        configFile: cfg,
        env: { TRIBUTARY_PORT: '70000' },
        flags: { flush: 'sometimes', frameTimeoutMs: '1.5' },
      }),
    );
    expect(errs).toEqual([
      'invalid config: frameTimeoutMs: expected an integer, got "1.5" (flag --frame-timeout-ms)',
      'invalid config: port: must be <= 65535, got 70000 (env TRIBUTARY_PORT)',
      `invalid config: healthPort: must be a number, got "9080" (file ${cfg}, line 1, column 2)`,
      `invalid config: dataDir: must not be empty, got "" (file ${cfg}, line 1, column 22)`,
      'invalid config: flush: must be one of always|interval|os, got "sometimes" (flag --flush)',
    ]);
  });

  it('a malformed env value is an error even when a flag overrides it', () => {
    // A malformed env var is still an error: it would silently apply the moment the flag is dropped.
    const errs = errors(loadBrokerConfig({ env: { TRIBUTARY_PORT: 'abc' }, flags: { port: '9001' } }));
    expect(errs).toEqual(['invalid config: port: expected an integer, got "abc" (env TRIBUTARY_PORT)']);
  });

  it('reports unreadable, unparsable and unsupported files', () => {
    const missing = join(dir, 'nope.yaml');
    expect(errors(loadBrokerConfig({ configFile: missing, env: {} }))).toEqual([
      `invalid config: cannot read config file ${missing}: no such file`,
    ]);
    const badYaml = file('bad.yaml', 'port: [1, 2\n');
    expect(errors(loadBrokerConfig({ configFile: badYaml, env: {} }))[0]).toMatch(
      new RegExp(`^invalid config: cannot parse config file ${badYaml}: `),
    );
    const badJson = file('bad.json', '{"port": 1,}');
    expect(errors(loadBrokerConfig({ configFile: badJson, env: {} }))[0]).toMatch(
      new RegExp(`^invalid config: cannot parse config file ${badJson}: `),
    );
    const list = file('list.yaml', '- port\n');
    expect(errors(loadBrokerConfig({ configFile: list, env: {} }))).toEqual([
      `invalid config: ${list}: the top level must be a mapping of setting names to values`,
    ]);
    const toml = file('c.toml', 'port = 1\n');
    expect(errors(loadBrokerConfig({ configFile: toml, env: {} }))).toEqual([
      `invalid config: ${toml}: unsupported config file type (use .yaml, .yml or .json)`,
    ]);
  });
});

describe('CONFIG_FIELDS', () => {
  it('covers every schema key with a kebab flag and the envKey name', () => {
    expect(CONFIG_FIELDS.map((f) => f.key)).toEqual(Object.keys(brokerConfigSchema.shape));
    for (const f of CONFIG_FIELDS) {
      expect(f.env).toBe(envKey(f.key));
      // commander camel-cases --foo-bar back to fooBar: that is how flag values find their key
      expect(f.flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase())).toBe(f.key);
    }
    expect(kebabCase('idleTimeoutMs')).toBe('idle-timeout-ms');
  });

  it('derives kinds and help text from the schema', () => {
    const byKey = new Map(CONFIG_FIELDS.map((f) => [f.key, f]));
    const help = (key: string) => {
      const f = byKey.get(key as (typeof CONFIG_FIELDS)[number]['key']);
      if (!f) throw new Error(`no field ${key}`);
      return fieldHelp(f);
    };
    expect(byKey.get('port')?.kind).toEqual({ type: 'integer', min: 0, max: 65535 });
    expect(byKey.get('flush')?.kind).toEqual({ type: 'enum', values: ['always', 'interval', 'os'] });
    expect(byKey.get('host')?.kind).toEqual({ type: 'string' });
    expect(help('port')).toBe('integer 0..65535 (env TRIBUTARY_PORT, default 9000)');
    expect(help('idleTimeoutMs')).toBe('integer 100..2147483647 (env TRIBUTARY_IDLE_TIMEOUT_MS, default 600000)');
    expect(help('deleteRetentionMs')).toBe('integer 0..9007199254740991 (env TRIBUTARY_DELETE_RETENTION_MS, default 86400000)');
    expect(help('advertisedHost')).toBe('string (env TRIBUTARY_ADVERTISED_HOST)');
  });
});
