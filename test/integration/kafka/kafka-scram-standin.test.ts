/**
 * SCRAM's stand-in salt for an unknown user (docs/kafka.md "SCRAM-SHA-256") is what a real user's salt is:
 * the same after a restart and on another broker of the same config, so comparing salts across restarts
 * or brokers does not tell who exists. It still differs per username.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawKafka } from '../../helpers/raw-kafka.js';
import { removeDir, tempDir } from '../../helpers/util.js';
import { addUser } from '../security/pki.js';

async function serverFirst(port: number, user: string): Promise<{ salt: string; iterations: number }> {
  const raw = await RawKafka.connect(port);
  try {
    await raw.call(17, 1, { mechanism: 'SCRAM-SHA-256' });
    const res = await raw.call(36, 2, { authBytes: Buffer.from(`n,,n=${user},r=abcdefgh`) });
    const m = /^r=abcdefgh[^,]+,s=([^,]+),i=(\d+)$/.exec((res.authBytes as Buffer).toString());
    expect(m, (res.authBytes as Buffer).toString()).not.toBeNull();
    return { salt: m![1]!, iterations: Number(m![2]) };
  } finally {
    raw.socket.destroy();
  }
}

describe("SCRAM's stand-in salt", () => {
  let dir: string;
  let config: string;
  const brokers: BrokerProcess[] = [];

  beforeAll(async () => {
    dir = await tempDir('tributary-scram-standin-');
    config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, 'authentication: true\n');
    addUser(config, 'app', ['topic.read']);
  });

  afterAll(async () => {
    for (const b of brokers) await b.dispose();
    if (dir) await removeDir(dir);
  });

  it('is the same across a restart and across two brokers of the same config, and differs per username', { timeout: 90_000 }, async () => {
    const start = async () => {
      const b = await BrokerProcess.start({ args: ['--config', config, '--kafka-port', '0'] });
      brokers.push(b);
      return b;
    };
    const salts = async (b: BrokerProcess) => ({
      ghost: await serverFirst(b.kafkaPort, 'ghost'),
      other: await serverFirst(b.kafkaPort, 'other-ghost'),
      app: await serverFirst(b.kafkaPort, 'app'),
    });
    const a = await start();
    const before = await salts(a);
    expect(before.ghost.salt).not.toBe(before.other.salt);
    expect(before.ghost.iterations).toBe(before.app.iterations);
    await a.restart();
    expect(await salts(a)).toEqual(before);
    const b = await start();
    expect(await salts(b)).toEqual(before);
  });
});
