/**
 * Shutdown (docs/operations.md, "Shutdown"): a repeated SIGTERM (GNU `timeout` signalling the broker and
 * its group) does not turn the stop into an unclean exit.
 */
import { afterAll, expect, it } from 'vitest';
import { BrokerProcess } from '../helpers/launcher.js';
import { RawKafka } from '../helpers/raw-kafka.js';

let broker: BrokerProcess | undefined;
afterAll(async () => {
  await broker?.dispose();
});

it('a repeated SIGTERM within a second is ignored: a clean stop, exit 0', async () => {
  // A JOIN_GROUP is held for the join window: the request the drain waits for.
  broker = await BrokerProcess.start({ args: ['--log-level', 'info', '--group-join-window-ms', '60000', '--shutdown-timeout-ms', '1500'] });
  const c = await broker.connect();
  await c.command('CREATE', { topic: 't', partitions: 1 });
  void c.command('JOIN_GROUP', { topic: 't', group: 'g', member: 'm' }).catch(() => {});
  await new Promise((r) => setTimeout(r, 200));
  const exited = new Promise<number | null>((resolve) => broker!.proc!.once('exit', resolve));
  broker.proc!.kill('SIGTERM');
  // Apart enough not to be merged into one pending signal, well within the second.
  await new Promise((r) => setTimeout(r, 100));
  broker.proc!.kill('SIGTERM');
  const code = await exited;
  expect([code, broker.stderr.match(/second SIGTERM.*/)?.[0]]).toEqual([0, undefined]);
  expect(broker.stderr).toMatch(/"signal":"SIGTERM","msg":"repeated signal within 1 s of the first: one request, ignored"/);
  expect(broker.stderr).toMatch(/"msg":"broker stopped"/);
}, 60_000);

it('--shutdown-timeout-ms bounds the whole drain, both ports, and says what it cut', async () => {
  // A JoinGroup on the Kafka port and a JOIN_GROUP on the main port, each held for the join window.
  // Before: the Kafka drain waited its timeout, then the main port's its own (2 × 1500 ms), silently.
  const b = await BrokerProcess.start({ args: ['--log-level', 'info', '--group-join-window-ms', '60000', '--shutdown-timeout-ms', '1500', '--kafka-port', '0'] });
  try {
    const c = await b.connect();
    await c.command('CREATE', { topic: 't', partitions: 1 });
    void c.command('JOIN_GROUP', { topic: 't', group: 'g', member: 'm' }).catch(() => {});
    const k = await RawKafka.connect(b.kafkaPort);
    const protocols = [{ name: 'range', metadata: Buffer.alloc(0) }];
    void k.call(11, 0, { groupId: 'kg', sessionTimeoutMs: 30_000, memberId: '', protocolType: 'consumer', protocols }).catch(() => {});
    await new Promise((r) => setTimeout(r, 300));
    const exited = new Promise<number | null>((resolve) => b.proc!.once('exit', resolve));
    const t0 = Date.now();
    b.proc!.kill('SIGTERM');
    expect(await exited).toBe(0);
    const took = Date.now() - t0;
    expect(b.stderr).toMatch(/"level":40,.*"shutdownTimeoutMs":1500,"connections":1,"kafkaConnections":1,"msg":"shutdown timeout expired: cutting connections with requests still unanswered"/);
    // Two timeouts in turn take at least 3000 ms; one deadline about 1500 and the stop itself.
    expect(took).toBeLessThan(3000);
  } finally {
    await b.dispose();
  }
}, 60_000);
