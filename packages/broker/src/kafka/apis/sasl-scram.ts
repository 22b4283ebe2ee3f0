/**
 * The server side of SCRAM-SHA-256 (RFC 5802 with RFC 7677's hash), as Kafka brokers speak it: two client
 * messages, two answers. The client proves it knows the token without sending it; the server proves it
 * holds the user's keys (the server-final `v=`). Keys come from the token store (security.ts `scramKeys`:
 * salt, iterations, StoredKey, ServerKey; never the token or the salted password).
 *
 * As Kafka: no channel binding (a client that asks for it is refused), the client-final nonce must end
 * with the server-first one (librdkafka repeats its own part in front), the authorization id may only
 * repeat the user, passwords are used as their UTF-8 bytes (no SASLprep), delegation tokens
 * (`tokenauth=true`) are not served, other extensions are ignored.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** A user's keys as the exchange needs them. */
export interface ScramServerKeys {
  salt: Buffer;
  iterations: number;
  storedKey: Buffer;
  serverKey: Buffer;
}

/** A message that does not follow RFC 5802: the exchange fails with this message. */
export class ScramError extends Error {}

interface Pending {
  user: string;
  gs2Header: string;
  clientFirstBare: string;
  serverFirst: string;
  nonce: string;
  keys: ScramServerKeys;
}

/** `=2C` and `=3D` back to `,` and `=`; any other `=` is malformed. */
function decodeName(s: string): string {
  if (/=(?!2C|3D)/.test(s)) throw new ScramError('invalid username encoding');
  return s.replace(/=2C/g, ',').replace(/=3D/g, '=');
}

/** `k=v` attributes in order (RFC 5802's are one letter; Kafka's extensions, such as `tokenauth`, are words). */
function attributes(s: string): [string, string][] {
  return s.split(',').map((a) => {
    const m = /^([A-Za-z]+)=(.*)$/s.exec(a);
    if (!m) throw new ScramError(`invalid attribute '${a.slice(0, 32)}'`);
    return [m[1]!, m[2]!];
  });
}

const hmac = (key: Buffer, data: string) => createHmac('sha256', key).update(data).digest();

export class ScramServer {
  private pending: Pending | undefined;

  constructor(
    /** The user's keys, or stand-ins that never verify (so the exchange does not tell who exists). */
    private readonly keysOf: (user: string) => ScramServerKeys,
    private readonly serverNonce: () => string = () => randomBytes(18).toString('base64'),
  ) {}

  /** The user named by the client-first message, once it has been read. */
  get user(): string | undefined {
    return this.pending?.user;
  }

  /** The client-first message → the server-first message (`r=<nonce>,s=<salt>,i=<iterations>`). */
  first(message: string): string {
    if (this.pending) throw new ScramError('client-first message sent twice');
    const m = /^(n|y|p=[^,]*),(a=[^,]*)?,(.*)$/s.exec(message);
    if (!m) throw new ScramError('invalid client-first message');
    if (m[1]!.startsWith('p=')) throw new ScramError('channel binding is not supported');
    const clientFirstBare = m[3]!;
    const attrs = attributes(clientFirstBare);
    if (attrs[0]?.[0] === 'm') throw new ScramError('mandatory extensions are not supported');
    if (attrs[0]?.[0] !== 'n' || attrs[1]?.[0] !== 'r') throw new ScramError('invalid client-first message');
    const user = decodeName(attrs[0][1]);
    const clientNonce = attrs[1][1];
    if (user === '' || clientNonce === '') throw new ScramError('invalid client-first message');
    if (m[2] !== undefined && decodeName(m[2].slice(2)) !== user) throw new ScramError('the authorization id must be the user');
    if (attrs.slice(2).some(([k, v]) => k === 'tokenauth' && v === 'true')) throw new ScramError('delegation tokens are not supported');
    const keys = this.keysOf(user);
    const nonce = clientNonce + this.serverNonce();
    const serverFirst = `r=${nonce},s=${keys.salt.toString('base64')},i=${keys.iterations}`;
    this.pending = { user, gs2Header: message.slice(0, message.length - clientFirstBare.length), clientFirstBare, serverFirst, nonce, keys };
    return serverFirst;
  }

  /**
   * The client-final message → whether its proof holds, and the server-final message (`v=<signature>`) to
   * send when it does. Throws ScramError when the message is malformed or out of order.
   */
  final(message: string): { ok: boolean; serverFinal: string } {
    const p = this.pending;
    if (!p) throw new ScramError('client-final message before the client-first');
    const cut = message.lastIndexOf(',p=');
    if (cut < 0) throw new ScramError('invalid client-final message');
    const withoutProof = message.slice(0, cut);
    const attrs = attributes(withoutProof);
    if (attrs[0]?.[0] !== 'c' || attrs[1]?.[0] !== 'r') throw new ScramError('invalid client-final message');
    if (Buffer.from(attrs[0][1], 'base64').toString('utf8') !== p.gs2Header) throw new ScramError('channel binding does not match the client-first message');
    // Ends with the nonce of the server-first message, as a Kafka broker checks it: librdkafka puts its own
    // client nonce in front of that nonce once more. The proof covers the message as sent either way.
    if (!attrs[1][1].endsWith(p.nonce)) throw new ScramError('nonce does not match');
    const proof = Buffer.from(message.slice(cut + 3), 'base64');
    const authMessage = `${p.clientFirstBare},${p.serverFirst},${withoutProof}`;
    const signature = hmac(p.keys.storedKey, authMessage);
    let ok = false;
    if (proof.length === signature.length) {
      const clientKey = Buffer.alloc(signature.length);
      for (let i = 0; i < signature.length; i++) clientKey[i] = proof[i]! ^ signature[i]!;
      const stored = createHash('sha256').update(clientKey).digest();
      ok = stored.length === p.keys.storedKey.length && timingSafeEqual(stored, p.keys.storedKey);
    }
    return { ok, serverFinal: `v=${hmac(p.keys.serverKey, authMessage).toString('base64')}` };
  }
}
