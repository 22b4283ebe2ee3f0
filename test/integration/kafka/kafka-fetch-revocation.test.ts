/**
 * A Kafka Fetch long poll waiting when a SIGHUP withdraws its principal's read ACL (docs/security.md,
 * "Revocation"): it answers TOPIC_AUTHORIZATION_FAILED, not the records written after the withdrawal, as a
 * long-poll CONSUME on the main port does.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseDocument } from 'yaml';
import { Connection } from 'tributary-protocol/connection.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawKafka } from '../../helpers/raw-kafka.js';
import { removeDir, tempDir } from '../../helpers/util.js';
import { addUser } from '../security/pki.js';

describe('Kafka Fetch and a SIGHUP withdrawing the read ACL', () => {
  let dir: string;
  let config: string;
  let broker: BrokerProcess;
  let admin: Connection | undefined;
  let raw: RawKafka | undefined;
  const tokens: Record<string, string> = {};

  beforeAll(async () => {
    dir = await tempDir('tributary-kafka-fetch-revoke-');
    config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, ['authentication: true', 'topicAcls:', '  secret:', '    read: [bob]', ''].join('\n'));
    tokens.admin = addUser(config, 'admin', ['admin']);
    tokens.bob = addUser(config, 'bob', ['topic.read']);
    broker = await BrokerProcess.start({ args: ['--config', config, '--kafka-port', '0', '--offsets-topic-partitions', '1', '--log-level', 'info'] });
    admin = await Connection.connect({ host: '127.0.0.1', port: broker.port, auth: { principal: 'admin', token: tokens.admin } });
    await admin.command('CREATE', { topic: 'secret', partitions: 1 });
    await admin.command('PUBLISH', { topic: 'secret', partition: 0, message: 'before' });
  }, 60_000);

  afterAll(async () => {
    raw?.socket.destroy();
    await admin?.close().catch(() => {});
    await broker?.dispose();
    if (dir) await removeDir(dir);
  });

  it('a waiting Fetch answers TOPIC_AUTHORIZATION_FAILED, not the record written after the withdrawal', async () => {
    raw = await RawKafka.connect(broker.kafkaPort);
    expect((await raw.call(17, 1, { mechanism: 'PLAIN' })).errorCode).toBe(0);
    expect((await raw.call(36, 2, { authBytes: Buffer.from(`\0bob\0${tokens.bob}`) })).errorCode).toBe(0);
    const fetching = raw.call(1, 12, {
      // Long enough for the reload below; the record published after it ends the wait.
      maxWaitMs: 15_000,
      minBytes: 1,
      maxBytes: 1 << 20,
      isolationLevel: 0,
      sessionId: 0,
      sessionEpoch: -1,
      topics: [{ topic: 'secret', partitions: [{ partition: 0, fetchOffset: 1, partitionMaxBytes: 1 << 20 }] }],
      forgottenTopicsData: [],
      rackId: '',
    });
    await new Promise((r) => setTimeout(r, 300));
    const doc = parseDocument(fs.readFileSync(config, 'utf8'));
    doc.setIn(['topicAcls', 'secret', 'read'], doc.createNode(['admin']));
    fs.writeFileSync(config, doc.toString());
    const mark = broker.stderr.length;
    broker.proc!.kill('SIGHUP');
    await expect.poll(() => broker.stderr.slice(mark).includes('users and topic ACLs reloaded'), { timeout: 5000 }).toBe(true);
    await admin!.command('PUBLISH', { topic: 'secret', partition: 0, message: 'after-withdrawal' });
    const p = ((await fetching).responses as KafkaStruct[])[0]!.partitions as KafkaStruct[];
    expect(p[0]!.errorCode).toBe(kafkaErrorCode('TOPIC_AUTHORIZATION_FAILED'));
    expect(((p[0]!.records as Buffer | null) ?? Buffer.alloc(0)).includes('after-withdrawal')).toBe(false);
  });
});
