/**
 * Failures that speak (docs/sdk.md, "Connecting"): a client pointed at brokers it cannot reach fails
 * within its bootstrap timeout, naming every address and why; each cause of a failed connect (refused,
 * unknown host, the HTTP port, plain TCP to TLS, TLS to plain, an untrusted certificate) has its own
 * sentence; clients emit connect / disconnect; once connected they keep retrying past the timeout.
 */
import fs from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Admin } from 'tributary-client/admin.js';
import { Consumer } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { freePort } from '../../helpers/scripted-server.js';
import { rejection, tempDir, until } from '../../helpers/util.js';
import { makeCa, makeCert, type Pem } from '../security/pki.js';

/** Nothing listens on port 1 of the loopback address. */
const REFUSED = '127.0.0.1:1';

/**
 * The failed connect of an Admin that never reaches a broker: the connection_lost its retry loop sees
 * (onRetry), once its short bootstrap timeout made the call fail with brokers_unreachable saying the same.
 */
async function listTopicsError(opts: ConstructorParameters<typeof Admin>[0]): Promise<TributaryError> {
  let first: TributaryError | undefined;
  const admin = new Admin({ bootstrapTimeoutMs: 200, ...opts, retry: { initialDelayMs: 20, maxDelayMs: 50, onRetry: (err) => void (first ??= err as TributaryError) } });
  try {
    const e = await rejection(admin.listTopics());
    expect(e.code).toBe('brokers_unreachable');
    expect(first).toBeDefined();
    expect(e.message).toContain(first!.message);
    return first!;
  } finally {
    await admin.close();
  }
}

describe('connect failures', () => {
  let broker: BrokerProcess;
  let tlsBroker: BrokerProcess;
  let dir: string;
  let ca: Pem;
  let otherCa: Pem;

  beforeAll(async () => {
    dir = await tempDir('tributary-connect-');
    ca = makeCa(dir, 'ca');
    otherCa = makeCa(dir, 'other-ca');
    const server = makeCert(dir, ca, 'server', 'localhost');
    [broker, tlsBroker] = await Promise.all([
      BrokerProcess.start({ args: ['--offsets-topic-partitions', '1'] }),
      BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--tls-cert', server.certFile, '--tls-key', server.keyFile] }),
    ]);
  });

  afterAll(async () => {
    await Promise.all([broker?.dispose(), tlsBroker?.dispose()]);
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('a Consumer at unreachable brokers fails its first iteration with brokers_unreachable, naming each address', async () => {
    const c = new Consumer({ brokers: [REFUSED, 'no-such-host.invalid:9000'], groupId: 'g', topic: 't', bootstrapTimeoutMs: 300 });
    const iterate = async () => {
      for await (const _ of c) break;
    };
    const e = await rejection(iterate());
    expect(e.code).toBe('brokers_unreachable');
    expect(e.retriable).toBe(false);
    expect(e.message).toMatch(/connection refused by 127\.0\.0\.1:1: is a broker running there\?/);
    expect(e.message).toMatch(/unknown host no-such-host\.invalid/);
    expect(String(e.fields.brokers).split(',').sort()).toEqual([REFUSED, 'no-such-host.invalid:9000']);
    expect(c.state).toBe('closed');
  });

  it('a Producer and an Admin fail the same way, within their bootstrap timeout', async () => {
    const p = new Producer({ brokers: [REFUSED], bootstrapTimeoutMs: 200, retry: { retries: 50, initialDelayMs: 20, maxDelayMs: 50 } });
    try {
      const e = await rejection(p.send({ topic: 't', messages: [{ value: 'x' }] }));
      expect(e.code).toBe('brokers_unreachable');
      expect(e.message).toMatch(/connection refused by 127\.0\.0\.1:1/);
    } finally {
      await p.close();
    }
    const admin = new Admin({ brokers: [REFUSED], bootstrapTimeoutMs: 200, retry: { retries: 50, initialDelayMs: 20, maxDelayMs: 50 } });
    try {
      expect((await rejection(admin.listTopics())).code).toBe('brokers_unreachable');
    } finally {
      await admin.close();
    }
  });

  it('says why a connect failed: refused, unknown host, the HTTP port, plain TCP to TLS, TLS to plain, an untrusted CA', async () => {
    const cases: Array<[string, ConstructorParameters<typeof Admin>[0], string, RegExp]> = [
      ['refused', { brokers: [REFUSED] }, 'refused', /connection refused by 127\.0\.0\.1:1: is a broker running there\? \(start one with `npm start`\)/],
      ['unknown host', { brokers: ['no-such-host.invalid:9000'] }, 'unknown_host', /unknown host no-such-host\.invalid/],
      ['health port', { brokers: [`127.0.0.1:${broker.healthPort}`] }, 'not_tributary_http', /answered HTTP: that is a broker's health and metrics port/],
      ['plain to TLS', { brokers: [tlsBroker.address] }, 'tls_required', /speaks TLS: pass tls options/],
      ['TLS to plain', { brokers: [broker.address], tls: { ca: ca.cert } }, 'not_tls', /does not speak TLS/],
      ['untrusted CA', { brokers: [tlsBroker.address], tls: { ca: otherCa.cert } }, 'certificate_untrusted', /certificate of .* not trusted .*check the CA/],
    ];
    for (const [what, opts, cause, message] of cases) {
      const e = await listTopicsError(opts);
      expect(e.code, what).toBe('connection_lost');
      expect(e.fields.cause, `${what}: ${e.message}`).toBe(cause);
      expect(e.message, what).toMatch(message);
    }
    // and the right options work
    const admin = new Admin({ brokers: [tlsBroker.address], tls: { ca: ca.cert } });
    try {
      expect(await admin.listTopics()).toEqual([]);
    } finally {
      await admin.close();
    }
  });

  it('a clean close() emits disconnect with no error (Producer, Consumer, Admin); the events carry their type', async () => {
    const admin = new Admin({ brokers: [broker.address] });
    const producer = new Producer({ brokers: [broker.address] });
    const consumer = new Consumer({ brokers: [broker.address], groupId: 'g-clean', topic: 'clean-close', autoOffsetReset: 'earliest' });
    const events: Array<{ client: string; e: object }> = [];
    const record = (client: string) => (e: object) => void events.push({ client, e });
    admin.on('connect', record('admin')).on('disconnect', record('admin'));
    producer.on('connect', record('producer')).on('disconnect', record('producer'));
    consumer.on('connect', record('consumer')).on('disconnect', record('consumer'));
    await admin.createTopic({ topic: 'clean-close', partitions: 1 });
    await producer.send({ topic: 'clean-close', messages: [{ value: 'x' }] });
    for await (const _ of consumer) break;
    await admin.listTopics();
    await Promise.all([admin.close(), producer.close(), consumer.close()]);
    for (const client of ['admin', 'producer', 'consumer']) {
      const mine = events.filter((x) => x.client === client).map((x) => x.e);
      expect(mine, client).toContainEqual({ type: 'connect', broker: broker.address });
      expect(mine.at(-1), client).toEqual({ type: 'disconnect', broker: broker.address });
    }
  });

  it('emits connect and disconnect; once connected a consumer keeps retrying past the bootstrap timeout', async () => {
    // Its own broker on a fixed port, so that it comes back where the consumer looks for it.
    const port = await freePort();
    const own = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--port', String(port)] });
    const c = new Consumer({ brokers: [own.address], groupId: 'g-reconnect', topic: 'reconnect', autoOffsetReset: 'earliest', bootstrapTimeoutMs: 100, sessionTimeoutMs: 6000, heartbeatIntervalMs: 500 });
    const events: string[] = [];
    c.on('connect', (e) => events.push(`connect ${e.broker}`));
    c.on('disconnect', (e) => events.push(`disconnect ${e.broker} ${e.error?.message}`));
    c.on('crash', (e) => events.push(`crash ${e.fatal} ${e.error.message}`));
    const seen: string[] = [];
    let run: Promise<void> | undefined;
    try {
      const admin = new Admin({ brokers: [own.address] });
      await admin.createTopic({ topic: 'reconnect', partitions: 1 });
      await admin.close();
      run = c.run({ eachMessage: ({ message }) => void seen.push(message.value.toString()) });
      await until(() => c.state === 'running', 10_000, 'running');
      expect(events).toContain(`connect ${own.address}`);
      await own.kill();
      // A broker lost is a disconnect with an error (a clean close() has none).
      await until(() => events.some((e) => e.startsWith(`disconnect ${own.address}`) && !e.endsWith(' undefined')), 10_000, 'disconnect event with an error');
      await own.relaunch(); // the same port, longer than bootstrapTimeoutMs after the loss
      expect(own.port).toBe(port);
      const p = new Producer({ brokers: [own.address] });
      await p.send({ topic: 'reconnect', messages: [{ value: 'after-restart', partition: 0 }] });
      await p.close();
      await until(() => seen.includes('after-restart'), 20_000, 'consumption after the broker came back').catch((err) => {
        throw new Error(`${err.message}; state ${c.state}; events ${events.join(' | ')}`);
      });
      expect(events.filter((e) => e === `connect ${own.address}`).length).toBeGreaterThanOrEqual(2);
      expect(events.filter((e) => e.startsWith('crash true'))).toEqual([]);
      expect(c.state).not.toBe('closed');
    } finally {
      await c.close();
      await run;
      await own.dispose();
    }
  });
});
