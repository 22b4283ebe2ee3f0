/**
 * Configuration problems `broker start` finds are configuration errors (exit 2, errors.ts) that name the
 * setting: the TLS settings (a certificate without its key, a CA without a certificate, files that are
 * missing or hold no PEM), a data directory that is a file, two listeners on one port. In-process; no
 * broker gets to listen.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { cliInProcess as cli } from '../../helpers/cli-in-process.js';
import { makeCa, makeCert, type Pem } from '../../integration/security/pki.js';
import { removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
let ca: Pem;
let server: Pem;
let other: Pem;
let garbage: string;
beforeAll(async () => {
  dir = await tempDir('trib-start-config-');
  ca = makeCa(dir, 'ca');
  server = makeCert(dir, ca, 'server', 'localhost');
  other = makeCert(dir, ca, 'other', 'localhost');
  garbage = path.join(dir, 'garbage.pem');
  fs.writeFileSync(garbage, 'not a certificate\n');
});
afterAll(async () => {
  await removeDir(dir);
});

const start = (...args: string[]) => cli('broker', 'start', '--data-dir', path.join(dir, 'data'), '--port', '0', '--health-port', '0', '--heap-headroom-mb', '0', '--log-level', 'silent', ...args);

it('TLS settings that do not make a TLS listener, and TLS files that cannot be used, are exit 2 naming the setting', async () => {
  const missing = path.join(dir, 'missing.pem');
  const cases: Array<[string[], RegExp]> = [
    // Before: exit 1, 'error: broker failed to start: invalid config: tlsCert and tlsKey must be given together'.
    [['--tls-cert', server.certFile], /^invalid config: tlsCert: needs tlsKey too \(the listener's certificate and key are given together\), got ".*server\.crt" \(flag --tls-cert\)\n$/],
    [['--tls-key', server.keyFile], /^invalid config: tlsKey: needs tlsCert too/],
    // Before: the broker started, TLS off.
    [['--tls-ca', ca.certFile], /^invalid config: tlsCa: needs tlsCert and tlsKey: without them the listener does not speak TLS, got ".*" \(flag --tls-ca\)\n$/],
    // Before: exit 1, 'ENOENT: no such file or directory, open ...'.
    [['--tls-cert', server.certFile, '--tls-key', server.keyFile, '--tls-ca', missing], new RegExp(`^invalid config: tlsCa: cannot read ${missing} \\(ENOENT\\)\\n$`)],
    // Before: the broker started; no client certificate could ever verify.
    [['--tls-cert', server.certFile, '--tls-key', server.keyFile, '--tls-ca', garbage], new RegExp(`^invalid config: tlsCa: ${garbage} holds no PEM certificate\\n$`)],
    // Before: exit 1, 'error:0480006C:PEM routines::no start line'.
    [['--tls-cert', garbage, '--tls-key', server.keyFile], new RegExp(`^invalid config: tlsCert: ${garbage} holds no PEM certificate\\n$`)],
    [['--tls-cert', server.certFile, '--tls-key', garbage], new RegExp(`^invalid config: tlsKey: ${garbage} holds no private key that can be read`)],
    [['--tls-cert', server.certFile, '--tls-key', other.keyFile], new RegExp(`^invalid config: tlsKey: ${other.keyFile} is not the key of tlsCert ${server.certFile}`)],
    [['--tls-cert', server.certFile, '--tls-key', server.keyFile, '--kafka-port', '0', '--tls-ca', garbage], /^invalid config: tlsCa: /],
  ];
  for (const [args, message] of cases) {
    const r = await start(...args);
    expect([r.code, r.stderr], args.join(' ')).toEqual([2, expect.stringMatching(message)]);
    expect(r.stderr).not.toMatch(/PRIVATE KEY|BEGIN/);
  }
});

it('a data directory that is a file, and two listeners on one port, are exit 2 saying so', async () => {
  const file = path.join(dir, 'a-file');
  fs.writeFileSync(file, 'x');
  // Before: exit 1, 'EEXIST: file already exists, mkdir ...'.
  const r = await cli('broker', 'start', '--data-dir', file, '--port', '0', '--health-port', '0', '--heap-headroom-mb', '0', '--log-level', 'silent');
  expect([r.code, r.stderr]).toEqual([2, `invalid config: dataDir: ${file} is not a directory (a file is there)\n`]);
  const below = await cli('broker', 'start', '--data-dir', path.join(file, 'data'), '--port', '0', '--health-port', '0', '--heap-headroom-mb', '0', '--log-level', 'silent');
  expect([below.code, below.stderr]).toEqual([2, `invalid config: dataDir: ${path.join(file, 'data')} is not a directory (a file is on its path)\n`]);
  // Before: exit 1, '127.0.0.1:19911 is already in use', which of the two listeners unsaid.
  const same = await cli('broker', 'start', '--data-dir', path.join(dir, 'ports'), '--port', '19911', '--health-port', '19911');
  expect([same.code, same.stderr]).toEqual([2, 'invalid config: healthPort: is the same port as port (19911): each listener needs its own, got 19911 (flag --health-port)\n']);
  const kafka = await cli('broker', 'start', '--data-dir', path.join(dir, 'ports'), '--port', '19911', '--kafka-port', '19911');
  expect([kafka.code, kafka.stderr]).toEqual([2, 'invalid config: kafkaPort: is the same port as port (19911): each listener needs its own, got 19911 (flag --kafka-port)\n']);
  expect(fs.existsSync(path.join(dir, 'ports'))).toBe(false);
});
