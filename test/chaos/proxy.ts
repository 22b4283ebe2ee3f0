/**
 * A TCP proxy for network partitions without root: a broker advertises the proxy's port instead of its
 * own and reaches etcd through another proxy, so every byte to and from it passes through here.
 *
 * Black-holing stops forwarding in both directions while keeping both sockets open (each side is paused,
 * so bytes wait in the kernel buffers as they would while TCP retransmits into a partition), and closes
 * seen on one side are held back until the partition heals. Healing resumes the flow. A rule picks which
 * connections are cut: by the process that opened them (`origin`, found through /proc, Linux only), so
 * one broker's outgoing connections into the other brokers' proxies can be cut too.
 *
 * `down()` closes the listener (connections to a dead broker are refused, as the kernel would) and
 * `up()` listens again on the same port for the restarted broker.
 */
import fs from 'node:fs/promises';
import net from 'node:net';

interface Conn {
  client: net.Socket;
  upstream: net.Socket | undefined;
  origin: string | undefined;
  blocked: boolean;
  /** A close that arrived while blocked, delivered on heal. */
  closedWhileBlocked: boolean;
  ready: boolean;
  connected: boolean;
  flowing: boolean;
}

export interface ProxyOptions {
  name: string;
  /** Port to listen on; 0 = a free one (kept across down()/up()). */
  port?: number;
  /** Who opened an accepted connection (e.g. `broker 1`), from the peer's port. */
  classify?: (remotePort: number, localPort: number) => Promise<string | undefined>;
  /** How long a connection accepted before the upstream is known waits for it. */
  holdTimeoutMs?: number;
}

export class TcpProxy {
  port = 0;
  private upstreamPort: number | undefined;
  private server: net.Server | undefined;
  private readonly conns = new Set<Conn>();
  private rule: ((origin: string | undefined) => boolean) | undefined;
  private readonly waiting = new Set<() => void>();
  accepted = 0;
  bytes = 0;

  private constructor(private readonly opts: ProxyOptions) {}

  static async start(opts: ProxyOptions): Promise<TcpProxy> {
    const p = new TcpProxy(opts);
    p.port = opts.port ?? 0;
    await p.up();
    return p;
  }

  get name(): string {
    return this.opts.name;
  }

  get listening(): boolean {
    return this.server?.listening ?? false;
  }

  get blackholed(): boolean {
    return this.rule !== undefined;
  }

  /** Where accepted connections go; connections held for it proceed. */
  setUpstream(port: number | undefined): void {
    this.upstreamPort = port;
    if (port === undefined) return;
    for (const w of [...this.waiting]) w();
  }

  /** Listens again (same port). Retries a port briefly taken by someone else. */
  async up(): Promise<void> {
    if (this.listening) return;
    for (let attempt = 1; ; attempt++) {
      const server = net.createServer((s) => this.accept(s));
      try {
        await new Promise<void>((resolve, reject) => {
          server.once('error', reject);
          server.listen(this.port, '127.0.0.1', () => {
            server.off('error', reject);
            resolve();
          });
        });
        const a = server.address();
        this.port = typeof a === 'object' && a ? a.port : this.port;
        this.server = server;
        return;
      } catch (err) {
        server.close();
        if (attempt >= 50 || (err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }

  /** Stops listening and drops every connection (the process behind it is gone). */
  async down(): Promise<void> {
    this.upstreamPort = undefined;
    const server = this.server;
    this.server = undefined;
    for (const c of [...this.conns]) this.destroy(c);
    if (server) await new Promise<void>((r) => server.close(() => r()));
  }

  /** Cuts the connections the rule picks (and every later one it picks) until heal(). */
  blackhole(rule: (origin: string | undefined) => boolean = () => true): void {
    this.rule = rule;
    for (const c of this.conns) if (c.ready && rule(c.origin)) this.block(c);
  }

  heal(): void {
    this.rule = undefined;
    for (const c of [...this.conns]) {
      if (!c.blocked) continue;
      c.blocked = false;
      if (c.closedWhileBlocked) {
        this.destroy(c);
        continue;
      }
      if (!c.upstream) void this.connectUpstream(c);
      else if (c.connected) {
        this.startFlow(c);
        c.client.resume();
        c.upstream.resume();
      }
    }
  }

  async close(): Promise<void> {
    this.rule = undefined;
    await this.down();
  }

  private block(c: Conn): void {
    c.blocked = true;
    c.client.pause();
    c.upstream?.pause();
  }

  private destroy(c: Conn): void {
    this.conns.delete(c);
    c.client.destroy();
    c.upstream?.destroy();
  }

  private async accept(client: net.Socket): Promise<void> {
    this.accepted++;
    client.pause();
    const c: Conn = {
      client,
      upstream: undefined,
      origin: undefined,
      blocked: false,
      closedWhileBlocked: false,
      ready: false,
      connected: false,
      flowing: false,
    };
    this.conns.add(c);
    client.on('error', () => {});
    client.on('close', () => this.sideClosed(c));
    if (this.opts.classify && client.remotePort !== undefined) {
      c.origin = await this.opts.classify(client.remotePort, this.port).catch(() => undefined);
    }
    if (!this.conns.has(c)) return;
    c.ready = true;
    if (this.rule?.(c.origin)) {
      c.blocked = true;
      return;
    }
    await this.connectUpstream(c);
  }

  private async connectUpstream(c: Conn): Promise<void> {
    if (this.upstreamPort === undefined) {
      const ok = await new Promise<boolean>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          this.waiting.delete(done);
          resolve(true);
        };
        const timer = setTimeout(() => {
          this.waiting.delete(done);
          resolve(false);
        }, this.opts.holdTimeoutMs ?? 15_000);
        this.waiting.add(done);
      });
      if (!ok || !this.conns.has(c)) return this.destroy(c);
      if (c.blocked) return; // cut while waiting: heal() connects it
    }
    const up = net.connect({ host: '127.0.0.1', port: this.upstreamPort! });
    c.upstream = up;
    up.setNoDelay(true);
    c.client.setNoDelay(true);
    up.on('error', () => {});
    up.on('close', () => this.sideClosed(c));
    up.once('connect', () => {
      c.connected = true;
      if (c.blocked) {
        up.pause();
        return;
      }
      this.startFlow(c);
      c.client.resume();
    });
  }

  private startFlow(c: Conn): void {
    if (c.flowing || !c.upstream) return;
    c.flowing = true;
    this.forward(c, c.client, c.upstream);
    this.forward(c, c.upstream, c.client);
  }

  /** Forwards `from` → `to` with backpressure; a blocked connection stays paused. */
  private forward(c: Conn, from: net.Socket, to: net.Socket): void {
    from.on('data', (d: Buffer) => {
      this.bytes += d.length;
      if (!to.write(d)) {
        from.pause();
        to.once('drain', () => {
          if (!c.blocked) from.resume();
        });
      }
    });
    from.on('end', () => {
      if (!c.blocked) to.end();
    });
  }

  private sideClosed(c: Conn): void {
    if (!this.conns.has(c)) return;
    if (c.blocked) {
      c.closedWhileBlocked = true;
      return;
    }
    this.destroy(c);
  }
}

/**
 * Which of `pids` owns the TCP socket connected from `remotePort` to `localPort` on loopback: the socket's
 * inode from /proc/net/tcp, then the process whose fd table holds it. Undefined when none does (a client
 * of the test itself, or /proc unavailable).
 */
export async function socketOwner(remotePort: number, localPort: number, pids: Map<number, string>): Promise<string | undefined> {
  let inode: string | undefined;
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    const text = await fs.readFile(file, 'utf8').catch(() => '');
    for (const line of text.split('\n')) {
      const f = line.trim().split(/\s+/);
      if (f.length < 10 || f[0] === 'sl') continue;
      const lp = Number.parseInt(f[1]!.split(':').pop()!, 16);
      const rp = Number.parseInt(f[2]!.split(':').pop()!, 16);
      if (lp === remotePort && rp === localPort) {
        inode = f[9];
        break;
      }
    }
    if (inode) break;
  }
  if (!inode || inode === '0') return undefined;
  const want = `socket:[${inode}]`;
  for (const [pid, label] of pids) {
    const dir = `/proc/${pid}/fd`;
    const fds = await fs.readdir(dir).catch(() => [] as string[]);
    for (const fd of fds) {
      if ((await fs.readlink(`${dir}/${fd}`).catch(() => '')) === want) return label;
    }
  }
  return undefined;
}
