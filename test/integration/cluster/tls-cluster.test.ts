/**
 * TLS everywhere in cluster mode (docs/operations.md "Securing a cluster"), with real certificates made
 * by openssl, a real etcd serving TLS only with client certificates required, and three broker processes,
 * each with its own certificate: the SDK with the CA produces (acks=all) and consumes through the
 * replicated cluster; plain TCP is refused by the brokers and by etcd; broker-to-broker commands need a
 * certificate of the inter-broker CA; brokers with another CA's certificates do not get in, while the
 * cluster keeps serving; a kill -9 of a leader is noticed by the liveness probe over TLS and fails over.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Consumer } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import { Connection } from 'tributary-protocol/connection.js';
import { createEtcdClient } from 'tributary-broker/cluster/etcd-client.js';
import { FAST_CLUSTER_ARGS, TestCluster } from '../../helpers/cluster.js';
import type { EtcdTlsFiles } from '../../helpers/etcd.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { removeDir, tempDir } from '../../helpers/util.js';
import { addUser, makeCa, makeCert, type Pem } from '../security/pki.js';

const TOPIC = 'secure';
const PARTITIONS = 3;

describe('a cluster with TLS to clients, between brokers and to etcd', () => {
  let dir: string;
  let ca: Pem;
  let foreignCa: Pem;
  let etcdCa: Pem;
  let etcdClient: Pem;
  let etcdFiles: EtcdTlsFiles;
  let brokerCerts: Pem[];
  let cluster: TestCluster;
  const extra: BrokerProcess[] = [];
  const clients: Array<{ close(): Promise<void> }> = [];

  /** The TLS flags of a cluster broker: its listener certificate, the CA of its peers, its etcd credentials. */
  const tlsArgs = (cert: Pem, peerCa: Pem, etcdCert: Pem) => [
    ...['--tls-cert', cert.certFile, '--tls-key', cert.keyFile, '--inter-broker-tls-ca', peerCa.certFile],
    ...['--etcd-tls-ca', etcdCa.certFile, '--etcd-tls-cert', etcdCert.certFile, '--etcd-tls-key', etcdCert.keyFile],
  ];

  /** Produces `n` records with acks=all through the SDK (CA only, as a client would) and consumes them all. */
  async function roundTrip(tag: string, n: number): Promise<void> {
    const producer = new Producer({ brokers: cluster.addresses, tls: { ca: ca.cert } });
    clients.push(producer);
    const acks = await producer.send({ topic: TOPIC, messages: Array.from({ length: n }, (_, i) => ({ key: `${tag}-${i}`, value: `${tag}-${i}` })) });
    expect(acks).toHaveLength(n);
    await producer.close();
    const consumer = new Consumer({ brokers: cluster.addresses, tls: { ca: ca.cert }, groupId: `g-${tag}`, topic: TOPIC, autoOffsetReset: 'earliest' });
    clients.push(consumer);
    const seen = new Set<string>();
    for await (const m of consumer) {
      const v = m.value.toString();
      if (v.startsWith(`${tag}-`)) seen.add(v);
      if (seen.size === n) break;
    }
    await consumer.close();
    expect(seen.size).toBe(n);
  }

  beforeAll(async () => {
    dir = await tempDir('tributary-cluster-tls-');
    ca = makeCa(dir, 'broker-ca');
    foreignCa = makeCa(dir, 'foreign-ca');
    etcdCa = makeCa(dir, 'etcd-ca');
    const etcdServer = makeCert(dir, etcdCa, 'etcd-server', 'etcd');
    etcdClient = makeCert(dir, etcdCa, 'etcd-client', 'tributary');
    etcdFiles = { caFile: etcdCa.certFile, certFile: etcdServer.certFile, keyFile: etcdServer.keyFile, clientCertFile: etcdClient.certFile, clientKeyFile: etcdClient.keyFile };
    // Brokers advertise 127.0.0.1: their certificates carry it as an IP SAN, which peers check.
    brokerCerts = [0, 1, 2].map((id) => makeCert(dir, ca, `broker-${id}`, `broker-${id}`));
    cluster = await TestCluster.start(3, [], {}, { etcd: etcdFiles, argsFor: (id) => tlsArgs(brokerCerts[id]!, ca, etcdClient), clientTls: { ca: ca.cert } });
    const admin = await cluster.connect(0);
    await admin.command('CREATE', { topic: TOPIC, partitions: PARTITIONS, replication_factor: 3 });
    await cluster.waitFor('leaders and full ISRs', async () => {
      const ps = (await cluster.status()).partitions.filter((p) => p.topic === TOPIC);
      return ps.length === PARTITIONS && ps.every((p) => p.leader >= 0 && p.isr.length === 3);
    });
  }, 120_000);

  afterAll(async () => {
    await Promise.allSettled(clients.map((c) => c.close()));
    await Promise.allSettled(extra.map((b) => b.dispose()));
    await cluster?.dispose();
    if (dir) await removeDir(dir);
  });

  it('replicates with acks=all, and the SDK with the CA produces and consumes through it', async () => {
    await roundTrip('first', 60);
    // acks=all answered only once every in-sync replica had the records: the followers fetched over TLS.
    const ps = (await cluster.status()).partitions.filter((p) => p.topic === TOPIC);
    expect(ps.every((p) => p.isr.length === 3)).toBe(true);
  });

  it('refuses plain TCP on every broker port, and etcd refuses plain and certificate-less clients', async () => {
    for (const b of cluster.brokers) {
      await expect(Connection.connect({ host: '127.0.0.1', port: b.port, connectTimeoutMs: 3000 })).rejects.toMatchObject({ code: 'connection_lost', fields: { cause: 'tls_required' } });
    }
    const port = cluster.etcd.clientPort;
    const plain = createEtcdClient({ endpoints: [`http://127.0.0.1:${port}`], requestTimeoutMs: 3000 });
    const noCert = createEtcdClient({ endpoints: [`https://127.0.0.1:${port}`], requestTimeoutMs: 3000, credentials: { rootCertificate: fs.readFileSync(etcdCa.certFile) } });
    const good = createEtcdClient({
      endpoints: [`https://127.0.0.1:${port}`],
      requestTimeoutMs: 3000,
      credentials: { rootCertificate: fs.readFileSync(etcdCa.certFile), certChain: fs.readFileSync(etcdClient.certFile), privateKey: fs.readFileSync(etcdClient.keyFile) },
    });
    try {
      await expect(plain.get(`${cluster.prefix}x`).string()).rejects.toBeDefined();
      await expect(noCert.get(`${cluster.prefix}x`).string()).rejects.toBeDefined();
      // The same read with the client certificate works: the refusals above are etcd's TLS, not a dead etcd.
      expect(await good.getAll().prefix(cluster.prefix).keys()).not.toHaveLength(0);
    } finally {
      plain.close();
      noCert.close();
      good.close();
    }
  });

  it('takes broker-to-broker commands only from a certificate of the inter-broker CA, and refuses certificates of other CAs', async () => {
    const asClient = await Connection.connect({ host: '127.0.0.1', port: cluster.broker(0).port, tls: { ca: ca.cert }, connectTimeoutMs: 3000 });
    clients.push(asClient);
    await expect(asClient.command('LEADER_EPOCHS', { topic: TOPIC, partition: 0, leader_epoch: 0 })).rejects.toMatchObject({ code: 'NOT_AUTHORIZED_FOR_OPERATION' });
    // Other commands are served to the client as before.
    expect(await asClient.command('METADATA', { topic: TOPIC })).toMatch(/^OK/);
    const broker1 = brokerCerts[1]!;
    const asPeer = await Connection.connect({ host: '127.0.0.1', port: cluster.broker(0).port, tls: { ca: ca.cert, cert: broker1.cert, key: broker1.key }, connectTimeoutMs: 3000 });
    clients.push(asPeer);
    const reply = await asPeer.command('LEADER_EPOCHS', { topic: TOPIC, partition: 0, leader_epoch: 0 }).catch((err: { code?: string }) => `ERROR ${err.code}`);
    expect(reply).not.toMatch(/NOT_AUTHORIZED/);
    // A certificate from another CA is refused, though the client trusts the broker.
    const foreign = makeCert(dir, foreignCa, 'foreign-client', 'broker-1');
    await expect(
      Connection.connect({ host: '127.0.0.1', port: cluster.broker(0).port, tls: { ca: ca.cert, cert: foreign.cert, key: foreign.key }, connectTimeoutMs: 3000 }),
    ).rejects.toMatchObject({ code: 'connection_lost' });
  });

  it('a broker whose etcd client certificate another CA issued cannot register; the cluster keeps serving', async () => {
    const cert = makeCert(dir, foreignCa, 'intruder-a', 'broker-3');
    const etcdCert = makeCert(dir, foreignCa, 'intruder-a-etcd', 'tributary');
    const intruder = await BrokerProcess.start({
      args: [
        ...['--cluster', '--etcd', cluster.etcd.endpoints.join(','), '--etcd-prefix', cluster.prefix, '--broker-id', '3', '--internal-replication-factor', '3'],
        ...FAST_CLUSTER_ARGS,
        ...['--startup-timeout-ms', '8000'],
        ...tlsArgs(cert, foreignCa, etcdCert),
      ],
      clientTls: { ca: foreignCa.cert },
    });
    extra.push(intruder);
    // Its start fails (etcd refuses its certificate), it never registers, and the cluster serves on.
    expect(intruder.stdout).toMatch(/NOT READY/);
    expect((await cluster.status()).brokers.map((b) => b.id).sort()).toEqual([0, 1, 2]);
    await roundTrip('after-a', 20);
    await intruder.dispose();
  });

  it('a broker with etcd access but another CA\'s certificate registers, yet gets no traffic from its peers nor they from it', async () => {
    // The worst case: etcd lets it in and it trusts the real CA, but its own certificate is foreign.
    const cert = makeCert(dir, foreignCa, 'intruder-b', 'broker-3');
    const intruder = await BrokerProcess.start({
      args: [
        ...['--cluster', '--etcd', cluster.etcd.endpoints.join(','), '--etcd-prefix', cluster.prefix, '--broker-id', '3', '--internal-replication-factor', '3'],
        ...FAST_CLUSTER_ARGS,
        ...tlsArgs(cert, ca, etcdClient),
      ],
      clientTls: { ca: foreignCa.cert },
    });
    extra.push(intruder);
    await cluster.waitFor('the intruder registered', async () => (await cluster.status()).brokers.some((b) => b.id === 3));
    // Its connections to the peers are refused (its certificate does not verify), and theirs to it fail
    // (its listener's certificate does not verify either): both show in the good brokers' logs.
    await cluster.waitFor('the good brokers refused it and failed to reach it', async () =>
      cluster.brokers.some((b) => b.stderr.includes('refused a client certificate that does not verify')) &&
      cluster.brokers.some((b) => b.stderr.includes('liveness probe: TLS handshake with broker failed')),
    );
    const ps = (await cluster.status()).partitions.filter((p) => p.topic === TOPIC);
    expect(ps.every((p) => !p.replicas.includes(3) && !p.isr.includes(3) && p.leader !== 3)).toBe(true);
    await roundTrip('after-b', 20);
    await intruder.dispose();
    await cluster.waitFor('the intruder gone', async () => !(await cluster.status()).brokers.some((b) => b.id === 3));
  });

  it('a leader killed with kill -9 is found dead by the liveness probe over TLS, and its partitions move', async () => {
    const before = await cluster.leaderOf(TOPIC, 0);
    // Not the broker the helpers ask for status, so status keeps answering.
    const victim = before.id;
    const killedAt = Date.now();
    await cluster.broker(victim).kill('SIGKILL');
    const survivors = cluster.brokers.filter((_, id) => id !== victim);
    const via = [0, 1, 2].find((id) => id !== victim)!;
    await cluster.waitFor('a new leader of partition 0', async () => {
      const s = await cluster.status(via);
      const p = s.partitions.find((x) => x.topic === TOPIC && x.partition === 0);
      return p !== undefined && p.leader >= 0 && p.leader !== victim && p.leader_epoch > before.epoch;
    });
    // A figure for the report, not asserted (shared CPU): from the kill to the new leader seen in etcd.
    console.log(`TLS cluster: partition 0 led by broker ${victim} moved ${Date.now() - killedAt} ms after its kill -9 (lease TTL 2 s)`);
    // The probe, not the lease, noticed: its connection closed and a new TLS connection was refused.
    expect(survivors.some((b) => b.stderr.includes('broker process is gone (connection refused)'))).toBe(true);
    await roundTrip('after-kill', 20);
  });
});

/**
 * The same with authentication on: brokers AUTH to each other as the inter-broker principal over TLS,
 * clients authenticate with tokens or their certificate's CN, and a principal with `admin` but no broker
 * certificate still cannot send broker-to-broker commands.
 */
describe('a TLS cluster with authentication on', () => {
  let dir: string;
  let ca: Pem;
  let clientsCa: Pem;
  let cluster: TestCluster;
  let appToken: string;
  let opsToken: string;
  const clients: Array<{ close(): Promise<void> }> = [];

  beforeAll(async () => {
    dir = await tempDir('tributary-cluster-tls-auth-');
    ca = makeCa(dir, 'broker-ca');
    clientsCa = makeCa(dir, 'clients-ca');
    const etcdCa = makeCa(dir, 'etcd-ca');
    const etcdServer = makeCert(dir, etcdCa, 'etcd-server', 'etcd');
    const etcdClient = makeCert(dir, etcdCa, 'etcd-client', 'tributary');
    // The helpers' own connections authenticate by certificate: CN=ops, a user with admin.
    const ops = makeCert(dir, clientsCa, 'ops', 'ops');
    const config = path.join(dir, 'broker.json');
    fs.writeFileSync(config, JSON.stringify({ authentication: true, interBrokerPrincipal: 'broker' }));
    const brokerToken = addUser(config, 'broker', ['admin']);
    opsToken = addUser(config, 'ops', ['admin']);
    appToken = addUser(config, 'app', ['topic.read', 'topic.write', 'group']);
    const certs = [0, 1, 2].map((id) => makeCert(dir, ca, `broker-${id}`, `broker-${id}`));
    cluster = await TestCluster.start(3, ['--config', config, '--inter-broker-token', brokerToken, '--tls-ca', clientsCa.certFile], {}, {
      etcd: { caFile: etcdCa.certFile, certFile: etcdServer.certFile, keyFile: etcdServer.keyFile, clientCertFile: etcdClient.certFile, clientKeyFile: etcdClient.keyFile },
      argsFor: (id) => [
        ...['--tls-cert', certs[id]!.certFile, '--tls-key', certs[id]!.keyFile, '--inter-broker-tls-ca', ca.certFile],
        ...['--etcd-tls-ca', etcdCa.certFile, '--etcd-tls-cert', etcdClient.certFile, '--etcd-tls-key', etcdClient.keyFile],
      ],
      clientTls: { ca: ca.cert, cert: ops.cert, key: ops.key },
    });
  }, 120_000);

  afterAll(async () => {
    await Promise.allSettled(clients.map((c) => c.close()));
    await cluster?.dispose();
    if (dir) await removeDir(dir);
  });

  it('replicates the internal topics and a topic with acks=all between authenticated brokers; an app with a token produces and consumes', async () => {
    const admin = await cluster.connect(0);
    await admin.command('CREATE', { topic: TOPIC, partitions: PARTITIONS, replication_factor: 3 });
    await cluster.waitFor('leaders and full ISRs', async () => {
      const ps = (await cluster.status()).partitions.filter((p) => p.topic === TOPIC || p.topic === '__consumer_offsets');
      return ps.length > PARTITIONS && ps.every((p) => p.leader >= 0 && p.isr.length === 3);
    });
    const auth = { principal: 'app', token: appToken };
    const producer = new Producer({ brokers: cluster.addresses, tls: { ca: ca.cert }, auth });
    clients.push(producer);
    const acks = await producer.send({ topic: TOPIC, messages: Array.from({ length: 30 }, (_, i) => ({ key: `k${i}`, value: `v${i}` })) });
    expect(acks).toHaveLength(30);
    const consumer = new Consumer({ brokers: cluster.addresses, tls: { ca: ca.cert }, auth, groupId: 'g-auth', topic: TOPIC, autoOffsetReset: 'earliest' });
    clients.push(consumer);
    const seen = new Set<string>();
    for await (const m of consumer) {
      seen.add(m.value.toString());
      if (seen.size === 30) break;
    }
    expect(seen.size).toBe(30);
  });

  it('an admin without a broker certificate cannot send broker-to-broker commands', async () => {
    const c = await Connection.connect({ host: '127.0.0.1', port: cluster.broker(0).port, tls: { ca: ca.cert }, auth: { principal: 'ops', token: opsToken }, connectTimeoutMs: 3000 });
    clients.push(c);
    expect(await c.command('CLUSTER_STATUS')).toMatch(/"status":"OK"/); // admin otherwise
    await expect(c.command('LEADER_EPOCHS', { topic: TOPIC, partition: 0, leader_epoch: 0 })).rejects.toMatchObject({ code: 'NOT_AUTHORIZED_FOR_OPERATION', fields: { permission: 'broker' } });
  });
});
