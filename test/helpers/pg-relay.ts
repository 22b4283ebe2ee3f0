/**
 * A TCP relay in front of a test PostgreSQL server that can lose the answer to a statement: the next
 * message holding a given text (say `COMMIT\0`, a simple query's COMMIT) is taken from its connection,
 * which is dropped at once, as if the network failed after the statement left. The server receives that
 * message late (as a delayed packet), on the same server connection, which closes once the server
 * answered: on release(), or once the sender showed it saw its connection fail by asking the server
 * something (`sendAfter`). Meanwhile the relay can refuse every connection (`refusing`): the sender
 * cannot ask the server what became of it. With `stall`, the sender's connection is not dropped but goes
 * silent instead, as a network that stopped carrying it: nothing more passes on it either way (the server's
 * answers and its end included), so the sender learns of the loss only from its own timeout.
 */
import net from 'node:net';

export interface PgRelay {
  /** The server's connection string, through the relay. */
  url: string;
  /** While true, every new connection is dropped; set by hold() at the cut, cleared by the test. */
  refusing: boolean;
  /**
   * Cuts off the next message holding `text` (see above); with `refuse`, every other connection is dropped
   * then and new ones refused until `refusing` is cleared. With `sendAfter`, the held message is sent on its
   * own once the server answered a message holding that text on another connection (say `txid_status`:
   * the sender asked what became of it, and was told before the server read it).
   */
  hold(text: string, opts?: { refuse?: boolean; sendAfter?: string; stall?: boolean }): void;
  /** Whether a message was cut off and is held (not sent to the server yet). */
  holding(): boolean;
  /**
   * The connection a message was cut from last: whether its sender closed it (with `stall`; else the relay
   * dropped it at the cut) and whether the server's side of it closed (say, the server ended the session).
   */
  cut(): { senderClosed: boolean; serverClosed: boolean } | undefined;
  /**
   * Sends the held message to the server, if not sent yet (a hold no message was cut by yet is dropped);
   * settles once the server answered the message cut last and its connection closed.
   */
  release(): Promise<void>;
  close(): Promise<void>;
}

export async function startPgRelay(serverPort: number): Promise<PgRelay> {
  const clients = new Set<net.Socket>();
  const ups = new Set<net.Socket>();
  let armed: { text: Buffer; refuse: boolean; sendAfter?: Buffer; stall: boolean } | undefined;
  let held: { send: () => void; sendAfter?: Buffer } | undefined;
  let lastCut: { senderClosed: boolean; serverClosed: boolean } | undefined;
  let answered: Promise<void> = Promise.resolve();
  const relay: PgRelay = {
    url: '',
    refusing: false,
    hold(text, opts = {}) {
      armed = {
        text: Buffer.from(text),
        refuse: opts.refuse === true,
        sendAfter: opts.sendAfter === undefined ? undefined : Buffer.from(opts.sendAfter),
        stall: opts.stall === true,
      };
    },
    holding: () => held !== undefined,
    cut: () => (lastCut === undefined ? undefined : { ...lastCut }),
    release() {
      armed = undefined;
      held?.send();
      return answered;
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
    let cut: { senderClosed: boolean; serverClosed: boolean } | undefined;
    let stalled = false;
    client.on('error', () => {});
    up.on('error', () => {});
    up.on('data', (d) => {
      if (!cut) client.write(d);
    });
    client.on('data', (d: Buffer) => {
      if (cut) return;
      if (armed && d.includes(armed.text)) {
        const { refuse, sendAfter, stall } = armed;
        armed = undefined;
        cut = { senderClosed: false, serverClosed: false };
        lastCut = cut;
        stalled = stall;
        if (refuse) {
          relay.refusing = true;
          for (const other of clients) if (other !== client) other.destroy();
        }
        if (!stall) client.destroy();
        answered = new Promise<void>((resolve) => {
          const send = () => {
            held = undefined;
            // Gone already (the server ended the session): nothing to answer.
            if (up.destroyed) return resolve();
            up.once('data', () => up.destroy());
            up.once('close', () => resolve());
            up.write(d);
          };
          held = { send, sendAfter };
        });
        return;
      }
      const waiting = held;
      // The first data after it is its answer: the server answers a query only once it has all of it.
      if (waiting?.sendAfter && d.includes(waiting.sendAfter)) up.once('data', () => held === waiting && waiting.send());
      up.write(d);
    });
    client.on('close', () => {
      clients.delete(client);
      if (cut) cut.senderClosed = true;
      else up.destroy();
    });
    up.on('close', () => {
      ups.delete(up);
      if (cut) cut.serverClosed = true;
      // A stalled connection carries nothing more, its end included.
      if (!stalled) client.destroy();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  relay.url = `postgresql://postgres@127.0.0.1:${port}/postgres`;
  return relay;
}
