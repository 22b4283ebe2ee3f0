/**
 * A failed SCRAM exchange is paced as a failed AUTH or SASL/PLAIN is (docs/kafka.md "SCRAM-SHA-256"): its
 * proof is only an HMAC, but it takes a slot of the password-check queue for one scrypt before it answers,
 * so guesses over SCRAM are no faster than over PLAIN (they were ~150 a second, 600 in 4 s).
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawKafka } from '../../helpers/raw-kafka.js';
import { removeDir, tempDir } from '../../helpers/util.js';
import { addUser } from '../security/pki.js';

const GUESSES = 12;

describe('failed SCRAM exchanges', () => {
  let dir: string;
  let broker: BrokerProcess;

  beforeAll(async () => {
    dir = await tempDir('tributary-scram-pacing-');
    const config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, 'authentication: true\n');
    addUser(config, 'app', ['topic.read']);
    broker = await BrokerProcess.start({ args: ['--config', config, '--kafka-port', '0'] });
  });

  afterAll(async () => {
    await broker?.dispose();
    if (dir) await removeDir(dir);
  });

  async function scramGuess(i: number): Promise<void> {
    const raw = await RawKafka.connect(broker.kafkaPort);
    try {
      await raw.call(17, 1, { mechanism: 'SCRAM-SHA-256' });
      const first = await raw.call(36, 2, { authBytes: Buffer.from(`n,,n=app,r=guess${i}`) });
      const nonce = /^r=([^,]+),/.exec((first.authBytes as Buffer).toString())![1]!;
      const res = await raw.call(36, 2, { authBytes: Buffer.from(`c=biws,r=${nonce},p=${Buffer.alloc(32, i).toString('base64')}`) });
      expect(res.errorCode).not.toBe(0);
    } finally {
      raw.socket.destroy();
    }
  }

  async function plainGuess(i: number): Promise<void> {
    const raw = await RawKafka.connect(broker.kafkaPort);
    try {
      await raw.call(17, 1, { mechanism: 'PLAIN' });
      const res = await raw.call(36, 2, { authBytes: Buffer.from(`\0app\0guess${i}`) });
      expect(res.errorCode).not.toBe(0);
    } finally {
      raw.socket.destroy();
    }
  }

  async function timed(guess: (i: number) => Promise<void>): Promise<number> {
    const t0 = performance.now();
    for (let i = 0; i < GUESSES; i++) await guess(i);
    return performance.now() - t0;
  }

  it('take as long as failed PLAIN guesses (a scrypt each), not an HMAC', { timeout: 60_000 }, async () => {
    await timed(plainGuess); // warm-up
    const plain = await timed(plainGuess);
    const scram = await timed(scramGuess);
    console.log(`${GUESSES} failed guesses: PLAIN ${plain.toFixed(0)} ms, SCRAM ${scram.toFixed(0)} ms`);
    expect(scram).toBeGreaterThan(plain * 0.6);
    expect(broker.stderr).toMatch(/"principal":"app"/);
  });
});
