/**
 * Certificates for `tributary dev-cluster --tls` (docs/operations.md "Securing a cluster"): a CA for the
 * brokers (clients trust it), a certificate per broker, and a second CA for etcd with etcd's server
 * certificate and the brokers' etcd client certificate. node:crypto cannot issue X.509 certificates, so
 * they are made with the `openssl` command; without it dev-cluster --tls stops with a clear error.
 * Files that exist already (a kept --data-dir) are used again, so clients keep their CA across runs.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/** Every name a local client or peer may use: the loopback IP (checked against an IP SAN) and localhost. */
const SAN = 'subjectAltName=IP:127.0.0.1,DNS:localhost';
const DAYS = '365';
const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

export interface CertFiles {
  cert: string;
  key: string;
}

export interface DevPki {
  dir: string;
  /** The brokers' CA: what clients pass as `--ca` / `tls.ca`, and every broker's `--inter-broker-tls-ca`. */
  ca: string;
  brokers: CertFiles[];
  etcdCa: string;
  etcdServer: CertFiles;
  /** The client certificate brokers present to etcd. */
  etcdClient: CertFiles;
}

function openssl(args: string[]): void {
  try {
    execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: Buffer };
    if (e.code === 'ENOENT') {
      throw new Error('dev-cluster --tls makes its certificates with the openssl command, which was not found: install it (e.g. `apt-get install openssl`)');
    }
    throw new Error(`openssl ${args[0]} failed: ${e.stderr?.toString().trim() || e.message}`);
  }
}

function makeCa(dir: string, name: string, cn: string): string {
  const cert = path.join(dir, `${name}.crt`);
  const key = path.join(dir, `${name}.key`);
  if (!existsSync(cert) || !existsSync(key)) openssl(['req', '-x509', ...EC, '-keyout', key, '-out', cert, '-days', DAYS, '-subj', `/CN=${cn}`]);
  return cert;
}

function makeCert(dir: string, ca: string, name: string, cn: string): CertFiles {
  const cert = path.join(dir, `${name}.crt`);
  const key = path.join(dir, `${name}.key`);
  if (existsSync(cert) && existsSync(key)) return { cert, key };
  const csr = path.join(dir, `${name}.csr`);
  const ext = path.join(dir, `${name}.ext`);
  writeFileSync(ext, `${SAN}\n`);
  openssl(['req', ...EC, '-keyout', key, '-out', csr, '-subj', `/CN=${cn}`]);
  const caKey = ca.replace(/\.crt$/, '.key');
  openssl(['x509', '-req', '-in', csr, '-CA', ca, '-CAkey', caKey, '-CAcreateserial', '-out', cert, '-days', DAYS, '-extfile', ext]);
  return { cert, key };
}

/** Makes (or reuses) the certificates of a local cluster of `brokers` brokers under `dir`. */
export function makeDevPki(dir: string, brokers: number): DevPki {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const ca = makeCa(dir, 'ca', 'tributary dev-cluster CA');
  const etcdCa = makeCa(dir, 'etcd-ca', 'tributary dev-cluster etcd CA');
  return {
    dir,
    ca,
    brokers: Array.from({ length: brokers }, (_, id) => makeCert(dir, ca, `broker-${id}`, `broker-${id}`)),
    etcdCa,
    etcdServer: makeCert(dir, etcdCa, 'etcd', 'etcd'),
    etcdClient: makeCert(dir, etcdCa, 'etcd-client', 'tributary-broker'),
  };
}
