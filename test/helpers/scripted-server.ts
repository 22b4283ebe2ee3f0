/**
 * A tiny TCP server that speaks Tributary's framing (4-byte big-endian length + body) and answers what the
 * test scripts, per command name. It records every request it receives, so routing tests can count where
 * each command went. No broker logic at all: NEGOTIATE gets a default answer unless scripted.
 *
 * Script replies:
 *  - a string: one text frame (`OK ...`, `ERROR: ...`, JSON);
 *  - a Buffer: one frame with that body (e.g. an encoded batch, or a malformed one);
 *  - 'close': the server destroys the connection without replying;
 *  - 'garbage': one frame whose body is a malformed binary batch (magic 0xBA7C, then truncated);
 *  - 'huge': a frame header declaring 0xFFFFFFF0 bytes, followed by a few bytes of body;
 *  - 'partial': the first half of a frame (header declaring 100 bytes, 10 of them sent), then a close;
 *  - 'hang': no reply, ever (later requests on the connection wait behind it, as on a real broker);
 *  - undefined: the default handler (or `ERROR: unknown_command` when there is none).
 */
import net from 'node:net';
import { type ParsedLine, parseLine } from 'tributary-protocol/command.js';
import { encodeFrame, FrameDecoder } from 'tributary-protocol/frame.js';
import { sleep } from './util.js';

export type ScriptReply = string | Buffer | 'close' | 'garbage' | 'huge' | 'partial' | 'hang' | undefined;

export interface ScriptedConn {
  /** Connection number on this server, from 1. */
  readonly id: number;
  readonly socket: net.Socket;
  /** Requests answered or pending on this connection, in order. */
  readonly requests: RecordedRequest[];
  /** Writes raw bytes (no framing): for hand-made broken frames. */
  writeRaw(bytes: Buffer): void;
  /** Sends one frame outside the request/reply order (e.g. a pushed STREAM batch or a keepalive). */
  push(body: Buffer | string): void;
}

export interface RecordedRequest {
  /** Upper-cased command name; `BATCH` for a binary batch frame. */
  command: string;
  line: ParsedLine | undefined;
  body: Buffer;
  conn: number;
  at: number;
}

export type Script = (line: ParsedLine, conn: ScriptedConn, req: RecordedRequest) => ScriptReply | Promise<ScriptReply>;

export interface ScriptedServerOptions {
  /** Handlers by upper-cased command name; '*' catches the rest. */
  script?: Record<string, Script>;
  /** Features NEGOTIATE reports enabled (default: every one the client asks for except record_extensions_v1). */
  features?: string[];
}

/** The malformed batch body 'garbage' sends: the magic and a topic length, then nothing. */
export const MALFORMED_BATCH = Buffer.from([0xba, 0x7c, 0x00, 0x40, 0x61, 0x62]);

export class ScriptedServer {
  readonly requests: RecordedRequest[] = [];
  readonly connections: ScriptedConn[] = [];
  script: Record<string, Script>;
  /** Answers binary batch frames (which have no command line for `script`); default: unknown_command. */
  onBatch: ((body: Buffer, conn: ScriptedConn, req: RecordedRequest) => ScriptReply | Promise<ScriptReply>) | undefined;
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();
  port = 0;

  private constructor(private readonly opts: ScriptedServerOptions) {
    this.script = { ...(opts.script ?? {}) };
    this.server = net.createServer((s) => this.onConnection(s));
  }

  static async start(opts: ScriptedServerOptions = {}): Promise<ScriptedServer> {
    const s = new ScriptedServer(opts);
    await new Promise<void>((resolve, reject) => {
      s.server.once('error', reject);
      s.server.listen(0, '127.0.0.1', () => resolve());
    });
    s.port = (s.server.address() as net.AddressInfo).port;
    return s;
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** Sets (or replaces) the handler of one command. */
  on(command: string, handler: Script): this {
    this.script[command.toUpperCase()] = handler;
    return this;
  }

  /** Requests received for one command (upper-cased name), excluding NEGOTIATE unless asked. */
  received(command?: string): RecordedRequest[] {
    if (command) return this.requests.filter((r) => r.command === command.toUpperCase());
    return this.requests.filter((r) => r.command !== 'NEGOTIATE');
  }

  count(command: string): number {
    return this.received(command).length;
  }

  private onConnection(socket: net.Socket): void {
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    socket.on('error', () => {});
    const decoder = new FrameDecoder();
    const conn: ScriptedConn = {
      id: this.connections.length + 1,
      socket,
      requests: [],
      writeRaw: (bytes) => {
        if (!socket.destroyed) socket.write(bytes);
      },
      push: (body) => {
        if (!socket.destroyed) socket.write(encodeFrame(body));
      },
    };
    this.connections.push(conn);
    // Replies go out in request order, like the broker's: one chain per connection.
    let chain: Promise<void> = Promise.resolve();
    socket.on('data', (chunk) => {
      let frames: Buffer[];
      try {
        frames = decoder.push(chunk);
      } catch {
        socket.destroy();
        return;
      }
      for (const body of frames) {
        if (body.length === 0) continue; // keepalive
        chain = chain
          .then(() => this.answer(conn, body))
          .catch(() => {
            socket.destroy();
          });
      }
    });
  }

  private async answer(conn: ScriptedConn, body: Buffer): Promise<void> {
    const isBatch = body.length >= 2 && body[0] === 0xba && body[1] === 0x7c;
    let line: ParsedLine | undefined;
    if (!isBatch) {
      try {
        line = parseLine(body.toString('utf8'));
      } catch {
        line = undefined;
      }
    }
    const command = isBatch ? 'BATCH' : (line?.head.toUpperCase() ?? '?');
    const req: RecordedRequest = { command, line, body, conn: conn.id, at: Date.now() };
    this.requests.push(req);
    conn.requests.push(req);
    const handler = this.script[command] ?? this.script['*'];
    let reply: ScriptReply;
    if (handler && line) reply = await handler(line, conn, req);
    else if (isBatch && this.onBatch) reply = await this.onBatch(body, conn, req);
    if (reply === undefined) reply = this.defaultReply(command, line);
    const socket = conn.socket;
    if (socket.destroyed) return;
    if (reply === 'hang') return new Promise<void>(() => {}); // holds every later reply of the connection
    if (reply === 'close') {
      socket.destroy();
      return;
    }
    if (reply === 'garbage') {
      socket.write(encodeFrame(MALFORMED_BATCH));
      return;
    }
    if (reply === 'huge') {
      const h = Buffer.alloc(4);
      h.writeUInt32BE(0xfffffff0, 0);
      socket.write(Buffer.concat([h, Buffer.from('OK partial body')]));
      return;
    }
    if (reply === 'partial') {
      const h = Buffer.alloc(4);
      h.writeUInt32BE(100, 0);
      socket.write(Buffer.concat([h, Buffer.from('OK 123456')]));
      await sleep(20);
      socket.destroy();
      return;
    }
    socket.write(encodeFrame(reply));
  }

  private nextProducerId = 1000;

  private defaultReply(command: string, line: ParsedLine | undefined): string {
    if (command === 'NEGOTIATE') {
      const asked = (line?.params.get('features') ?? '').split(',').filter(Boolean);
      const enabled = this.opts.features ?? asked.filter((f) => f !== 'record_extensions_v1');
      return `OK protocol_version=1 enabled=${enabled.join(',')} unsupported=`;
    }
    // Idempotent producers ask for their id before their first batch: a broker hands out a new one each time.
    if (command === 'INIT_PRODUCER_ID' && !line?.params.has('transactional_id')) return `OK producerId=${this.nextProducerId++} epoch=0`;
    return `ERROR: unknown_command command=${command} class=validation retryable=false`;
  }

  /** Drops every open connection (the listener stays up). */
  dropConnections(): void {
    for (const s of this.sockets) s.destroy();
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** A loopback port nothing listens on (bound, read, released). */
export async function deadPort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

/** A loopback port that was free a moment ago (for brokers that must come back on the same port). */
export const freePort = deadPort;
