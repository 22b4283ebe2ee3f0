import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Connection } from 'tributary-protocol/connection.js';
import { encodeBatch } from 'tributary-protocol/batch.js';
import { encodeFrame } from 'tributary-protocol/frame.js';
import { loadBrokerConfig } from 'tributary-broker/cli/config-loader.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { addUser } from './pki.js';
import { sleep, tempDir } from '../../helpers/util.js';

/** Per-address connections, request rate, batch size and the authentication timeout (plain TCP). */
describe('connection and request limits', () => {
  let dir: string;
  let broker: BrokerProcess;
  let token: string;
  const conns: Connection[] = [];
  const connect = async (localAddress = '127.0.0.1', auth = true) => {
    const c = await Connection.connect({ host: '127.0.0.1', port: broker.port, localAddress, auth: auth ? { principal: 'app', token } : undefined });
    conns.push(c);
    return c;
  };

  beforeAll(async () => {
    dir = await tempDir('tributary-limits-');
    const config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, 'authentication: true\n');
    token = addUser(config, 'app', ['admin']);
    broker = await BrokerProcess.start({
      args: [
        '--config',
        config,
        '--max-connections-per-address',
        '3',
        '--max-requests-per-second-per-connection',
        '50',
        '--max-batch-bytes',
        '2048',
        // Long enough for three AUTHs' scrypt checks on a loaded machine (500 ms once closed one of them).
        '--auth-timeout-ms',
        '1500',
        '--offsets-topic-partitions',
        '2',
      ],
    });
  });

  afterAll(async () => {
    await Promise.all(conns.map((c) => c.close().catch(() => {})));
    await broker?.dispose();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('refuses a connection past the per-address limit with too_many_connections; other addresses are unaffected', async () => {
    const held = await Promise.all([connect('127.0.0.3'), connect('127.0.0.3'), connect('127.0.0.3')]);
    const reply = await new Promise<string>((resolve) => {
      const s = net.connect({ host: '127.0.0.1', port: broker.port, localAddress: '127.0.0.3' });
      let buf = Buffer.alloc(0);
      s.on('data', (d) => (buf = Buffer.concat([buf, d])));
      s.on('error', () => {});
      s.on('close', () => resolve(buf.subarray(4).toString()));
    });
    expect(reply).toMatch(/^ERROR: too_many_connections .*per=address/);
    const other = await connect('127.0.0.4');
    expect(await other.command('LIST')).toMatch(/^OK/);
    await Promise.all(held.map((c) => c.close()));
    // The broker frees the address's slots once it has seen the closes; until then a connect is refused.
    const again = async () => {
      let c: Awaited<ReturnType<typeof connect>> | undefined;
      try {
        c = await connect('127.0.0.3');
        return await c.command('PROTOCOL_INFO');
      } catch {
        return 'refused';
      } finally {
        // A connection that got in but failed its command would hold one of the address's slots.
        await c?.close().catch(() => {});
      }
    };
    // Generous: on a loaded machine the broker may see the closes late (this once took over 3 s).
    await expect.poll(again, { timeout: 15_000 }).toMatch(/^OK/);
  });

  it('throttles a connection past its request rate with a retriable error, without closing it', async () => {
    const c = await connect('127.0.0.5');
    const replies = await Promise.all(Array.from({ length: 150 }, () => c.request('PROTOCOL_INFO')));
    const texts = replies.map((r) => (r.kind === 'text' ? r.text : ''));
    expect(texts.filter((t) => t.startsWith('ERROR: throttled')).length).toBeGreaterThan(50);
    expect(texts.find((t) => t.startsWith('ERROR: throttled'))).toMatch(/class=availability retryable=true/);
    await sleep(1100);
    expect(await c.command('PROTOCOL_INFO')).toMatch(/^OK/);
  });

  it('refuses a batch larger than maxBatchBytes with record_too_large', async () => {
    const c = await connect('127.0.0.6');
    await c.command('CREATE', { topic: 'sized', partitions: 1 });
    const records = Array.from({ length: 10 }, () => ({
      offset: 0,
      sequence: 0,
      producerId: '',
      key: null,
      epoch: 0,
      value: Buffer.alloc(400),
      timestamp: 0,
      attributes: 0,
      headers: [],
    }));
    const batch = { topic: 'sized', partition: 0, acks: '1' as const, idempotent: false, firstSequence: 0, lastSequence: 0, records };
    expect(encodeBatch(batch).length).toBeGreaterThan(2048);
    await expect(c.produceBatch(batch)).rejects.toMatchObject({ code: 'record_too_large' });
    expect((await c.produceBatch({ ...batch, records: records.slice(0, 2) })).count).toBe(2);
  });

  it('closes a connection that does not authenticate in time', async () => {
    const c = await connect('127.0.0.7', false);
    expect(await c.command('PROTOCOL_INFO')).toMatch(/^OK/);
    await expect.poll(() => c.closed, { timeout: 3000 }).toBe(true);
    const raw = net.connect({ host: '127.0.0.1', port: broker.port });
    raw.on('error', () => {});
    raw.write(encodeFrame('LIST'));
    const text = await new Promise<string>((resolve) => raw.once('data', (d: Buffer) => resolve(d.subarray(4).toString())));
    expect(text).toMatch(/^ERROR: authentication_required/);
    raw.destroy();
  });

  it('config errors never echo users (hashes, salts)', () => {
    const file = path.join(dir, 'bad.json');
    fs.writeFileSync(file, JSON.stringify({ users: { eve: { hash: 'SECRETHASH', salt: 'SECRETSALT', permissions: ['root'] } } }));
    const r = loadBrokerConfig({ configFile: file });
    expect(r.ok).toBe(false);
    const text = r.ok ? '' : r.errors.join('\n');
    expect(text).toMatch(/users\.eve\.permissions/);
    expect(text).not.toMatch(/SECRETHASH|SECRETSALT/);
    const flag = loadBrokerConfig({ flags: { users: '{"eve": {"hash": "SECRETHASH"' } });
    expect(flag.ok ? '' : flag.errors.join('\n')).not.toContain('SECRETHASH');
  });
});
