/**
 * A failed SCRAM exchange is paced as a failed AUTH or SASL/PLAIN is (docs/kafka.md "SCRAM-SHA-256"): its
 * proof is only an HMAC, but it takes a slot of the password-check queue for one scrypt before it answers,
 * so guesses over SCRAM are no faster than over PLAIN (they were ~150 a second, 600 in 4 s). Counted by
 * tributary_password_checks_total rather than timed: a check run for each failure is what paces them.
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

  /** tributary_password_checks_total{result="failed"}: the scrypt checks the broker ran for failures. */
  async function failedChecks(): Promise<number> {
    const body = (await broker.health('/metrics')).body;
    return Number(/^tributary_password_checks_total\{result="failed"\} (\d+)/m.exec(body)?.[1] ?? 0);
  }

  it('cost a password check each, as failed PLAIN guesses do, not only an HMAC', { timeout: 60_000 }, async () => {
    const before = await failedChecks();
    for (let i = 0; i < GUESSES; i++) await plainGuess(i);
    const afterPlain = await failedChecks();
    expect(afterPlain - before).toBe(GUESSES);
    // Before: a failed SCRAM proof was an HMAC answered at once, no check and no wait in the queue.
    for (let i = 0; i < GUESSES; i++) await scramGuess(i);
    expect((await failedChecks()) - afterPlain).toBe(GUESSES);
    expect(broker.stderr).toMatch(/"principal":"app"/);
  });
});
