import { createPrivateKey } from 'node:crypto';
import tls from 'node:tls';
import type { BrokerConfig } from '../common/config.js';
import { parseBundle, read } from '../cluster/cluster-tls.js';

/**
 * The client listeners' TLS files (`tlsCert`, `tlsKey`, `tlsCa`; the main and the Kafka port share them),
 * read and checked once at start: each problem names its setting and file, where the listener's own
 * error said 'error:0480006C:PEM routines::no start line' or ENOENT and named neither, and a CA file that
 * held no certificate was taken (client certificates then never verified).
 */
export interface ListenerTlsFiles {
  cert: Buffer;
  key: Buffer;
  /** The clients' CA bundle (mTLS), when `tlsCa` is set. */
  ca: Buffer | undefined;
}

/** The listener's TLS files, or undefined for plain TCP; throws `invalid config: <setting>: ...`. */
export function listenerTlsFiles(c: BrokerConfig): ListenerTlsFiles | undefined {
  if ((c.tlsCert === undefined) !== (c.tlsKey === undefined)) throw new Error('invalid config: tlsCert and tlsKey must be given together');
  if (c.tlsCa !== undefined && c.tlsCert === undefined) throw new Error('invalid config: tlsCa needs tlsCert and tlsKey: without them the listener does not speak TLS');
  if (c.tlsRequireClientCert && (c.tlsCert === undefined || c.tlsCa === undefined)) throw new Error('invalid config: tlsRequireClientCert needs tlsCert, tlsKey and tlsCa');
  if (c.tlsCert === undefined || c.tlsKey === undefined) return undefined;
  const cert = read('tlsCert', c.tlsCert);
  parseBundle('tlsCert', c.tlsCert, cert);
  const key = read('tlsKey', c.tlsKey);
  try {
    createPrivateKey(key);
  } catch (err) {
    // The message is OpenSSL's reason; the key itself is never quoted.
    throw new Error(`invalid config: tlsKey: ${c.tlsKey} holds no private key that can be read (${(err as Error).message})`);
  }
  try {
    tls.createSecureContext({ cert, key });
  } catch (err) {
    throw new Error(`invalid config: tlsKey: ${c.tlsKey} is not the key of tlsCert ${c.tlsCert} (${(err as Error).message})`);
  }
  let ca: Buffer | undefined;
  if (c.tlsCa !== undefined) {
    ca = read('tlsCa', c.tlsCa);
    parseBundle('tlsCa', c.tlsCa, ca);
  }
  return { cert, key, ca };
}

/** The listener options shared by the main and the Kafka port. */
export function listenerTlsOptions(files: ListenerTlsFiles, c: BrokerConfig): tls.TlsOptions {
  return { cert: files.cert, key: files.key, ca: files.ca, minVersion: 'TLSv1.2', requestCert: files.ca !== undefined, rejectUnauthorized: c.tlsRequireClientCert };
}
