/**
 * SaslHandshake (v1) and SaslAuthenticate (v0-2): SASL on the Kafka port (docs/kafka.md, "Authentication").
 * With `--authentication` a connection is served nothing but ApiVersions and these two until it has
 * authenticated (kafka-connection.ts closes it otherwise, as a Kafka broker does). PLAIN carries a
 * Tributary principal and token, checked by the main port's AUTH code (security.ts: scrypt, at most two
 * checks at once, failure counting), so a Kafka client is the same principal with the same permissions
 * and topic ACLs as on the main port.
 *
 * A refused mechanism (UNSUPPORTED_SASL_MECHANISM), wrong credentials (SASL_AUTHENTICATION_FAILED) or a
 * request out of order (ILLEGAL_SASL_STATE) are answered and the connection is then closed. A second
 * exchange on an authenticated connection is ILLEGAL_SASL_STATE (re-authentication is not offered: the
 * session lifetime is 0). After a handshake v0 the token comes bare (an int32 size and the token, no
 * request header) and is answered bare (an empty token) or, when refused, by closing the connection, as a
 * Kafka broker does; kafkajs and librdkafka use v1 and SaslAuthenticate, but librdkafka wants v0 advertised.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import { apiByKey } from '../protocol/apis.js';
import { kafkaErrorCode } from '../protocol/error-codes.js';
import { SaslAuthenticate, SaslHandshake } from '../protocol/messages/sasl.js';
import type { KafkaRequestContext } from '../context.js';
import { handler } from './handler.js';

/** The mechanisms offered, in the handshake's answer. */
export const SASL_MECHANISMS: readonly string[] = ['PLAIN'];

const EMPTY: Buffer = Buffer.alloc(0);
/** Kafka's own wording, which names neither which part was wrong nor the token. */
const BAD_CREDENTIALS = 'Authentication failed: Invalid username or password';

export const saslHandshakeHandler = handler(apiByKey(SaslHandshake.apiKey)!, (ctx, version, body) => {
  const mechanisms = ctx.broker.security.enabled ? [...SASL_MECHANISMS] : [];
  // Authentication off (nothing to authenticate against), or a second handshake: as a Kafka broker answers.
  if (!ctx.broker.security.enabled || ctx.sasl.step !== 'start') return { errorCode: kafkaErrorCode('ILLEGAL_SASL_STATE'), mechanisms };
  const mechanism = body.mechanism as string;
  if (!SASL_MECHANISMS.includes(mechanism)) {
    ctx.sasl.step = 'failed';
    ctx.broker.logger.info({ remote: ctx.identity.remote, mechanism: mechanism.slice(0, 64) }, 'Kafka SASL mechanism not offered');
    return { errorCode: kafkaErrorCode('UNSUPPORTED_SASL_MECHANISM'), mechanisms };
  }
  ctx.sasl.step = 'handshaken';
  ctx.sasl.mechanism = mechanism;
  ctx.sasl.raw = version === 0;
  return { errorCode: 0, mechanisms };
});

/** `authzid \0 authcid \0 passwd` (RFC 4616); undefined when malformed. The authzid may only repeat the user. */
export function parsePlain(token: Buffer): { user: string; password: string } | undefined {
  const first = token.indexOf(0);
  const second = first < 0 ? -1 : token.indexOf(0, first + 1);
  if (second < 0 || token.indexOf(0, second + 1) >= 0) return undefined;
  const authzid = token.toString('utf8', 0, first);
  const user = token.toString('utf8', first + 1, second);
  const password = token.toString('utf8', second + 1);
  if (user === '' || password === '' || (authzid !== '' && authzid !== user)) return undefined;
  return { user, password };
}

function answer(errorCode: number, errorMessage: string | null) {
  return { errorCode, errorMessage, authBytes: EMPTY, sessionLifetimeMs: 0 };
}

type Outcome = { ok: true } | { ok: false; message: string } | { ok: false; throttled: true };

/** The client's token for the handshake's mechanism, checked; the exchange ends either way (`done` or `failed`). */
async function check(ctx: KafkaRequestContext, token: Buffer): Promise<Outcome> {
  const creds = parsePlain(token);
  if (!creds) {
    ctx.sasl.step = 'failed';
    return { ok: false, message: 'Authentication failed: invalid SASL/PLAIN response' };
  }
  try {
    await ctx.broker.security.authenticate(ctx.identity, creds.user, creds.password);
  } catch (err) {
    ctx.sasl.step = 'failed';
    if (err instanceof TributaryError && err.code === 'throttled') return { ok: false, throttled: true };
    return { ok: false, message: BAD_CREDENTIALS };
  }
  ctx.sasl.step = 'done';
  return { ok: true };
}

/**
 * A bare token after a handshake v0: the bare answer (an int32 size and the server's token, empty for
 * PLAIN), or null when refused (the connection closes: v0 has no way to say why).
 */
export async function authenticateBareToken(ctx: KafkaRequestContext, token: Buffer): Promise<Buffer[] | null> {
  const outcome = await check(ctx, token);
  return outcome.ok ? [Buffer.alloc(4)] : null;
}

export const saslAuthenticateHandler = handler(apiByKey(SaslAuthenticate.apiKey)!, (ctx, _version, body) => {
  if (!ctx.broker.security.enabled) return answer(kafkaErrorCode('ILLEGAL_SASL_STATE'), 'authentication is off on this broker');
  if (ctx.sasl.step !== 'handshaken') {
    // Before a handshake, or after the exchange ended: out of order, and the connection ends (after a
    // completed exchange it stays, as Kafka keeps it, and only this request is refused).
    if (ctx.sasl.step !== 'done') ctx.sasl.step = 'failed';
    return answer(kafkaErrorCode('ILLEGAL_SASL_STATE'), 'SaslAuthenticate needs a SaslHandshake first, once per connection');
  }
  if (ctx.sasl.raw) {
    ctx.sasl.step = 'failed';
    return answer(kafkaErrorCode('ILLEGAL_SASL_STATE'), 'after a SaslHandshake v0 the token is sent bare');
  }
  return check(ctx, body.authBytes as Buffer).then((outcome) => {
    if (outcome.ok) return answer(0, null);
    // Too many checks in progress: no answer, the connection closes and the client retries it (a
    // SASL_AUTHENTICATION_FAILED would stop it for good).
    if ('throttled' in outcome) return null;
    return answer(kafkaErrorCode('SASL_AUTHENTICATION_FAILED'), outcome.message);
  });
});
