import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { CLI } from '../../helpers/launcher.js';

/** Test PKI with openssl: CAs, a server certificate for 127.0.0.1 and client certificates, as files in `dir`. */

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

function openssl(args: string[]): void {
  execFileSync('openssl', args, { stdio: 'ignore' });
}

export interface Pem {
  cert: string;
  key: string;
  certFile: string;
  keyFile: string;
}

function read(certFile: string, keyFile: string): Pem {
  return { cert: fs.readFileSync(certFile, 'utf8'), key: fs.readFileSync(keyFile, 'utf8'), certFile, keyFile };
}

export function makeCa(dir: string, name: string): Pem {
  const keyFile = path.join(dir, `${name}.key`);
  const certFile = path.join(dir, `${name}.crt`);
  openssl(['req', '-x509', ...EC, '-keyout', keyFile, '-out', certFile, '-days', '1', '-subj', `/CN=${name}`]);
  return read(certFile, keyFile);
}

/**
 * A certificate for CN=`cn` signed by `ca`, with subject alternative names `san` (default the loopback IP
 * and localhost: a peer or client checks the host it connects to, an IP address against an IP SAN).
 */
export function makeCert(dir: string, ca: Pem, name: string, cn: string, san = 'IP:127.0.0.1,DNS:localhost'): Pem {
  const keyFile = path.join(dir, `${name}.key`);
  const csr = path.join(dir, `${name}.csr`);
  const certFile = path.join(dir, `${name}.crt`);
  const ext = path.join(dir, `${name}.ext`);
  fs.writeFileSync(ext, `subjectAltName=${san}\n`);
  openssl(['req', ...EC, '-keyout', keyFile, '-out', csr, '-subj', `/CN=${cn}`]);
  openssl(['x509', '-req', '-in', csr, '-CA', ca.certFile, '-CAkey', ca.keyFile, '-CAcreateserial', '-out', certFile, '-days', '1', '-extfile', ext]);
  return read(certFile, keyFile);
}

/** `tributary user add` into a config file; returns the token it generated. */
export function addUser(config: string, principal: string, permissions: string[]): string {
  const out = execFileSync(process.execPath, [CLI, 'user', 'add', principal, '--permissions', permissions.join(',') || ',', '--config', config], { encoding: 'utf8' });
  const m = /^token: (\S+)$/m.exec(out);
  if (!m) throw new Error(`no token in: ${out}`);
  return m[1]!;
}

export function removeUser(config: string, principal: string): void {
  execFileSync(process.execPath, [CLI, 'user', 'remove', principal, '--config', config], { encoding: 'utf8' });
}
