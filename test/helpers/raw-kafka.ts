/**
 * Test tools for the Kafka port: a bare Kafka connection (request bytes out, response frames in, and
 * whether the broker hung up) and kcat run as a child process.
 */
import { execFile } from 'node:child_process';
import net from 'node:net';
import { apiByKey } from 'tributary-broker/kafka/protocol/apis.js';
import { decodeResponse, encodeRequest } from 'tributary-broker/kafka/protocol/headers.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';

export const ZERO_UUID = '00000000-0000-0000-0000-000000000000';

/** kcat with `args`, `input` on its stdin; rejects with its stderr when it exits non-zero. */
export function kcat(args: string[], input?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile('kcat', args, { timeout: 30_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`kcat ${args.join(' ')}: ${err.message}\n${stderr}`)) : resolve(stdout),
    );
    child.stdin!.end(input ?? '');
  });
}

export class RawKafka {
  private buf = Buffer.alloc(0);
  private waiting: ((f: Buffer) => void) | undefined;
  private readonly frames: Buffer[] = [];
  readonly closed: Promise<void>;

  private constructor(readonly socket: net.Socket) {
    socket.on('data', (d: Buffer) => {
      this.buf = Buffer.concat([this.buf, d]);
      while (this.buf.length >= 4 && this.buf.length >= 4 + this.buf.readInt32BE(0)) {
        const frame = this.buf.subarray(4, 4 + this.buf.readInt32BE(0));
        this.buf = this.buf.subarray(4 + frame.length);
        if (this.waiting) {
          const w = this.waiting;
          this.waiting = undefined;
          w(frame);
        } else this.frames.push(frame);
      }
    });
    socket.on('error', () => {});
    this.closed = new Promise((resolve) => socket.once('close', () => resolve()));
  }

  static connect(port: number): Promise<RawKafka> {
    return new Promise((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1', () => resolve(new RawKafka(s)));
      s.once('error', reject);
    });
  }

  next(): Promise<Buffer> {
    const f = this.frames.shift();
    if (f) return Promise.resolve(f);
    return new Promise((resolve) => (this.waiting = resolve));
  }

  async call(key: number, version: number, body: KafkaStruct): Promise<KafkaStruct> {
    const api = apiByKey(key)!;
    this.socket.write(encodeRequest(api, version, 7, 'raw', body));
    return decodeResponse(api, version, await this.next()).body;
  }

  /** Sends a request and resolves once the broker closed the connection, failing if it answered instead. */
  async closedBy(key: number, version: number, body: KafkaStruct): Promise<void> {
    this.socket.write(encodeRequest(apiByKey(key)!, version, 7, 'raw', body));
    const answered = this.next().then(() => 'answered' as const);
    const outcome = await Promise.race([this.closed.then(() => 'closed' as const), answered]);
    if (outcome !== 'closed') throw new Error(`${apiByKey(key)!.name} v${version} was answered, the connection was expected to close`);
  }
}
