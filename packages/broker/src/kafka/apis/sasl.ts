/**
 * SaslHandshake (v0-1) and SaslAuthenticate (v0-2): SASL on the Kafka port (docs/kafka.md, "Authentication
 * and authorization"). With `--authentication` a connection is served nothing but ApiVersions and these two
 * until it has authenticated (kafka-connection.ts closes it otherwise, as a Kafka broker does). Both
 * mechanisms check Tributary's principals and tokens, so a Kafka client is the same principal with the same
 * permissions and topic ACLs as on the main port:
 * - PLAIN carries the principal and token, checked by the main port's AUTH code (security.ts
 *   `authenticate`: scrypt, at most two checks at once, failure counting);
 * - SCRAM-SHA-256 proves the token against the SCRAM keys `tributary user add` stores beside the scrypt
 *   hash (sasl-scram.ts), its outcome recorded by the same code (`settle`).
 *
 * A refused mechanism (UNSUPPORTED_SASL_MECHANISM), failed credentials (SASL_AUTHENTICATION_FAILED) or a
 * request out of order (ILLEGAL_SASL_STATE) are answered and the connection is then closed. A second
 * exchange on an authenticated connection is ILLEGAL_SASL_STATE (re-authentication is not offered: the
 * session lifetime is 0). After a handshake v0 the tokens come bare (an int32 size and the token, no
 * request header) and are answered bare, a refusal by closing the connection, as a Kafka broker does;
 * kafkajs and librdkafka use v1 and SaslAuthenticate, but librdkafka wants v0 advertised.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import type { KafkaRequestContext, SaslState } from '../context.js';
import { apiByKey } from '../protocol/apis.js';
import { kafkaErrorCode } from '../protocol/error-codes.js';
import { SaslAuthenticate, SaslHandshake } from '../protocol/messages/sasl.js';
import { handler } from './handler.js';
import { ScramError, ScramServer } from './sasl-scram.js';

/** The mechanisms offered, in the handshake's answer. */
export const SASL_MECHANISMS: readonly string[] = ['PLAIN', 'SCRAM-SHA-256'];

const EMPTY: Buffer = Buffer.alloc(0);
/** Kafka's own wording, which names neither which part was wrong nor the token. */
const BAD_CREDENTIALS = 'Authentication failed: Invalid username or password';
const BAD_SCRAM = 'Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256';

/** A SCRAM exchange between its two messages, per connection; `known`: the user has SCRAM keys (for the log). */
const scramExchanges = new WeakMap<SaslState, { server: ScramServer; known: boolean; credential?: string }>();

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

/** One step of an exchange: the server's token to send, and whether the exchange goes on, succeeded or failed. */
type Step = { state: 'continue' | 'done'; reply: Buffer } | { state: 'failed'; message: string } | { state: 'throttled' };

async function plain(ctx: KafkaRequestContext, token: Buffer): Promise<Step> {
  const creds = parsePlain(token);
  if (!creds) return { state: 'failed', message: 'Authentication failed: invalid SASL/PLAIN response' };
  try {
    await ctx.broker.security.authenticate(ctx.identity, creds.user, creds.password);
    return { state: 'done', reply: EMPTY };
  } catch (err) {
    // Too many checks in progress: no answer, the connection closes and the client retries it (a
    // SASL_AUTHENTICATION_FAILED would stop it for good).
    if (err instanceof TributaryError && err.code === 'throttled') return { state: 'throttled' };
    return { state: 'failed', message: BAD_CREDENTIALS };
  }
}

async function scram(ctx: KafkaRequestContext, token: Buffer): Promise<Step> {
  const security = ctx.broker.security;
  let x = scramExchanges.get(ctx.sasl);
  try {
    if (!x) {
      const started: { server: ScramServer; known: boolean; credential?: string } = {
        server: new ScramServer((user) => {
          const found = security.scramKeys(user);
          started.known = found.known;
          started.credential = found.credential;
          return found.keys;
        }),
        known: false,
      };
      x = started;
      scramExchanges.set(ctx.sasl, x);
      return { state: 'continue', reply: Buffer.from(x.server.first(token.toString('utf8'))) };
    }
    scramExchanges.delete(ctx.sasl);
    const user = x.server.user!;
    const { ok, serverFinal } = x.server.final(token.toString('utf8'));
    try {
      const reason = ok || x.known ? undefined : 'no SCRAM keys for this principal (unknown, or added before they were stored: add it again)';
      if (ok && x.credential !== undefined) security.settle(ctx.identity, user, x.credential, reason);
      else await security.settleFailed(ctx.identity, user, reason);
    } catch (err) {
      if (err instanceof TributaryError && err.code === 'throttled') return { state: 'throttled' };
      return { state: 'failed', message: BAD_SCRAM };
    }
    return { state: 'done', reply: Buffer.from(serverFinal) };
  } catch (err) {
    if (!(err instanceof ScramError)) throw err;
    scramExchanges.delete(ctx.sasl);
    // A malformed message counts as a failure of the user it named (if any), as a wrong proof does.
    const user = x?.server.user;
    if (user !== undefined) {
      try {
        await security.settleFailed(ctx.identity, user, err.message);
      } catch {}
    }
    return { state: 'failed', message: `Authentication failed: ${err.message}` };
  }
}

/** The client's next token for the handshake's mechanism; the exchange's step moves to `done` or `failed` at its end. */
async function exchange(ctx: KafkaRequestContext, token: Buffer): Promise<Step> {
  const step = ctx.sasl.mechanism === 'PLAIN' ? await plain(ctx, token) : await scram(ctx, token);
  if (step.state === 'done') ctx.sasl.step = 'done';
  else if (step.state !== 'continue') ctx.sasl.step = 'failed';
  return step;
}

/**
 * A bare token after a handshake v0: the bare answer (an int32 size and the server's token), or null when
 * refused (the connection then closes: v0 has no way to say why).
 */
export async function authenticateBareToken(ctx: KafkaRequestContext, token: Buffer): Promise<Buffer[] | null> {
  const step = await exchange(ctx, token);
  if (step.state !== 'continue' && step.state !== 'done') return null;
  const size = Buffer.alloc(4);
  size.writeInt32BE(step.reply.length);
  return [size, step.reply];
}

function answer(errorCode: number, errorMessage: string | null, authBytes: Buffer = EMPTY) {
  return { errorCode, errorMessage, authBytes, sessionLifetimeMs: 0 };
}

export const saslAuthenticateHandler = handler(apiByKey(SaslAuthenticate.apiKey)!, async (ctx, _version, body) => {
  if (!ctx.broker.security.enabled) return answer(kafkaErrorCode('ILLEGAL_SASL_STATE'), 'authentication is off on this broker');
  if (ctx.sasl.step !== 'handshaken' || ctx.sasl.raw) {
    // Before a handshake, after a v0 one (its tokens come bare), or after the exchange ended: out of
    // order, and the connection ends (after a completed exchange it stays, as Kafka keeps it).
    if (ctx.sasl.step !== 'done') ctx.sasl.step = 'failed';
    return answer(kafkaErrorCode('ILLEGAL_SASL_STATE'), 'SaslAuthenticate needs a SaslHandshake v1 first, once per connection');
  }
  const step = await exchange(ctx, body.authBytes as Buffer);
  if (step.state === 'throttled') return null;
  if (step.state === 'failed') return answer(kafkaErrorCode('SASL_AUTHENTICATION_FAILED'), step.message);
  return answer(0, null, step.reply);
});
