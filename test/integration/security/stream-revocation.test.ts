/**
 * Revocation cuts running streams: after a SIGHUP reload that removes a user or takes a topic ACL away,
 * that user's open STREAMs end with `STREAM_CONTROL type=CLOSE reason=unauthorized`, its next request is
 * refused, and streams the new rules still allow go on. Over TLS, where a stream ended from outside its
 * own loop was seen to lose its CLOSE frame while the loop ended the socket a second time.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Connection } from 'tributary-protocol/connection.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { type Pem, addUser, makeCa, makeCert, removeUser } from './pki.js';
import { tempDir } from '../../helpers/util.js';

/** A STREAM of partition 0 from offset 0: the values it delivers, and the STREAM_CONTROL that ends it. */
function openStream(conn: Connection, topic: string): { values: string[]; closed: Promise<Record<string, string>> } {
  const values: string[] = [];
  const closed = (async () => {
    const it = conn.stream({ topic, partition: 0, offset: 0 });
    for (;;) {
      const n = await it.next();
      if (n.done) return n.value;
      for (const r of n.value.records) values.push(r.value.toString());
    }
  })();
  closed.catch(() => {});
  return { values, closed };
}

describe('revocation ends running streams', () => {
  let dir: string;
  let config: string;
  let broker: BrokerProcess;
  let ca: Pem;
  const tokens: Record<string, string> = {};
  const open: Connection[] = [];

  async function connect(principal: string): Promise<Connection> {
    const c = await Connection.connect({ host: '127.0.0.1', port: broker.port, tls: { ca: ca.cert, servername: 'localhost' }, auth: { principal, token: tokens[principal]! } });
    open.push(c);
    return c;
  }

  beforeAll(async () => {
    dir = await tempDir('tributary-revoke-');
    ca = makeCa(dir, 'ca');
    const server = makeCert(dir, ca, 'server', 'localhost');
    config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, ['authentication: true', 'topicAcls:', '  locked:', '    read: [reader, other]', ''].join('\n'));
    tokens.admin = addUser(config, 'admin', ['admin']);
    tokens.reader = addUser(config, 'reader', ['topic.read']);
    tokens.other = addUser(config, 'other', ['topic.read']);
    tokens.revokee = addUser(config, 'revokee', ['topic.read']);
    broker = await BrokerProcess.start({ args: ['--config', config, '--tls-cert', server.certFile, '--tls-key', server.keyFile] });
    const admin = await connect('admin');
    for (const t of ['open', 'locked']) await admin.command('CREATE', { topic: t, partitions: 1 });
  });

  afterAll(async () => {
    await Promise.all(open.map((c) => c.close().catch(() => {})));
    await broker?.dispose();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('a removed user and a withdrawn ACL end their streams with reason=unauthorized; allowed streams go on', async () => {
    const admin = await connect('admin');
    const streams = {
      revoked: openStream(await connect('revokee'), 'open'),
      aclWithdrawn: openStream(await connect('reader'), 'locked'),
      keptOpen: openStream(await connect('reader'), 'open'),
      keptLocked: openStream(await connect('other'), 'locked'),
    };
    for (const t of ['open', 'locked']) await admin.command('PUBLISH', { topic: t, partition: 0, message: 'before' });
    for (const st of Object.values(streams)) await expect.poll(() => st.values.includes('before'), { timeout: 5000 }).toBe(true);

    removeUser(config, 'revokee');
    // `user add` rewrote the file (`read: [ reader, other ]`).
    const text = fs.readFileSync(config, 'utf8');
    const withdrawn = text.replace(/read: \[ ?reader, other ?\]/, 'read: [other]');
    expect(withdrawn).not.toBe(text);
    fs.writeFileSync(config, withdrawn);
    broker.proc!.kill('SIGHUP');

    expect(await streams.revoked.closed).toMatchObject({ type: 'CLOSE', reason: 'unauthorized' });
    expect(await streams.aclWithdrawn.closed).toMatchObject({ type: 'CLOSE', reason: 'unauthorized' });
    for (const t of ['open', 'locked']) await admin.command('PUBLISH', { topic: t, partition: 0, message: 'after' });
    await expect.poll(() => streams.keptOpen.values.includes('after'), { timeout: 5000 }).toBe(true);
    await expect.poll(() => streams.keptLocked.values.includes('after'), { timeout: 5000 }).toBe(true);
    expect(streams.revoked.values).not.toContain('after');
    expect(streams.aclWithdrawn.values).not.toContain('after');

    // Their next requests are refused.
    const reader = await connect('reader');
    const r = await reader.request('STREAM topic=locked partition=0 offset=0');
    expect(r.kind === 'text' && r.text).toMatch(/^ERROR: NOT_AUTHORIZED_FOR_TOPIC/);
    await expect(connect('revokee')).rejects.toMatchObject({ code: 'authentication_failed' });
  });
});
