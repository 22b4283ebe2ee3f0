/**
 * A bare TCP client of the main port, for requests no SDK would send (huge or malformed lines, frames
 * before authentication), and the broker process's memory as /proc shows it.
 */
import fs from 'node:fs';
import net from 'node:net';
import type { BrokerProcess } from './launcher.js';

/** A 4-byte big-endian length, then `body`. */
export function frame(body: Buffer | string): Buffer {
  const b = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
  const h = Buffer.alloc(4);
  h.writeUInt32BE(b.length, 0);
  return Buffer.concat([h, b]);
}

/** Writes frames as given and splits the replies into frames (text). */
export class RawClient {
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private readonly frames: Buffer[] = [];
  private waiter: (() => void) | undefined;
  closed = false;
  readonly closedP: Promise<void>;

  private constructor(readonly socket: net.Socket) {
    socket.on('data', (d: Buffer) => {
      this.pending.push(d);
      this.pendingBytes += d.length;
      this.split();
      this.waiter?.();
    });
    socket.on('error', () => {});
    this.closedP = new Promise((resolve) =>
      socket.once('close', () => {
        this.closed = true;
        this.waiter?.();
        resolve();
      }),
    );
  }

  static connect(port: number): Promise<RawClient> {
    return new Promise((resolve, reject) => {
      const s = net.connect({ host: '127.0.0.1', port });
      s.once('connect', () => resolve(new RawClient(s)));
      s.once('error', reject);
    });
  }

  private split(): void {
    for (;;) {
      if (this.pendingBytes < 4) return;
      const head = this.pending[0]!.length >= 4 ? this.pending[0]! : Buffer.concat(this.pending);
      const len = head.readUInt32BE(0);
      // Joined only once the whole frame is there: a 64 MiB reply arrives in thousands of chunks.
      if (this.pendingBytes < 4 + len) {
        if (head !== this.pending[0]) this.pending = [head];
        return;
      }
      const buf = this.pending.length === 1 ? this.pending[0]! : Buffer.concat(this.pending);
      this.frames.push(buf.subarray(4, 4 + len));
      const rest = buf.subarray(4 + len);
      this.pending = rest.length > 0 ? [rest] : [];
      this.pendingBytes = rest.length;
    }
  }

  /** Sends one framed body. */
  send(body: Buffer | string): void {
    this.socket.write(frame(body));
  }

  /** The next reply frame; throws when the connection closes first or nothing comes in time. */
  async nextFrame(timeoutMs = 60_000): Promise<Buffer> {
    const deadline = Date.now() + timeoutMs;
    while (this.frames.length === 0) {
      if (this.closed) throw new Error('connection closed before a reply');
      const left = deadline - Date.now();
      if (left <= 0) throw new Error('no reply in time');
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiter = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.waiter = undefined;
    }
    return this.frames.shift()!;
  }

  /** The next reply frame as text. */
  async next(timeoutMs = 60_000): Promise<string> {
    return (await this.nextFrame(timeoutMs)).toString('utf8');
  }

  async command(line: string | Buffer, timeoutMs?: number): Promise<string> {
    this.send(line);
    return this.next(timeoutMs);
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** The broker process's peak resident memory so far (VmHWM), in MB. */
export function peakRssMb(broker: BrokerProcess): number {
  const status = fs.readFileSync(`/proc/${broker.proc!.pid}/status`, 'utf8');
  const kb = /VmHWM:\s+(\d+)/.exec(status);
  if (!kb) throw new Error('no VmHWM in /proc status');
  return Number(kb[1]) / 1024;
}
