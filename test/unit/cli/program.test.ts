import { afterEach, describe, expect, it, vi } from 'vitest';
import { cliInProcess as cli } from '../../helpers/cli-in-process.js';

describe('tributary CLI exit codes', () => {
  afterEach(() => vi.unstubAllEnvs());

  it('exits 2 with one line per config problem before starting a broker', async () => {
    vi.stubEnv('TRIBUTARY_PORT', 'abc');
    const r = await cli('broker', 'start', '--idle-timeout-ms', '-5', '--flush', 'never');
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(
      [
        'invalid config: port: expected an integer, got "abc" (env TRIBUTARY_PORT)',
        'invalid config: idleTimeoutMs: must be >= 100, got -5 (flag --idle-timeout-ms)',
        'invalid config: flush: must be one of always|interval|os, got "never" (flag --flush)',
        '',
      ].join('\n'),
    );
  });

  it('exits 1 saying the connection was refused when nothing listens', async () => {
    const r = await cli('topic', 'list', '--bootstrap', '127.0.0.1:1');
    expect(r).toEqual({ code: 1, stdout: '', stderr: 'error: connection refused by 127.0.0.1:1: is a broker running there? (start one with `npm start`)\n' });
  });

  it('takes the bootstrap address from TRIBUTARY_BOOTSTRAP', async () => {
    vi.stubEnv('TRIBUTARY_BOOTSTRAP', '127.0.0.1:2');
    const r = await cli('consume', 'orders');
    expect(r.stderr).toBe('error: connection refused by 127.0.0.1:2: is a broker running there? (start one with `npm start`)\n');
  });

  it('exits 2 on usage mistakes', async () => {
    expect((await cli('topic', 'create', 't', '--partitions', '0')).code).toBe(2);
    expect((await cli('produce', 't', '--acks', '2')).code).toBe(2);
    expect((await cli('consume', 't', '--from-beginning', '--offset', '3', '--bootstrap', '127.0.0.1:1')).stderr).toBe(
      'error: --from-beginning and --offset cannot be combined\n',
    );
    expect((await cli('topic', 'list', '--bootstrap', 'nohost')).stderr).toBe('error: --bootstrap must be host:port[,host:port...], got "nohost"\n');
    expect((await cli('no-such-command')).code).toBe(2);
  });

  it('exits 0 for --help', async () => {
    const r = await cli('broker', 'start', '--help');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('--health-port <n>');
    expect(r.stdout).toContain('--idle-timeout-ms <n>');
  });
});
