import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Connection } from 'tributary-protocol/connection.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { addUser, makeCa, makeCert, type Pem } from './pki.js';
import { tempDir } from '../../helpers/util.js';

/** The broker's own TLS listener with required client certificates (mTLS) and authentication on. */
describe('TLS listener with client certificates', () => {
  let dir: string;
  let ca: Pem;
  let client: Pem;
  let foreign: Pem;
  let stranger: Pem;
  let broker: BrokerProcess;
  let token: string;
  const conns: Connection[] = [];

  const connect = async (opts: tls.ConnectionOptions, auth?: { principal: string; token: string }) => {
    const c = await Connection.connect({ host: '127.0.0.1', port: broker.port, tls: { servername: 'localhost', ...opts }, auth, connectTimeoutMs: 3000 });
    conns.push(c);
    return c;
  };

  beforeAll(async () => {
    dir = await tempDir('tributary-mtls-');
    ca = makeCa(dir, 'ca');
    const otherCa = makeCa(dir, 'other-ca');
    const server = makeCert(dir, ca, 'server', 'localhost');
    client = makeCert(dir, ca, 'alice', 'alice');
    stranger = makeCert(dir, ca, 'mallory', 'mallory');
    foreign = makeCert(dir, otherCa, 'alice-foreign', 'alice');
    const config = path.join(dir, 'broker.json');
    fs.writeFileSync(config, JSON.stringify({ authentication: true, tlsRequireClientCert: true }));
    token = addUser(config, 'alice', ['admin']);
    broker = await BrokerProcess.start({ args: ['--config', config, '--tls-cert', server.certFile, '--tls-key', server.keyFile, '--tls-ca', ca.certFile] });
  });

  afterAll(async () => {
    await Promise.all(conns.map((c) => c.close().catch(() => {})));
    await broker?.dispose();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('accepts a client certificate from the configured CA; its CN authenticates the connection', async () => {
    const c = await connect({ ca: ca.cert, cert: client.cert, key: client.key });
    expect(await c.command('LIST')).toMatch(/^OK count=/);
  });

  it('a certificate CN that is not a user still needs AUTH', async () => {
    const c = await connect({ ca: ca.cert, cert: stranger.cert, key: stranger.key });
    await expect(c.command('LIST')).rejects.toMatchObject({ code: 'authentication_required' });
    expect(await c.command('AUTH', { principal: 'alice', token })).toMatch(/authenticated=true/);
    expect(await c.command('LIST')).toMatch(/^OK/);
  });

  it('refuses a client certificate another CA signed', async () => {
    await expect(connect({ ca: ca.cert, cert: foreign.cert, key: foreign.key })).rejects.toMatchObject({ code: 'connection_lost' });
  });

  it('refuses a TLS client without a certificate', async () => {
    await expect(connect({ ca: ca.cert })).rejects.toMatchObject({ code: 'connection_lost' });
  });

  it('refuses TLS 1.1 and plain TCP', async () => {
    await expect(connect({ ca: ca.cert, cert: client.cert, key: client.key, maxVersion: 'TLSv1.1', minVersion: 'TLSv1' })).rejects.toMatchObject({ code: 'connection_lost' });
    await expect(Connection.connect({ host: '127.0.0.1', port: broker.port, connectTimeoutMs: 2000 })).rejects.toBeDefined();
  });

  it('a client that does not trust the broker CA refuses the broker', async () => {
    const otherTrust = fs.readFileSync(path.join(dir, 'other-ca.crt'), 'utf8');
    await expect(connect({ ca: otherTrust, cert: client.cert, key: client.key })).rejects.toMatchObject({ code: 'connection_lost' });
  });

  it('keeps serving after refused handshakes', async () => {
    const raw = net.connect({ host: '127.0.0.1', port: broker.port });
    raw.on('error', () => {});
    raw.end(Buffer.from([0, 0, 0, 4, 76, 73, 83, 84]));
    const c = await connect({ ca: ca.cert, cert: client.cert, key: client.key });
    expect(await c.command('PROTOCOL_INFO')).toMatch(/^OK/);
  });
});
