/**
 * The part of a net.Socket the broker's ClientConnection uses, recording what it is asked to do: unit
 * tests drive a connection with it, without a network.
 */
import { EventEmitter } from 'node:events';
import type net from 'node:net';
import { ClientConnection } from 'tributary-broker/broker/client-connection.js';
import { FrameDecoder } from 'tributary-protocol/frame.js';

/** The broker a ClientConnection runs in (a test fakes the parts it reaches). */
export type ConnectionBroker = ConstructorParameters<typeof ClientConnection>[1];

/** A ClientConnection on `socket`, admitting every request. */
export function connectFake(socket: FakeClientSocket, broker: ConnectionBroker): ClientConnection {
  return new ClientConnection(
    socket as unknown as net.Socket,
    broker,
    () => undefined,
    () => {},
  );
}

export class FakeClientSocket extends EventEmitter {
  readonly remoteAddress = '127.0.0.1';
  readonly remotePort = 40000;
  readonly writableLength = 0;
  readonly written: Buffer[] = [];
  ended = false;
  destroyed = false;
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
    return this;
  }
  resume(): this {
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
