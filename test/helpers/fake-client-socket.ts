/**
 * The part of a net.Socket the broker's ClientConnection uses, recording what it is asked to do: unit
 * tests drive a connection with it, without a network.
 */
import { EventEmitter } from 'node:events';
import type net from 'node:net';
import { ClientConnection } from 'tributary-broker/broker/client-connection.js';
import { type DirectReads, brokerFrameReader } from 'tributary-broker/broker/direct-reads.js';
import { FrameDecoder } from 'tributary-protocol/frame.js';

/** The broker a ClientConnection runs in (a test fakes the parts it reaches). */
export type ConnectionBroker = ConstructorParameters<typeof ClientConnection>[1];

/**
 * A ClientConnection on `socket`, admitting every request. `reads`: how the bytes given to arrive() reach
 * it, as 'data' chunks (a TLS connection's) or read into its FrameReader's buffers (a plain TCP one's,
 * direct-reads.ts).
 */
export function connectFake(socket: FakeClientSocket, broker: ConnectionBroker, reads: 'chunks' | 'direct' = 'chunks'): ClientConnection {
  const direct: DirectReads | undefined = reads === 'direct' ? { reader: brokerFrameReader(broker.config.maxFrameBytes, undefined), onRead: undefined, limit: undefined } : undefined;
  socket.direct = direct;
  // As Node does when the socket is made: the first read's buffer, before the connection exists.
  socket.target = direct?.reader.buffer(0);
  return new ClientConnection(
    socket as unknown as net.Socket,
    broker,
    () => undefined,
    () => {},
    direct,
  );
}

export class FakeClientSocket extends EventEmitter {
  readonly remoteAddress = '127.0.0.1';
  readonly remotePort = 40000;
  readonly writableLength = 0;
  readonly written: Buffer[] = [];
  ended = false;
  destroyed = false;
  /** Set by connectFake for a connection that reads into its FrameReader. */
  direct: DirectReads | undefined;
  /** Where the next read lands: what the reader's buffer() gave after the last read, as Node keeps it. */
  target: Buffer | undefined;
  private paused = false;

  /** Bytes the client sent that a paused direct reader has not read yet (the kernel's buffer). */
  private unread: Buffer = Buffer.alloc(0);

  /** Bytes from the client: one 'data' chunk, or as many reads as the reader's buffers take (none while paused). */
  arrive(bytes: Buffer): void {
    if (!this.direct) {
      this.emit('data', bytes);
      return;
    }
    this.unread = Buffer.concat([this.unread, bytes]);
    this.readUnread();
  }

  private readUnread(): void {
    const d = this.direct!;
    while (this.unread.length > 0 && !this.paused && !this.destroyed) {
      const target = this.target!;
      const n = Math.min(target.length, this.unread.length);
      this.unread.copy(target, 0, 0, n);
      this.unread = this.unread.subarray(n);
      const more = d.onRead?.(n) ?? false;
      // Node asks for the next read's buffer after each read, whatever the callback returned.
      this.target = d.reader.buffer(d.limit?.() ?? 0);
      if (!more) this.paused = true;
    }
  }

  setNoDelay(): this {
    return this;
  }
  setTimeout(): this {
    return this;
  }
  write(b: Buffer): boolean {
    this.written.push(Buffer.from(b));
    return true;
  }
  cork(): void {}
  uncork(): void {}
  pause(): this {
    this.paused = true;
    return this;
  }
  resume(): this {
    const was = this.paused;
    this.paused = false;
    if (was && this.direct) queueMicrotask(() => this.readUnread());
    return this;
  }
  end(): this {
    this.ended = true;
    return this;
  }
  destroy(): this {
    if (!this.destroyed) {
      this.destroyed = true;
      this.emit('close');
    }
    return this;
  }
  /** The text frames written so far. */
  replies(): string[] {
    return new FrameDecoder().push(Buffer.concat(this.written)).map((b) => b.toString('utf8'));
  }
}
