/**
 * LocalCluster (what `tributary dev-cluster` runs) picks free ports before its children bind them; a port
 * taken in between must cost a retry on new ports, not the start.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalCluster } from 'tributary-broker/cli/local-cluster.js';

function listen(): Promise<net.Server> {
  return new Promise((resolve, reject) => {
    // Whoever connects (a health probe of the wrong process) is hung up on, so close() does not wait.
    const srv = net.createServer((socket) => socket.destroy());
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => resolve(srv));
  });
}

function kernelPort(): Promise<number> {
  return listen().then((srv) => {
    const port = (srv.address() as net.AddressInfo).port;
    return new Promise<number>((resolve) => srv.close(() => resolve(port)));
  });
}

describe('LocalCluster on free ports', () => {
  let taken: net.Server;
  let takenPort = 0;
  let cluster: LocalCluster | undefined;
  const handedOut: number[] = [];

  beforeAll(async () => {
    taken = await listen();
    takenPort = (taken.address() as net.AddressInfo).port;
  });

  afterAll(async () => {
    await cluster?.stop();
    await new Promise((r) => taken.close(r));
  }, 60_000);

  it('starts on new ports when the broker port and the etcd client port it chose are taken', async () => {
    // One broker: calls 1-2 are its client and health ports, 3-4 etcd's client and peer ports.
    let calls = 0;
    const freePort = async () => {
      calls++;
      const port = calls === 1 || calls === 3 ? takenPort : await kernelPort();
      handedOut.push(port);
      return port;
    };
    const unexpected: number[] = [];
    cluster = await LocalCluster.start({ brokers: 1, freePort, onUnexpectedExit: (id) => unexpected.push(id) });
    // The broker that failed on the taken port was the start's own failure, retried: not an unexpected exit.
    expect(unexpected).toEqual([]);
    expect(handedOut.filter((p) => p === takenPort)).toHaveLength(2); // both clashes were really offered
    expect(cluster.broker(0).port).not.toBe(takenPort);
    expect(cluster.broker(0).address).toBe(`127.0.0.1:${cluster.broker(0).port}`);
    expect(cluster.etcdEndpoints[0]).not.toContain(`:${takenPort}`);
    const status = await cluster.status();
    expect(status.brokers.map((b) => b.id)).toEqual([0]);
  }, 120_000);
});
