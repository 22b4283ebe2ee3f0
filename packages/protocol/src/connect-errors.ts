/**
 * Why a connection to a broker failed, as a sentence with a hint: a refused port, an unknown host, the
 * health port, plain TCP to a TLS listener and an untrusted certificate each get their own message
 * (docs/sdk.md, "Errors and retries"). The error stays `connection_lost` (retriable); `fields.cause`
 * is a stable name for the cause, `fields.broker` the address.
 */
import net from 'node:net';
import tls from 'node:tls';
import { TributaryError } from './errors.js';

export type ConnectCause =
  | 'refused'
  | 'unknown_host'
  | 'unreachable'
  | 'timeout'
  | 'reset'
  | 'closed'
  | 'no_handshake'
  | 'tls_required'
  | 'not_tls'
  | 'not_tributary_http'
  | 'not_tributary'
  | 'certificate_untrusted'
  | 'certificate_name'
  | 'certificate_expired'
  | 'tls';

const UNTRUSTED = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_UNTRUSTED',
  'CERT_SIGNATURE_FAILURE',
]);

/** The cause of a socket or TLS error raised while connecting. */
export function connectCause(err: NodeJS.ErrnoException): ConnectCause {
  const code = err.code ?? '';
  if (code === 'ECONNREFUSED') return 'refused';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'EAI_NONAME') return 'unknown_host';
  if (code === 'EHOSTUNREACH' || code === 'ENETUNREACH' || code === 'EADDRNOTAVAIL') return 'unreachable';
  if (code === 'ETIMEDOUT') return 'timeout';
  if (code === 'ECONNRESET' || code === 'EPIPE') return 'reset';
  if (UNTRUSTED.has(code)) return 'certificate_untrusted';
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') return 'certificate_name';
  if (code === 'CERT_HAS_EXPIRED' || code === 'CERT_NOT_YET_VALID') return 'certificate_expired';
  if (code === 'ERR_SSL_WRONG_VERSION_NUMBER' || /wrong version number|packet length too long|unknown protocol/i.test(err.message)) return 'not_tls';
  if (code.startsWith('ERR_SSL') || code.startsWith('ERR_TLS')) return 'tls';
  return 'closed';
}

/**
 * What the first bytes a "broker" sent say about it, before any frame: a TLS record (alert or
 * handshake) means we spoke plain TCP to a TLS listener; `HTTP/` means the health/metrics port.
 */
export function causeFromFirstBytes(chunk: Buffer): ConnectCause | undefined {
  if (chunk.length >= 2 && (chunk[0] === 0x15 || chunk[0] === 0x16) && chunk[1] === 0x03) return 'tls_required';
  if (chunk.subarray(0, 5).toString('latin1') === 'HTTP/') return 'not_tributary_http';
  return undefined;
}

function sentence(cause: ConnectCause, broker: string, host: string, detail: string, timeoutMs: number | undefined): string {
  switch (cause) {
    case 'refused':
      return `connection refused by ${broker}: is a broker running there? (start one with \`npm start\`)`;
    case 'unknown_host':
      return `unknown host ${host} (${broker}): check the broker address`;
    case 'unreachable':
      return `${broker} is unreachable from here (${detail}): check the address and the network`;
    case 'timeout':
      return `no answer from ${broker}${timeoutMs !== undefined ? ` within ${timeoutMs} ms` : ''}: is the address right and the port open?`;
    case 'reset':
      return `${broker} reset the connection (${detail})`;
    case 'tls_required':
      return `${broker} speaks TLS: pass tls options (for example { tls: { ca } }, or --ca on the CLI)`;
    case 'not_tls':
      return `${broker} does not speak TLS: drop the tls options for it, or connect to its TLS listener`;
    case 'not_tributary_http':
      return `${broker} answered HTTP: that is a broker's health and metrics port, not its client port (default 9000)`;
    case 'not_tributary':
      return `${broker} is not a Tributary broker (${detail})`;
    case 'certificate_untrusted':
      return `certificate of ${broker} not trusted (${detail}): check the CA you pass (tls.ca, or --ca on the CLI)`;
    case 'certificate_name':
      return `certificate of ${broker} does not match the name asked for (${detail}): connect by a name the certificate lists, or set tls.servername`;
    case 'certificate_expired':
      return `certificate of ${broker} is not valid now (${detail})`;
    case 'tls':
      return `TLS handshake with ${broker} failed: ${detail}`;
    case 'no_handshake':
      return `${broker} accepted the connection but did not answer the handshake (${detail}): a frozen broker, or not a broker's client port`;
    case 'closed':
      return `${broker} closed the connection before answering (${detail}): if it is a TLS listener, pass tls options`;
  }
}

/** A connection_lost error for a failed connect, with the sentence for its cause. */
export function connectFailure(host: string, port: number, cause: ConnectCause, detail: string, timeoutMs?: number): TributaryError {
  const broker = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  return new TributaryError('connection_lost', { broker, cause, reason: detail }, sentence(cause, broker, host, detail, timeoutMs));
}

/**
 * Whether a TLS handshake with host:port completes (any certificate): tells a TLS listener that closed
 * a plain connection without a word from a port that is simply not a broker. Only on the failure path.
 */
export function speaksTls(host: string, port: number, timeoutMs = 1000): Promise<boolean> {
  return new Promise((resolve) => {
    const s = tls.connect({ host, port, rejectUnauthorized: false, ...(net.isIP(host) === 0 ? { servername: host } : {}) });
    const done = (v: boolean) => {
      clearTimeout(timer);
      s.destroy();
      resolve(v);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    s.once('secureConnect', () => done(true));
    s.once('error', () => done(false));
  });
}
