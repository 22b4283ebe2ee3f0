/**
 * The liveness probe (cluster/liveness-probe.ts) against real sockets standing in for a peer broker: a
 * watch that closes and is then refused is a death; a peer that is up but fails the TLS handshake is not.
 * The dying peer's kernel may still complete one more TCP connection that its listener never hands over
 * (the listening socket outlives the established ones by a moment): over TLS that connection closes
 * before any handshake, and the refusal after it must still count as the death.
 */
import net from 'node:net';
import tls from 'node:tls';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { LivenessProbe } from 'tributary-broker/cluster/liveness-probe.js';
import type { BrokerRegistration } from 'tributary-broker/cluster/broker-registry.js';
import type { Logger } from 'tributary-broker/common/logger.js';
import { makeCa, makeCert, type Pem } from '../../integration/security/pki.js';
import { removeDir, tempDir } from '../../helpers/util.js';

/** A peer's listener: `tls` completes handshakes; `accept-then-drop` takes TCP connections and drops them. */
class FakePeer {
  readonly server = net.createServer((s) => this.onConnection(s));
  readonly sockets = new Set<net.Socket>();
  connections = 0;
  mode: 'serve' | 'accept-then-drop' = 'serve';
  private onAccept: (() => void) | undefined;

  constructor(private readonly secure?: tls.Server) {}

  async listen(): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return (this.server.address() as net.AddressInfo).port;
  }

  /** Resolves once a watch is up: accepted and, over TLS, handshaken. */
  watched(): Promise<void> {
    if (!this.secure) return this.accepted(1);
    const secure = this.secure;
    return new Promise((resolve) => secure.once('secureConnection', () => resolve()));
  }

  /** Resolves when `n` connections in all have been accepted. */
  accepted(n: number): Promise<void> {
    return new Promise((resolve) => {
      const check = () => {
        if (this.connections < n) return;
        this.onAccept = undefined;
        resolve();
      };
      this.onAccept = check;
      check();
    });
  }

  private onConnection(s: net.Socket): void {
    this.connections++;
    this.sockets.add(s);
    s.on('close', () => this.sockets.delete(s));
    s.on('error', () => {});
    if (this.mode === 'accept-then-drop') {
      s.destroy();
      // The listener goes with the process: the next connection is refused.
      this.server.close();
    } else if (this.secure) this.secure.emit('connection', s);
    this.onAccept?.();
  }

  /** kill -9: established connections close; the listener goes after them. */
  die(lastAcceptedBeforeListenerCloses: boolean): void {
    for (const s of this.sockets) s.destroy();
    if (lastAcceptedBeforeListenerCloses) this.mode = 'accept-then-drop';
    else this.server.close();
  }

  close(): void {
    for (const s of this.sockets) s.destroy();
    this.server.close();
  }
}

describe('LivenessProbe', () => {
  let dir: string;
  let ca: Pem;
  let peerCert: Pem;
  let foreignCert: Pem;
  const cleanup: Array<() => void> = [];

  beforeAll(async () => {
    dir = await tempDir('tributary-liveness-');
    ca = makeCa(dir, 'ca');
    peerCert = makeCert(dir, ca, 'peer', 'broker-1');
    foreignCert = makeCert(dir, makeCa(dir, 'other'), 'foreign', 'broker-1');
  });

  afterEach(() => {
    for (const f of cleanup.splice(0)) f();
  });

  afterAll(async () => {
    if (dir) await removeDir(dir);
  });

  const warnings: string[] = [];
  const warned: unknown[] = [];
  const logger = {
    warn: (fields: unknown, msg: string) => {
      warnings.push(msg);
      warned.push(fields);
    },
    info: () => {},
    debug: () => {},
  } as unknown as Logger;

  async function start(opts: { cert?: Pem }): Promise<{ peer: FakePeer; dead: Array<{ id: number; lease: string | undefined }>; died: Promise<void>; watching: Promise<void> }> {
    const secure = opts.cert ? tls.createServer({ cert: opts.cert.cert, key: opts.cert.key }) : undefined;
    secure?.on('tlsClientError', () => {});
    const peer = new FakePeer(secure);
    const port = await peer.listen();
    const watching = peer.watched();
    const dead: Array<{ id: number; lease: string | undefined }> = [];
    let onDead!: () => void;
    const died = new Promise<void>((resolve) => (onDead = resolve));
    const registration = { id: 1, host: '127.0.0.1', port, advertisedAddress: `127.0.0.1:${port}` } as BrokerRegistration;
    const probe = new LivenessProbe({
      selfId: 0,
      active: () => true,
      brokers: () => [registration],
      logger,
      lease: () => 'lease-1',
      tls: opts.cert ? { ca: ca.cert, cert: peerCert.cert, key: peerCert.key } : undefined,
      onDead: (b) => {
        dead.push(b);
        onDead();
      },
    });
    cleanup.push(() => probe.close(), () => peer.close());
    return { peer, dead, died, watching };
  }

  it('a plain peer whose watch closes and whose port then refuses is dead', async () => {
    const { peer, dead, died, watching } = await start({});
    await watching;
    peer.die(false);
    await died;
    expect(dead).toEqual([{ id: 1, lease: 'lease-1' }]);
  });

  it('over TLS too, also when the dying kernel completes one more TCP connection before the refusal', async () => {
    warnings.length = 0;
    const { peer, dead, died, watching } = await start({ cert: peerCert });
    await watching;
    peer.die(true);
    await died;
    // The reconnect the dying listener took, then the refused one.
    expect(peer.connections).toBe(2);
    expect(dead).toEqual([{ id: 1, lease: 'lease-1' }]);
    // A reset before the handshake is not a certificate problem: nothing to warn about.
    expect(warnings).toEqual([]);
  });

  it('a live peer whose certificate does not verify is warned about and never declared dead', async () => {
    warnings.length = 0;
    warned.length = 0;
    const { peer, dead } = await start({ cert: foreignCert });
    // Three failed handshakes: the first watch and two retries a second apart.
    await peer.accepted(3);
    expect(warnings.filter((w) => w === 'liveness probe: TLS handshake with broker failed')).toHaveLength(1);
    // The probe's own verification of the peer's certificate failed: a TLS error, not a reset.
    expect((warned.at(-1) as { error?: string }).error).toMatch(/CERT|VERIFY|SELF_SIGNED/);
    expect(dead).toEqual([]);
  });
});
