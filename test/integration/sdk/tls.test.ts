import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Admin } from 'tributary-client/admin.js';
import { Consumer } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { relay, tempDir } from '../../helpers/util.js';

function selfSigned(dir: string, name: string): { key: string; cert: string } {
  const key = path.join(dir, `${name}.key`);
  const cert = path.join(dir, `${name}.crt`);
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost'], { stdio: 'ignore' });
  return { key: fs.readFileSync(key, 'utf8'), cert: fs.readFileSync(cert, 'utf8') };
}

/**
 * The SDK's `tls` option, end to end: a TLS terminator in front of a real broker whose advertised address
 * is the terminator, so every routed connection (coordinator, leaders) goes through TLS.
 */
describe('SDK over TLS', () => {
  let broker: BrokerProcess;
  let proxy: tls.Server;
  let dir: string;
  let ca: string;
  let otherCa: string;
  let proxyPort = 0;
  const warnings: Error[] = [];
  const onWarning = (w: Error) => warnings.push(w);

  beforeAll(async () => {
    process.on('warning', onWarning);
    dir = await tempDir('tributary-tls-');
    const server = selfSigned(dir, 'server');
    ca = server.cert;
    otherCa = selfSigned(dir, 'other').cert;
    const sockets = new Set<net.Socket>();
    proxy = tls.createServer({ key: server.key, cert: server.cert }, (client) => {
      const upstream = net.connect({ host: '127.0.0.1', port: broker.port });
      sockets.add(client).add(upstream);
      relay(client, upstream);
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', () => r()));
    proxyPort = (proxy.address() as net.AddressInfo).port;
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '2', '--advertised-port', String(proxyPort)] });
  });

  afterAll(async () => {
    process.off('warning', onWarning);
    await broker?.dispose();
    await new Promise<void>((r) => (proxy ? proxy.close(() => r()) : r()));
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('produces and consumes in a group through TLS only', async () => {
    const brokers = [`127.0.0.1:${proxyPort}`];
    await using admin = new Admin({ brokers, tls: { ca } });
    await admin.createTopic({ topic: 'secure', partitions: 2 });
    await using producer = new Producer({ brokers, tls: { ca } });
    const sent = await producer.send({ topic: 'secure', messages: Array.from({ length: 20 }, (_, i) => ({ value: `s${i}`, partition: i % 2 })) });
    expect(sent).toHaveLength(20);
    await using consumer = new Consumer({ brokers, tls: { ca }, groupId: 'tls-group', topic: 'secure', autoOffsetReset: 'earliest' });
    const seen: string[] = [];
    for await (const m of consumer) {
      seen.push(m.value.toString());
      if (seen.length === 20) {
        await consumer.commit({ message: m }); // leaving the loop does not count the last message
        break;
      }
    }
    expect(seen.sort()).toEqual(Array.from({ length: 20 }, (_, i) => `s${i}`).sort());
    expect((await admin.fetchOffset('tls-group', 'secure', 0)).offset).toBe(10);
    // The brokers are IP addresses: no TLS server name is set for them (RFC 6066), so Node warns nothing.
    await new Promise((r) => setImmediate(r)); // warnings are emitted on the next tick
    expect(warnings.map((w) => (w as Error & { code?: string }).code ?? w.message)).not.toContain('DEP0123');
  });

  it('refuses a broker whose certificate another CA signed', async () => {
    await using admin = new Admin({ brokers: [`127.0.0.1:${proxyPort}`], tls: { ca: otherCa }, bootstrapTimeoutMs: 300, retry: { retries: 1 } });
    await expect(admin.listTopics()).rejects.toMatchObject({ code: 'brokers_unreachable', message: expect.stringMatching(/certificate of .* not trusted/) });
  });
});
