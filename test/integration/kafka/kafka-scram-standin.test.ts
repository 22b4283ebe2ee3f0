/**
 * SCRAM's stand-in salt for an unknown user (docs/kafka.md "SCRAM-SHA-256") is what a real user's salt is:
 * the same after a SIGHUP that adds or removes another user, after a restart, and on every broker of a
 * cluster, so comparing salts across such changes or brokers does not tell who exists. It still differs
 * per username.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TestCluster } from '../../helpers/cluster.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawKafka } from '../../helpers/raw-kafka.js';
import { removeDir, tempDir } from '../../helpers/util.js';
import { addUser, removeUser } from '../security/pki.js';

async function serverFirst(port: number, user: string): Promise<{ salt: string; iterations: number }> {
  const raw = await RawKafka.connect(port);
  try {
    await raw.call(17, 1, { mechanism: 'SCRAM-SHA-256' });
    const res = await raw.call(36, 2, { authBytes: Buffer.from(`n,,n=${user},r=abcdefgh`) });
    const m = /^r=abcdefgh[^,]+,s=([^,]+),i=(\d+)$/.exec((res.authBytes as Buffer).toString());
    expect(m, (res.authBytes as Buffer).toString()).not.toBeNull();
    return { salt: m![1]!, iterations: Number(m![2]) };
  } finally {
    raw.socket.destroy();
  }
}

const salts = async (port: number) => ({
  ghost: await serverFirst(port, 'ghost'),
  other: await serverFirst(port, 'other-ghost'),
  app: await serverFirst(port, 'app'),
});

describe("SCRAM's stand-in salt", () => {
  let dir: string;
  let config: string;
  const brokers: BrokerProcess[] = [];
  let cluster: TestCluster | undefined;

  beforeAll(async () => {
    dir = await tempDir('tributary-scram-standin-');
    config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, 'authentication: true\n');
    addUser(config, 'app', ['topic.read']);
  });

  afterAll(async () => {
    for (const b of brokers) await b.dispose();
    await cluster?.dispose();
    if (dir) await removeDir(dir);
  });

  /** Has the broker reload the config file (SIGHUP), waiting for its log line. */
  async function reload(b: BrokerProcess): Promise<void> {
    const mark = b.stderr.length;
    b.proc!.kill('SIGHUP');
    await expect.poll(() => b.stderr.slice(mark).includes('users and topic ACLs reloaded'), { timeout: 5000 }).toBe(true);
  }

  /** The Kafka port answers once the broker is ready (before that it closes the connection). */
  async function ready(b: BrokerProcess): Promise<void> {
    await expect.poll(async () => (await b.health('/ready').catch(() => ({ status: 0 }))).status, { timeout: 30_000 }).toBe(200);
  }

  it('stays the same across a SIGHUP adding or removing a user and across a restart, and differs per username', { timeout: 90_000 }, async () => {
    const a = await BrokerProcess.start({ args: ['--config', config, '--kafka-port', '0', '--log-level', 'info'] });
    brokers.push(a);
    await ready(a);
    const before = await salts(a.kafkaPort);
    expect(before.ghost.salt).not.toBe(before.other.salt);
    expect(before.ghost.iterations).toBe(before.app.iterations);
    addUser(config, 'bob', ['topic.read']);
    await reload(a);
    expect(await salts(a.kafkaPort)).toEqual(before);
    removeUser(config, 'bob');
    await reload(a);
    expect(await salts(a.kafkaPort)).toEqual(before);
    await a.restart();
    await ready(a);
    expect(await salts(a.kafkaPort)).toEqual(before);
    // The key is kept in the data directory, private to the broker's user (docs/security.md, "Secrets").
    expect(fs.statSync(path.join(a.dataDir, 'scram-stand-in.key')).mode & 0o777).toBe(0o600);
  });

  it('is the same on every broker of a cluster, also after one restarts', { timeout: 180_000 }, async () => {
    const clusterConfig = path.join(dir, 'cluster.json');
    fs.writeFileSync(clusterConfig, JSON.stringify({ authentication: true, interBrokerPrincipal: 'broker' }));
    const brokerToken = addUser(clusterConfig, 'broker', ['admin']);
    const adminToken = addUser(clusterConfig, 'admin', ['admin']);
    addUser(clusterConfig, 'app', ['topic.read']);
    const args = ['--config', clusterConfig, '--inter-broker-token', brokerToken, '--kafka-port', '0'];
    cluster = await TestCluster.start(2, args, {}, { clientAuth: { principal: 'admin', token: adminToken } });
    const [b0, b1] = cluster.brokers as [BrokerProcess, BrokerProcess];
    const first = await salts(b0.kafkaPort);
    expect(await salts(b1.kafkaPort)).toEqual(first);
    await b1.restart();
    await ready(b1);
    expect(await salts(b1.kafkaPort)).toEqual(first);
  });
});
