/**
 * A TCP relay in front of a test PostgreSQL server that can lose the answer to a statement: the next
 * message holding a given text (say `COMMIT\0`, a simple query's COMMIT) is taken from its connection,
 * which is dropped at once, as if the network failed after the statement left. The server receives that
 * message only on release() (it reads it late, as a delayed packet), on the same server connection, which
 * closes once the server answered. Meanwhile the relay can refuse every connection (`refusing`): the
 * sender cannot ask the server what became of it.
 */
import net from 'node:net';

export interface PgRelay {
  /** The server's connection string, through the relay. */
  url: string;
  /** While true, every new connection is dropped; set by hold() at the cut, cleared by the test. */
  refusing: boolean;
  /**
   * Cuts off the next message holding `text` (see above); with `refuse`, every other connection is dropped
   * then and new ones refused until `refusing` is cleared.
   */
  hold(text: string, opts?: { refuse?: boolean }): void;
  /** Whether a message was cut off and is held. */
  holding(): boolean;
  /** Sends the held message to the server; settles once the server answered it and the connection closed. */
  release(): Promise<void>;
  close(): Promise<void>;
}

export async function startPgRelay(serverPort: number): Promise<PgRelay> {
  const clients = new Set<net.Socket>();
  const ups = new Set<net.Socket>();
  let armed: { text: Buffer; refuse: boolean } | undefined;
  let held: (() => Promise<void>) | undefined;
  const relay: PgRelay = {
    url: '',
    refusing: false,
    hold(text, opts = {}) {
      armed = { text: Buffer.from(text), refuse: opts.refuse === true };
    },
    holding: () => held !== undefined,
    async release() {
      const send = held;
      held = undefined;
      await send?.();
    },
    async close() {
      for (const s of [...clients, ...ups]) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server = net.createServer((client) => {
    if (relay.refusing) {
      client.destroy();
      return;
    }
    const up = net.connect(serverPort, '127.0.0.1');
    clients.add(client);
    ups.add(up);
    let cut = false;
    client.on('error', () => {});
    up.on('error', () => {});
    up.on('data', (d) => {
      if (!cut) client.write(d);
    });
    client.on('data', (d: Buffer) => {
      if (cut) return;
      if (armed && d.includes(armed.text)) {
        const refuse = armed.refuse;
        armed = undefined;
        cut = true;
        if (refuse) {
          relay.refusing = true;
          for (const other of clients) if (other !== client) other.destroy();
        }
        client.destroy();
        held = () =>
          new Promise<void>((resolve) => {
            up.once('data', () => up.destroy());
            up.once('close', () => resolve());
            up.write(d);
          });
        return;
      }
      up.write(d);
    });
    client.on('close', () => {
      clients.delete(client);
      if (!cut) up.destroy();
    });
    up.on('close', () => {
      ups.delete(up);
      client.destroy();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  relay.url = `postgresql://postgres@127.0.0.1:${port}/postgres`;
  return relay;
}
