/**
 * Shutdown (docs/operations.md, "Shutdown"): a repeated SIGTERM (GNU `timeout` signalling the broker and
 * its group) does not turn the stop into an unclean exit.
 */
import { afterAll, expect, it } from 'vitest';
import { BrokerProcess } from '../helpers/launcher.js';

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
