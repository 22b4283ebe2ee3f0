/**
 * What a connection may cost the broker before it has authenticated (docs/security.md, "Before
 * authentication"): a frame is at most 64 KiB until the connection has authenticated, and NEGOTIATE, which
 * anyone may send, takes a bounded feature list. Each case checks the refusal and that the broker answers
 * another connection, with its memory near where it was.
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseLine } from 'tributary-protocol/command.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawClient, frame, peakRssMb } from '../../helpers/raw-client.js';
import { removeDir, tempDir } from '../../helpers/util.js';
import { addUser } from './pki.js';

describe('before authentication', () => {
  let dir: string;
  let broker: BrokerProcess;
  let token: string;
  const raws: RawClient[] = [];

  beforeAll(async () => {
    dir = await tempDir('tributary-preauth-');
    const config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, ['authentication: true', 'authTimeoutMs: 60000', ''].join('\n'));
    token = addUser(config, 'app', ['admin']);
    broker = await BrokerProcess.start({ args: ['--config', config, '--offsets-topic-partitions', '1'] });
  });

  afterAll(async () => {
    for (const r of raws) r.destroy();
    await broker?.dispose();
    if (dir) await removeDir(dir);
  });

  async function raw(): Promise<RawClient> {
    const r = await RawClient.connect(broker.port);
    raws.push(r);
    return r;
  }

  /** The broker still answers a new connection, and refuses it what needs a login. */
  async function alive(): Promise<void> {
    const r = await raw();
    expect(await r.command('PROTOCOL_INFO')).toMatch(/^OK protocol=tributary /);
    expect(await r.command('LIST')).toMatch(/^ERROR: authentication_required /);
    r.destroy();
  }

  it('NEGOTIATE takes at most 1,024 characters of features and echoes at most 16 unsupported names, each once', async () => {
    const r = await raw();
    const fields = (reply: string) => parseLine(reply.slice(reply.startsWith('ERROR: ') ? 7 : 0)).params;
    // 60 KB of one-character names.
    const refused = await r.command(`NEGOTIATE version=1 features=${'a,'.repeat(30_000)}a`);
    expect(refused).toMatch(/^ERROR: invalid_parameter /);
    expect(fields(refused).get('param')).toBe('features');
    expect(fields(refused).get('reason')).toBe('longer than 1024 characters');
    // Within the limit: 100 distinct unknown names and one repeated, beside a known feature.
    const names = Array.from({ length: 100 }, (_, i) => `f${i}`);
    const features = ['stream_control_v1', 'f0', 'f0', ...names].join(',');
    expect(features.length).toBeLessThanOrEqual(1024);
    const ok = fields(await r.command(`NEGOTIATE version=1 features=${features}`));
    expect(ok.get('enabled')).toBe('stream_control_v1');
    expect(ok.get('unsupported')).toBe(names.slice(0, 16).join(','));
    const required = await r.command(`NEGOTIATE version=1 require_features=true features=${features}`);
    expect(required).toMatch(/^ERROR: UNSUPPORTED_FEATURE /);
    expect(fields(required).get('unsupported')).toBe(names.slice(0, 16).join(','));
    expect(await r.command('PROTOCOL_INFO')).toMatch(/^OK /);
    await alive();
  });

  it('NEGOTIATE with 64 MiB of features after a login is refused without splitting them', async () => {
    const r = await raw();
    expect(await r.command(`AUTH principal=app token=${token}`)).toMatch(/^OK principal=app authenticated=true/);
    const head = 'NEGOTIATE version=1 features=';
    const body = Buffer.alloc(64 * 1024 * 1024 - 1, 'a,');
    body.write(head, 0);
    body.write('a', body.length - 1);
    const before = peakRssMb(broker);
    const reply = await r.command(body, 120_000);
    expect(reply).toMatch(/^ERROR: invalid_parameter .*param=features/);
    // The frame and its text are some 200 MB; 32 million names took over 2 GB.
    expect(peakRssMb(broker) - before).toBeLessThan(700);
    expect(await r.command('LIST')).toMatch(/^OK /);
    await alive();
  }, 120_000);

  /** A NEGOTIATE frame of exactly `size` bytes: refused for its feature list, but answered. */
  const negotiateOf = (size: number) => {
    const head = 'NEGOTIATE version=1 features=';
    return head + 'a'.repeat(size - head.length);
  };
  const errorOf = (reply: string) => parseLine(reply.slice('ERROR: '.length));

  it('a frame above 64 KiB before authentication is refused with frame_too_large and closes the connection; 64 KiB is answered', async () => {
    const r = await raw();
    // The declared length is enough: the body is never sent.
    const header = Buffer.alloc(4);
    header.writeUInt32BE(64 * 1024 + 1, 0);
    r.socket.write(header);
    const refused = errorOf(await r.next());
    expect(refused.head).toBe('frame_too_large');
    expect(Object.fromEntries(refused.params)).toMatchObject({ max: '65536', declared: '65537', reason: 'before authentication' });
    await r.closedP;
    const at = await raw();
    expect(errorOf(await at.command(negotiateOf(64 * 1024))).params.get('param')).toBe('features');
    expect(await at.command('PROTOCOL_INFO')).toMatch(/^OK /);
    await alive();
  });

  it('frames after AUTH are held to its outcome: after a login the usual limit, after a failed one 64 KiB', async () => {
    const r = await raw();
    // Sent together: the 1 MB frame is read only once the AUTH before it has been answered.
    r.socket.write(Buffer.concat([frame(`AUTH principal=app token=${token}`), frame(negotiateOf(1024 * 1024))]));
    expect(await r.next()).toMatch(/^OK principal=app authenticated=true/);
    expect(errorOf(await r.next()).params.get('param')).toBe('features');
    expect(await r.command('LIST')).toMatch(/^OK /);
    const failed = await raw();
    failed.socket.write(Buffer.concat([frame('AUTH principal=app token=wrong'), frame(negotiateOf(1024 * 1024))]));
    expect(errorOf(await failed.next()).head).toBe('authentication_failed');
    expect(Object.fromEntries(errorOf(await failed.next()).params)).toMatchObject({ max: '65536', reason: 'before authentication' });
    await failed.closedP;
    await alive();
  });

  it('a second AUTH on a logged-in connection holds the frames after it too: a large one sent during the check is answered', async () => {
    const r = await raw();
    expect(await r.command(`AUTH principal=app token=${token}`)).toMatch(/^OK principal=app authenticated=true/);
    r.send(`AUTH principal=app token=${token}`);
    // Written apart, so the large frame's header arrives while the password check runs.
    await new Promise((resolve) => setTimeout(resolve, 5));
    r.send(negotiateOf(1024 * 1024));
    expect(await r.next()).toMatch(/^OK principal=app authenticated=true/);
    expect(errorOf(await r.next()).params.get('param')).toBe('features');
    expect(await r.command('LIST')).toMatch(/^OK /);
    await alive();
  });

  it('30 connections that each send 64 MiB and no login are each closed at the header, with the memory where it was', async () => {
    const body = Buffer.alloc(64 * 1024 * 1024 + 3, 0x41);
    body.writeUInt32BE(64 * 1024 * 1024, 0);
    const before = peakRssMb(broker);
    const replies = await Promise.all(
      Array.from(
        { length: 30 },
        () =>
          new Promise<string>((resolve) => {
            let got = Buffer.alloc(0);
            const s = net.connect({ host: '127.0.0.1', port: broker.port }, () => s.write(body, () => {}));
            s.on('data', (d: Buffer) => (got = Buffer.concat([got, d])));
            s.on('error', () => {});
            s.on('close', () => resolve(got.subarray(4).toString('utf8')));
            setTimeout(() => s.destroy(), 20_000).unref();
          }),
      ),
    );
    for (const reply of replies) expect(reply).toMatch(/^ERROR: frame_too_large .*reason="before authentication"/);
    // Without the limit the broker buffered them all: 2 GB.
    expect(peakRssMb(broker) - before).toBeLessThan(300);
    await alive();
  }, 60_000);
});
