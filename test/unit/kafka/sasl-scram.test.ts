/**
 * The SCRAM-SHA-256 server against RFC 7677's worked example (user "user", password "pencil"), and what it
 * refuses: a wrong proof, a replayed or changed nonce, channel binding, a foreign authorization id,
 * delegation tokens, messages out of order. Keys come from the token store's own derivation (scramEntry).
 */
import { describe, expect, it } from 'vitest';
import { scramEntry } from 'tributary-broker/broker/security.js';
import { ScramError, ScramServer, type ScramServerKeys } from 'tributary-broker/kafka/apis/sasl-scram.js';
import { parsePlain } from 'tributary-broker/kafka/apis/sasl.js';

const SALT = 'W22ZaJ0SNY7soEsUEjb6gQ==';
const CLIENT_NONCE = 'rOprNGfwEbeRWgbNEkqO';
const SERVER_NONCE = '%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0';
const NONCE = CLIENT_NONCE + SERVER_NONCE;
const CLIENT_FINAL = `c=biws,r=${NONCE},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=`;

function keys(token: string): ScramServerKeys {
  const e = scramEntry(token, Buffer.from(SALT, 'base64'), 4096);
  return {
    salt: Buffer.from(e.salt, 'base64'),
    iterations: e.iterations,
    storedKey: Buffer.from(e.storedKey, 'base64'),
    serverKey: Buffer.from(e.serverKey, 'base64'),
  };
}

const server = (token = 'pencil') =>
  new ScramServer(
    () => keys(token),
    () => SERVER_NONCE,
  );

describe('SCRAM-SHA-256 server', () => {
  it("follows RFC 7677's example to the byte: the server-first, the proof check and the server signature", () => {
    const s = server();
    expect(s.first(`n,,n=user,r=${CLIENT_NONCE}`)).toBe(`r=${NONCE},s=${SALT},i=4096`);
    expect(s.user).toBe('user');
    expect(s.final(CLIENT_FINAL)).toEqual({ ok: true, serverFinal: 'v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=' });
  });

  it("accepts librdkafka's client-final nonce (its client nonce once more in front), as Kafka does; the proof covers it", () => {
    const s = server();
    s.first(`n,,n=user,r=${CLIENT_NONCE}`);
    // The RFC's proof was made for the RFC's message: with the longer nonce the same proof does not hold.
    expect(s.final(CLIENT_FINAL.replace(`r=${NONCE}`, `r=${CLIENT_NONCE}${NONCE}`)).ok).toBe(false);
  });

  it('a proof made with another password does not hold', () => {
    const s = server('not-pencil');
    s.first(`n,,n=user,r=${CLIENT_NONCE}`);
    expect(s.final(CLIENT_FINAL).ok).toBe(false);
  });

  it('refuses a changed nonce or channel-binding header, a second client-first and a client-final first', () => {
    const s = server();
    s.first(`n,,n=user,r=${CLIENT_NONCE}`);
    expect(() => s.final(CLIENT_FINAL.replace(NONCE, `${NONCE}x`))).toThrow(ScramError);
    expect(() => s.final(CLIENT_FINAL.replace(NONCE, CLIENT_NONCE))).toThrow(/nonce/);
    expect(() => s.final(CLIENT_FINAL.replace('c=biws', 'c=eSws'))).toThrow(/channel binding/);
    expect(() => s.first(`n,,n=user,r=${CLIENT_NONCE}`)).toThrow(/twice/);
    expect(() => server().final(CLIENT_FINAL)).toThrow(/before the client-first/);
  });

  it('refuses channel binding, a foreign authorization id, mandatory extensions, delegation tokens and malformed messages', () => {
    expect(() => server().first(`p=tls-unique,,n=user,r=${CLIENT_NONCE}`)).toThrow(/channel binding/);
    expect(() => server().first(`n,a=admin,n=user,r=${CLIENT_NONCE}`)).toThrow(/authorization id/);
    expect(server().first(`y,a=user,n=user,r=${CLIENT_NONCE}`)).toMatch(/^r=/); // the same id, and "y" (no binding used): fine
    expect(() => server().first(`n,,m=ext,n=user,r=${CLIENT_NONCE}`)).toThrow(/mandatory/);
    expect(() => server().first(`n,,n=user,r=${CLIENT_NONCE},tokenauth=true`)).toThrow(/delegation/);
    for (const bad of ['', 'n,,', 'n,,n=user', `n,,r=${CLIENT_NONCE}`, `n,,n=,r=${CLIENT_NONCE}`, `n,,n=us=er,r=${CLIENT_NONCE}`, 'x,,n=user,r=a']) {
      expect(() => server().first(bad), bad).toThrow(ScramError);
    }
  });

  it('decodes =2C and =3D in the username', () => {
    const seen: string[] = [];
    const s = new ScramServer((u) => {
      seen.push(u);
      return keys('x');
    });
    s.first(`n,,n=a=2Cb=3Dc,r=${CLIENT_NONCE}`);
    expect(seen).toEqual(['a,b=c']);
  });
});

describe('SASL/PLAIN token', () => {
  it('is authzid NUL user NUL password, the authzid empty or the user', () => {
    expect(parsePlain(Buffer.from('\0app\0secret'))).toEqual({ user: 'app', password: 'secret' });
    expect(parsePlain(Buffer.from('app\0app\0secret'))).toEqual({ user: 'app', password: 'secret' });
    for (const bad of ['admin\0app\0secret', 'app\0secret', '\0app\0', '\0\0secret', '\0app\0se\0cret', ''])
      expect(parsePlain(Buffer.from(bad)), JSON.stringify(bad)).toBeUndefined();
  });
});
