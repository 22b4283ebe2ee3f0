import net from 'node:net';
import tls from 'node:tls';
import type { Logger } from '../common/logger.js';
import { parseAddress } from 'tributary-protocol/address.js';
import type { BrokerRegistration } from './broker-registry.js';

/** How long a reconnect may take before it counts as failed. */
const CONNECT_TIMEOUT_MS = 500;

interface Watched {
  address: string;
  lease: string | undefined;
  socket: net.Socket | null;
  closed: boolean;
  /** The TLS handshake failed and was logged (once per watch). */
  tlsWarned?: boolean;
}

/**
 * The controller's fast death detection. A lease expires TTL seconds after a broker dies, but when its
 * process dies the kernel closes its connections at once: the controller keeps an idle TCP connection to
 * every broker, and when one closes and the broker's port then refuses connections, the process is gone
 * and its lease is revoked (same effect as expiry, seconds earlier). A paused or partitioned broker keeps
 * its connections or cannot be told from a slow one; it is left to its lease.
 */
export class LivenessProbe {
  private readonly watched = new Map<number, Watched>();
  private readonly timer: NodeJS.Timeout;
  private stopped = false;

  constructor(
    private readonly deps: {
      selfId: number;
      active: () => boolean;
      brokers: () => BrokerRegistration[];
      logger: Logger;
      onDead: (b: { id: number; lease: string | undefined }) => void;
      lease?: (id: number) => string | undefined;
      /** Inter-broker TLS: a watch connection is one that completed a handshake with the peer. */
      tls?: tls.ConnectionOptions;
    },
  ) {
    this.timer = setInterval(() => this.sync(), 250);
    this.timer.unref();
  }

  close(): void {
    this.stopped = true;
    clearInterval(this.timer);
    for (const w of this.watched.values()) this.drop(w);
    this.watched.clear();
  }

  /** Watches exactly the live brokers (other than this one) while this broker is controller. */
  private sync(): void {
    const want = this.deps.active() ? this.deps.brokers().filter((b) => b.id !== this.deps.selfId) : [];
    const ids = new Set(want.map((b) => b.id));
    for (const [id, w] of this.watched) {
      if (!ids.has(id)) {
        this.drop(w);
        this.watched.delete(id);
      }
    }
    for (const b of want) {
      const w = this.watched.get(b.id);
      const lease = this.deps.lease?.(b.id);
      if (w && w.address === b.advertisedAddress && w.lease === lease) continue;
      if (w) this.drop(w);
      const fresh: Watched = { address: b.advertisedAddress, lease, socket: null, closed: false };
      this.watched.set(b.id, fresh);
      this.connect(b.id, fresh, false);
    }
  }

  private drop(w: Watched): void {
    w.closed = true;
    w.socket?.destroy();
    w.socket = null;
  }

  /** `probing`: a reconnect after a close; its refusal means the process is gone. */
  private connect(id: number, w: Watched, probing: boolean): void {
    if (this.stopped || w.closed) return;
    const { host, port } = parseAddress(w.address);
    const peerTls = this.deps.tls;
    // A TLS listener would close a connection that never handshakes (its handshake timeout), which would
    // look like a death; over TLS the idle connection is a verified one, like the peers' own.
    const socket = peerTls ? tls.connect({ ...(net.isIP(host) === 0 ? { servername: host } : {}), ...peerTls, host, port }) : net.connect({ host, port });
    w.socket = socket;
    const timer = setTimeout(() => socket.destroy(new Error('connect timeout')), CONNECT_TIMEOUT_MS);
    let connected = false;
    let connectedAt = 0;
    let secured = false;
    socket.on('connect', () => {
      // The TCP connection alone says the process is alive, handshake or not.
      connected = true;
      connectedAt = performance.now();
      clearTimeout(timer);
      socket.setKeepAlive(true, 1000);
    });
    socket.on('secureConnect', () => {
      secured = true;
    });
    socket.on('data', () => {}); // the broker may answer; nothing to read
    let error: NodeJS.ErrnoException | undefined;
    socket.on('error', (e: NodeJS.ErrnoException) => {
      error = e;
    });
    socket.on('close', () => {
      clearTimeout(timer);
      if (w.closed || this.stopped || w.socket !== socket) return;
      w.socket = null;
      if (connected && peerTls && !secured) {
        // The handshake did not complete. A probe closed without a word from the peer's TLS (reset, end)
        // stays a probe: a dying process's kernel can still complete a TCP connection its listener never
        // hands over, and the next refusal is the death. Otherwise the peer is alive and its handshake
        // failed (a certificate the inter-broker CA does not vouch for): not a death. Either way, try
        // again later rather than in a loop.
        const stillProbing = probing && (error === undefined || error.code === 'ECONNRESET' || error.code === 'EPIPE');
        if (!stillProbing && !w.tlsWarned) this.deps.logger.warn({ broker: id, address: w.address, error: error?.code }, 'liveness probe: TLS handshake with broker failed');
        if (!stillProbing) w.tlsWarned = true;
        setTimeout(() => this.connect(id, w, stillProbing), 1000).unref();
      } else if (connected) {
        // Closed under us: look again right away, unless the peer closes every connection as soon as it
        // is made (it refuses this broker's certificate, say): then once a second, not in a loop.
        if (performance.now() - connectedAt >= 1000) this.connect(id, w, true);
        else setTimeout(() => this.connect(id, w, true), 1000).unref();
      } else if (probing) {
        this.deps.onDead({ id, lease: w.lease });
        // Keep watching: a restart registers anew and sync() starts over.
        setTimeout(() => this.connect(id, w, false), 1000).unref();
      } else {
        setTimeout(() => this.connect(id, w, false), 500).unref();
      }
    });
  }
}
