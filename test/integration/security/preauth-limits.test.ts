/**
 * What a connection may cost the broker before it has authenticated (docs/security.md, "Before
 * authentication"): NEGOTIATE, which anyone may send, takes a bounded feature list. Each case checks the
 * refusal and that the broker answers another connection, with its memory near where it was.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseLine } from 'tributary-protocol/command.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawClient, peakRssMb } from '../../helpers/raw-client.js';
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
});
