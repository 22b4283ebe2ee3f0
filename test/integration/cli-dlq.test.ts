/**
 * `tributary dlq replay` end to end: the compiled CLI as a child process against a real broker, on a
 * dead-letter topic written the way run({ retryTopics }) writes it (retry headers naming the source).
 * Checks stdout, stderr and exit codes (0 ok, 1 broker/runtime failure, 2 usage).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Admin } from 'tributary-client/admin.js';
import { Producer } from 'tributary-client/producer.js';
import { parkHeaders } from 'tributary-client/retry-headers.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { type CliResult, runCli } from '../helpers/cli.js';

const cli = (args: string[]): Promise<CliResult> => runCli(args, { env: { ...process.env, TRIBUTARY_BOOTSTRAP: '' } });

describe('tributary dlq replay', () => {
  let broker: BrokerProcess;
  let admin: Admin;
  const run = (...args: string[]) => cli([...args, '--bootstrap', broker.address]);

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '2', '--transaction-state-partitions', '2', '--group-join-window-ms', '20'] });
    admin = new Admin({ brokers: [broker.address] });
    await admin.createTopic({ topic: 'cli-src', partitions: 2 });
    await admin.createTopic({ topic: 'cli-src.dlq', partitions: 2 });
    await using p = new Producer({ brokers: [broker.address] });
    const parked = (value: string, partition: number, offset: number) => ({
      key: `key-${value}`,
      value,
      partition: 0,
      headers: parkHeaders({ headers: [{ key: 'trace', value: Buffer.from(value) }] }, { attempt: 3, topic: 'cli-src', partition, offset }, new Error('x'), 1, undefined).map((h) => ({ key: h.key, value: h.value })),
    });
    await p.send({ topic: 'cli-src.dlq', messages: [parked('a', 0, 5), parked('b', 1, 7), { value: 'not-parked', partition: 1 }, parked('c', 1, 9)] });
  });

  afterAll(async () => {
    await admin?.close();
    await broker?.dispose();
  });

  it('writes the dead letters back to their source partitions without retry headers, once', { timeout: 60_000 }, async () => {
    const r = await run('dlq', 'replay', 'cli-src.dlq', '--json');
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ deadLetterTopic: 'cli-src.dlq', replayed: { 'cli-src': 3 }, skipped: 1 });
    const got = [];
    for (let partition = 0; partition < 2; partition++) {
      for (const x of (await admin.readRecords({ topic: 'cli-src', partition, offset: 0 })).records) {
        got.push({ partition, key: x.key?.toString(), value: x.value.toString(), headers: x.headers.map((h) => `${h.key}=${h.value}`) });
      }
    }
    expect(got).toEqual([
      { partition: 0, key: 'key-a', value: 'a', headers: ['trace=a'] },
      { partition: 1, key: 'key-b', value: 'b', headers: ['trace=b'] },
      { partition: 1, key: 'key-c', value: 'c', headers: ['trace=c'] },
    ]);
    const again = await run('dlq', 'replay', 'cli-src.dlq');
    expect(again.code).toBe(0);
    expect(again.stdout).toBe('replayed 0 messages from cli-src.dlq\n');
  });

  it('refuses unknown flags (usage, exit 2) and reports a missing topic (exit 1)', async () => {
    const bad = await run('dlq', 'replay', 'cli-src.dlq', '--grup', 'x');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/unknown option '--grup'/);
    const missing = await run('dlq', 'replay', 'no-such.dlq');
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/topic_not_found|no such topic/);
  });
});
