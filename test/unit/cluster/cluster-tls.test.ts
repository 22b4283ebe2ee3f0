/**
 * The settings of a TLS cluster (cluster-tls.ts): every half-secured or contradictory combination is
 * refused with a sentence naming the keys, and peers are told apart from other certificate holders by
 * the CA that issued their certificate. Certificates are real (openssl, test/integration/security/pki.ts).
 */
import { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { etcdCredentials, etcdEndpoints, peerTls } from 'tributary-broker/cluster/cluster-tls.js';
import { type BrokerConfigInput, resolveConfig } from 'tributary-broker/common/config.js';
import { makeCa, makeCert, type Pem } from '../../integration/security/pki.js';
import { removeDir, tempDir } from '../../helpers/util.js';

describe('cluster TLS settings', () => {
  let dir: string;
  let ca: Pem;
  let other: Pem;
  let broker: Pem;
  let foreign: Pem;

  beforeAll(async () => {
    dir = await tempDir('tributary-cluster-tls-unit-');
    ca = makeCa(dir, 'ca');
    other = makeCa(dir, 'other');
    broker = makeCert(dir, ca, 'broker', 'broker-0');
    foreign = makeCert(dir, other, 'foreign', 'broker-0');
  });

  afterAll(async () => {
    if (dir) await removeDir(dir);
  });

  const cluster = (extra: BrokerConfigInput) => resolveConfig({ cluster: true, etcd: '127.0.0.1:2379', ...extra });
  const listener = () => ({ tlsCert: broker.certFile, tlsKey: broker.keyFile });

  it('a plain cluster has no peer TLS; a cluster with a listener certificate needs the inter-broker CA', () => {
    expect(peerTls(cluster({}))).toBeUndefined();
    expect(() => peerTls(cluster(listener()))).toThrow(/needs interBrokerTlsCa/);
    expect(() => peerTls(cluster({ interBrokerTlsCa: ca.certFile }))).toThrow(/needs the listener to speak TLS too/);
    expect(() => peerTls(cluster({ ...listener(), interBrokerTlsCa: ca.certFile, interBrokerTlsCert: broker.certFile }))).toThrow(
      /interBrokerTlsCert and interBrokerTlsKey must be given together/,
    );
    expect(() => peerTls(cluster({ ...listener(), interBrokerTlsCa: path.join(dir, 'missing.crt') }))).toThrow(/interBrokerTlsCa: cannot read .*missing\.crt \(ENOENT\)/);
    fs.writeFileSync(path.join(dir, 'empty.crt'), 'not a certificate\n');
    expect(() => peerTls(cluster({ ...listener(), interBrokerTlsCa: path.join(dir, 'empty.crt') }))).toThrow(/holds no PEM certificate/);
  });

  it('a standalone broker refuses every cluster TLS key', () => {
    for (const key of ['interBrokerTlsCa', 'interBrokerTlsCert', 'interBrokerTlsKey', 'etcdTlsCa', 'etcdTlsCert', 'etcdTlsKey']) {
      expect(() => peerTls(resolveConfig({ [key]: ca.certFile }))).toThrow(new RegExp(`${key} is for cluster mode`));
    }
  });

  it('peers present their own certificate (the listener\'s by default) and trust only the inter-broker CA', () => {
    const t = peerTls(cluster({ ...listener(), interBrokerTlsCa: ca.certFile }))!;
    expect(String(t.client.cert)).toBe(broker.cert);
    expect(String(t.client.ca)).toBe(ca.cert);
    const own = peerTls(cluster({ ...listener(), interBrokerTlsCa: ca.certFile, interBrokerTlsCert: foreign.certFile, interBrokerTlsKey: foreign.keyFile }))!;
    expect(String(own.client.cert)).toBe(foreign.cert);
  });

  it('a peer is a certificate the inter-broker CA issued; another CA\'s, or none, is not', () => {
    const t = peerTls(cluster({ ...listener(), interBrokerTlsCa: ca.certFile }))!;
    expect(t.isPeer(new X509Certificate(broker.cert))).toBe(true);
    expect(t.isPeer(new X509Certificate(foreign.cert))).toBe(false);
    expect(t.isPeer(undefined)).toBe(false);
    // A bundle of several CAs: a certificate of any of them is a peer.
    const bundle = path.join(dir, 'bundle.crt');
    fs.writeFileSync(bundle, other.cert + ca.cert);
    expect(peerTls(cluster({ ...listener(), interBrokerTlsCa: bundle }))!.isPeer(new X509Certificate(broker.cert))).toBe(true);
  });

  it('etcd TLS: https endpoints, a client certificate only with the CA, never plain http', () => {
    expect(etcdEndpoints(cluster({}))).toEqual(['http://127.0.0.1:2379']);
    expect(etcdCredentials(cluster({}))).toBeUndefined();
    expect(etcdEndpoints(cluster({ etcdTlsCa: ca.certFile }))).toEqual(['https://127.0.0.1:2379']);
    expect(() => etcdEndpoints(cluster({ etcd: 'http://127.0.0.1:2379', etcdTlsCa: ca.certFile }))).toThrow(/etcd endpoint http:\/\/127\.0\.0\.1:2379 is not https/);
    expect(() => etcdCredentials(cluster({ etcdTlsCert: broker.certFile, etcdTlsKey: broker.keyFile }))).toThrow(/etcdTlsCert needs etcdTlsCa/);
    expect(() => etcdCredentials(cluster({ etcdTlsCa: ca.certFile, etcdTlsCert: broker.certFile }))).toThrow(/etcdTlsCert and etcdTlsKey must be given together/);
    const creds = etcdCredentials(cluster({ etcdTlsCa: ca.certFile, etcdTlsCert: broker.certFile, etcdTlsKey: broker.keyFile }))!;
    expect(String(creds.rootCertificate)).toBe(ca.cert);
    expect(String(creds.certChain)).toBe(broker.cert);
    expect(String(creds.privateKey)).toBe(broker.key);
  });
});
