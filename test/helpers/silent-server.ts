/** A TCP listener that accepts every connection and never writes a byte: a frozen broker, or another service's port. */
import net from 'node:net';

export interface SilentServer {
  address: string;
  port: number;
  /** Closes the listener and the connections it holds. */
  close(): Promise<void>;
}

export async function silentServer(): Promise<SilentServer> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    address: `127.0.0.1:${port}`,
    port,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
