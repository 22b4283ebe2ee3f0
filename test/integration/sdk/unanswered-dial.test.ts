/**
 * Batches of several partitions routed to a leader that accepts TCP but never answers (a black-holed or
 * frozen broker, as in the chaos suite's partition-broker fault): they wait for one shared dial, and when
 * its handshake bound passes they all fail over on that one failure (their retries look the route up
 * again). A batch that waited for the dial must not dial the same broker once more and wait out a second
 * handshake bound while the partition may already lead elsewhere. A dial given up by its own caller's
 * signal is the exception: the callers that waited for it dial for themselves.
 *
 * A real broker advertises the port of a black-holing proxy (test/chaos/proxy.ts): METADATA, asked on the
 * broker's own port, names the proxy as every partition's leader.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Cluster } from 'tributary-client/cluster.js';
import { Producer } from 'tributary-client/producer.js';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { TcpProxy } from '../../chaos/proxy.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { rejection, until } from '../../helpers/util.js';

const TOPIC = 'dial';

describe('SDK producer dialling an unanswering leader', () => {
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  });

  /** A broker whose advertised address is a proxy holding every connection unanswered. */
  async function blackHoledLeader(): Promise<{ proxy: TcpProxy; broker: BrokerProcess }> {
    const proxy = await TcpProxy.start({ name: 'leader' });
    cleanups.push(() => proxy.close());
    // Cut before anything connects: every connection the proxy accepts is held unanswered.
    proxy.blackhole();
    const broker = await BrokerProcess.start({ args: ['--advertised-port', String(proxy.port)] });
    cleanups.push(() => broker.dispose());
    proxy.setUpstream(broker.port);
    return { proxy, broker };
  }

  it('fails every batch that waited for the dial over on its one failure, without dialling again', async () => {
    const { proxy, broker } = await blackHoledLeader();
    const admin = await broker.connect();
    await admin.command('CREATE', { topic: TOPIC, partitions: 2 });

    const producer = new Producer({ brokers: [broker.address], stallTimeoutMs: 500 });
    cleanups.push(() => producer.close());
    // Per partition: how many connections the proxy had accepted when its first handshake failure came.
    const dialsAtFailure = new Map<number, number>();
    producer.on('retry', (e) => {
      const err = e.error as TributaryError;
      if (err.code === 'connection_lost' && err.fields.cause === 'no_handshake' && !dialsAtFailure.has(e.partition)) {
        dialsAtFailure.set(e.partition, proxy.accepted);
      }
    });
    const sends = [0, 1].map((partition) => producer.send({ topic: TOPIC, messages: [{ value: `v${partition}`, partition }] }));
    // Awaited below; a failed assertion before that leaves them to the close in afterEach.
    for (const s of sends) s.catch(() => {});
    await until(() => dialsAtFailure.size === 2, 20_000, 'both partitions saw the handshake fail');
    // One dial, shared: the second partition's batch failed with it rather than after a dial of its own.
    expect(Object.fromEntries(dialsAtFailure)).toEqual({ 0: 1, 1: 1 });

    // The way to the leader opens: the retries get through.
    proxy.heal();
    const acked = await Promise.all(sends);
    expect(acked.map(([m]) => [m!.partition, m!.offset])).toEqual([
      [0, 0],
      [1, 0],
    ]);
  });

  it('a dial given up by its own caller is not the failure of the callers waiting for it: they dial again', async () => {
    const { proxy, broker } = await blackHoledLeader();
    const cluster = new Cluster({ brokers: [broker.address], stallTimeoutMs: 300 });
    cleanups.push(() => cluster.close());
    const leader = `127.0.0.1:${proxy.port}`;
    const ac = new AbortController();
    const first = cluster.connection(leader, ac.signal).then(
      () => undefined,
      (err: unknown) => err,
    );
    const second = rejection(cluster.connection(leader));
    await until(() => proxy.accepted === 1, 10_000, 'the first dial accepted');
    ac.abort(new Error('the first caller gave up'));
    expect(((await first) as Error).message).toBe('the first caller gave up');
    // The second caller's own dial, failed by the handshake bound: not the first caller's abort.
    const err = await second;
    expect([err.code, err.fields.cause]).toEqual(['connection_lost', 'no_handshake']);
    expect(proxy.accepted).toBe(2);
  });
});
