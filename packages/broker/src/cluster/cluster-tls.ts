import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type tls from 'node:tls';
import type { BrokerConfig } from '../common/config.js';

/**
 * TLS of a cluster (docs/operations.md "Securing a cluster"): what a broker presents to and trusts in its
 * peers, how it recognises a peer among the connections of its one listener, and its etcd credentials.
 * Every check that a combination of settings makes sense is here, so a broker refuses a half-secured
 * cluster at start rather than running one.
 */

const CLUSTER_ONLY = ['interBrokerTlsCa', 'interBrokerTlsCert', 'interBrokerTlsKey', 'etcdTlsCa', 'etcdTlsCert', 'etcdTlsKey'] as const;

export interface PeerTls {
  /** Options of this broker's connections to its peers: their listener must chain to the inter-broker CA. */
  client: tls.ConnectionOptions;
  /** The inter-broker CA bundle (PEM), which the listener also accepts client certificates from. */
  ca: Buffer;
  /** Whether a verified client certificate was issued by a certificate of the inter-broker CA bundle. */
  isPeer(cert: X509Certificate | undefined): boolean;
}

export interface EtcdCredentials {
  rootCertificate: Buffer;
  privateKey?: Buffer;
  certChain?: Buffer;
}

/** A file a setting names, or `invalid config: <setting>: cannot read <file> (<code>)`. */
export function read(key: string, file: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new Error(`invalid config: ${key}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
}

/** The certificates of a PEM bundle (at least one, or the bundle is refused). */
export function parseBundle(key: string, file: string, pem: Buffer): X509Certificate[] {
  const blocks = pem.toString('utf8').match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  const certs: X509Certificate[] = [];
  for (const block of blocks) {
    try {
      certs.push(new X509Certificate(block));
    } catch (err) {
      throw new Error(`invalid config: ${key}: ${file} holds a certificate that cannot be parsed (${(err as Error).message})`);
    }
  }
  if (certs.length === 0) throw new Error(`invalid config: ${key}: ${file} holds no PEM certificate`);
  return certs;
}

function pair(config: BrokerConfig, cert: keyof BrokerConfig, key: keyof BrokerConfig): void {
  if ((config[cert] === undefined) !== (config[key] === undefined)) throw new Error(`invalid config: ${cert} and ${key} must be given together`);
}

/**
 * The inter-broker TLS of a cluster broker, or undefined for a plain one. A listener with a certificate
 * needs the inter-broker CA (trust in peers is never implied), and inter-broker TLS needs the listener's
 * certificate (peers connect to that one listener, which then refuses plain TCP). Standalone brokers
 * refuse every cluster TLS key.
 */
export function peerTls(config: BrokerConfig): PeerTls | undefined {
  if (!config.cluster) {
    const set = CLUSTER_ONLY.find((k) => config[k] !== undefined);
    if (set) throw new Error(`invalid config: ${set} is for cluster mode (--cluster)`);
    return undefined;
  }
  pair(config, 'interBrokerTlsCert', 'interBrokerTlsKey');
  const wanted = config.interBrokerTlsCa !== undefined || config.interBrokerTlsCert !== undefined;
  if (config.tlsCert === undefined) {
    if (wanted) throw new Error('invalid config: inter-broker TLS needs the listener to speak TLS too (tlsCert and tlsKey): peers connect to that listener');
    return undefined;
  }
  if (config.interBrokerTlsCa === undefined) {
    throw new Error('invalid config: a cluster broker with tlsCert needs interBrokerTlsCa, the CA its peers\' certificates are checked against');
  }
  const ca = read('interBrokerTlsCa', config.interBrokerTlsCa);
  const authorities = parseBundle('interBrokerTlsCa', config.interBrokerTlsCa, ca);
  const certFile = config.interBrokerTlsCert ?? config.tlsCert;
  const keyFile = config.interBrokerTlsKey ?? config.tlsKey;
  if (keyFile === undefined) throw new Error('invalid config: tlsCert and tlsKey must be given together');
  const cert = read(config.interBrokerTlsCert === undefined ? 'tlsCert' : 'interBrokerTlsCert', certFile);
  const key = read(config.interBrokerTlsKey === undefined ? 'tlsKey' : 'interBrokerTlsKey', keyFile);
  return {
    // The server name checked is the host a peer is connected to: its advertised host (an IP needs an IP SAN).
    client: { ca, cert, key, minVersion: 'TLSv1.2' },
    ca,
    isPeer: (leaf) => leaf !== undefined && authorities.some((a) => leaf.checkIssued(a) && leaf.verify(a.publicKey)),
  };
}

/**
 * etcd endpoints as URLs: `https://` when etcd TLS is configured (a bare `host:port` gets it; an explicit
 * `http://` is refused: the cluster's state would cross the network in the clear), `http://` otherwise.
 */
export function etcdEndpoints(config: BrokerConfig): string[] {
  const secure = config.etcdTlsCa !== undefined;
  const endpoints = (config.etcd ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((e) => (e.includes('://') ? e : `${secure ? 'https' : 'http'}://${e}`));
  if (secure) {
    const plain = endpoints.find((e) => !e.startsWith('https://'));
    if (plain) throw new Error(`invalid config: etcdTlsCa is set but etcd endpoint ${plain} is not https://`);
  }
  return endpoints;
}

/** The etcd client's TLS credentials, or undefined for plain etcd. */
export function etcdCredentials(config: BrokerConfig): EtcdCredentials | undefined {
  pair(config, 'etcdTlsCert', 'etcdTlsKey');
  if (config.etcdTlsCa === undefined) {
    if (config.etcdTlsCert !== undefined) throw new Error('invalid config: etcdTlsCert needs etcdTlsCa (the CA etcd\'s certificate is checked against)');
    return undefined;
  }
  const rootCertificate = read('etcdTlsCa', config.etcdTlsCa);
  parseBundle('etcdTlsCa', config.etcdTlsCa, rootCertificate);
  if (config.etcdTlsCert === undefined || config.etcdTlsKey === undefined) return { rootCertificate };
  return { rootCertificate, certChain: read('etcdTlsCert', config.etcdTlsCert), privateKey: read('etcdTlsKey', config.etcdTlsKey) };
}
