/**
 * The producer's sender against a scripted in-process server (no broker): lingering into one frame,
 * the in-flight limit, NOT_LEADER redirects, retries of lost connections in send order, request
 * timeouts, non-retriable errors and exhausted retries.
 */
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { Producer, type ProducerOptions } from '../../../src/client/producer.js';
import { type Batch, decodeBatch } from '../../../src/protocol/batch.js';
import { parseLine } from '../../../src/protocol/command.js';
import { FrameDecoder, encodeFrame } from '../../../src/protocol/frame.js';

type Reply = string | 'hang' | 'close' | Promise<string>;

interface Received {
  conn: number;
  batch: Batch;
}

/** Speaks the framing; answers NEGOTIATE and METADATA itself and batches with `onBatch`. */
class FakeBroker {
  readonly batches: Received[] = [];
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();
  private conns = 0;
  port = 0;
  leaders: string[] = [];
  onBatch: (b: Batch, conn: number, n: number) => Reply = (b) => ack(b, this.nextOffset(b));
  private readonly offsets = new Map<number, number>();

  constructor(readonly partitions: number) {
    this.server = net.createServer((s) => this.accept(s));
  }

  static async start(partitions = 1): Promise<FakeBroker> {
    const f = new FakeBroker(partitions);
    await new Promise<void>((r) => f.server.listen(0, '127.0.0.1', () => r()));
    f.port = (f.server.address() as net.AddressInfo).port;
    f.leaders = Array.from({ length: partitions }, () => f.address);
    return f;
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  nextOffset(b: Batch): number {
    const base = this.offsets.get(b.partition) ?? 0;
    this.offsets.set(b.partition, base + b.records.length);
    return base;
  }

  values(): string[] {
    return this.batches.flatMap((r) => r.batch.records.map((x) => x.value.toString()));
  }

  private accept(socket: net.Socket): void {
    const id = ++this.conns;
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    socket.on('error', () => {});
    const decoder = new FrameDecoder();
    let chain: Promise<void> = Promise.resolve();
    socket.on('data', (chunk) => {
      for (const body of decoder.push(chunk)) {
        // Recorded (and scripted) on arrival; answers go out in request order, as the broker's do.
        const reply = this.answer(body, id);
        if (reply === 'close') {
          socket.destroy();
          continue;
        }
        chain = chain.then(async () => {
          const text = await reply;
          if (text === 'hang') return new Promise<void>(() => {});
          if (text === 'close') {
            socket.destroy();
            return;
          }
          if (!socket.destroyed) socket.write(encodeFrame(text));
        });
      }
    });
  }

  private answer(body: Buffer, conn: number): Reply {
    if (body[0] === 0xba && body[1] === 0x7c) {
      const batch = decodeBatch(body, { extensions: true });
      this.batches.push({ conn, batch });
      return this.onBatch(batch, conn, this.batches.length);
    }
    const line = parseLine(body.toString('utf8'));
    switch (line.head.toUpperCase()) {
      case 'NEGOTIATE':
        return `OK protocol_version=1 enabled=${line.params.get('features')} unsupported=`;
      case 'METADATA':
        return `OK topic=${line.params.get('topic')} partitions=${this.partitions} leaders=${this.leaders.join(',')} epochs=${this.leaders.map(() => 0).join(',')}`;
      default:
        return `ERROR: unknown_command command=${line.head} class=validation retryable=false`;
    }
  }

  dropConnections(): void {
    for (const s of this.sockets) s.destroy();
  }

  async close(): Promise<void> {
    this.dropConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

function ack(b: Batch, base: number): string {
  return JSON.stringify({ status: 'OK', partition: b.partition, base_offset: base, last_offset: base + b.records.length - 1, count: b.records.length });
}

const notLeader = (addr: string) => `ERROR: NOT_LEADER LEADER_IS ${addr} class=routing retryable=true`;
const FAST = { initialDelayMs: 1, maxDelayMs: 5 };
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

describe('Producer sender (scripted server)', () => {
  const brokers: FakeBroker[] = [];
  const producers: Producer[] = [];

  async function broker(partitions = 1): Promise<FakeBroker> {
    const b = await FakeBroker.start(partitions);
    brokers.push(b);
    return b;
  }

  function producer(b: FakeBroker, opts: Partial<ProducerOptions> = {}): Producer {
    const p = new Producer({ brokers: [b.address], retry: FAST, ...opts });
    producers.push(p);
    return p;
  }

  afterEach(async () => {
    await Promise.all(producers.splice(0).map((p) => p.close({ signal: AbortSignal.timeout(2000) }).catch(() => {})));
    await Promise.all(brokers.splice(0).map((b) => b.close()));
  });

  it('records of separate sends within lingerMs go out as one batch frame with the configured acks', async () => {
    const b = await broker(1);
    const p = producer(b, { lingerMs: 30, acks: 1 });
    const meta = await Promise.all([p.send({ topic: 't', messages: [{ value: 'a' }] }), p.send({ topic: 't', messages: [{ value: 'b' }, { value: 'c' }] })]);
    expect(meta.flat().map((m) => m.offset)).toEqual([0, 1, 2]);
    expect(b.batches).toHaveLength(1);
    expect(b.batches[0]!.batch).toMatchObject({ topic: 't', partition: 0, acks: '1', idempotent: false });
    expect(b.values()).toEqual(['a', 'b', 'c']);
  });

  it('sends at most maxInFlightPerPartition batches of a partition before a reply', async () => {
    const b = await broker(1);
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    b.onBatch = (batch) => gate.then(() => ack(batch, b.nextOffset(batch)));
    const p = producer(b, { lingerMs: 0, maxBatchRecords: 1, maxInFlightPerPartition: 3 });
    const sends = Array.from({ length: 10 }, (_, i) => p.send({ topic: 't', messages: [{ value: `${i}` }] }));
    await sleep(100);
    expect(b.batches).toHaveLength(3);
    release();
    const meta = (await Promise.all(sends)).flat();
    expect(meta.map((m) => m.offset)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(b.values()).toEqual(['0', '1', '2', '3', '4', '5', '6', '7', '8', '9']);
  });

  it('NOT_LEADER LEADER_IS: the batch is retried on the named leader (retry event), and later batches follow it', async () => {
    const a = await broker(2);
    const b = await broker(2);
    a.onBatch = (batch) => (batch.partition === 1 ? notLeader(b.address) : ack(batch, a.nextOffset(batch)));
    const p = producer(a, { lingerMs: 0 });
    const retries: Array<{ partition: number; attempt: number }> = [];
    p.on('retry', (e) => retries.push(e));
    const [m] = await p.send({ topic: 't', messages: [{ value: 'moved', partition: 1 }] });
    expect(m).toEqual({ topic: 't', partition: 1, offset: 0 });
    expect(retries).toEqual([expect.objectContaining({ partition: 1, attempt: 1 })]);
    expect(a.values()).toEqual(['moved']); // refused there
    expect(b.values()).toEqual(['moved']);
    await p.send({ topic: 't', messages: [{ value: 'next', partition: 1 }, { value: 'stays', partition: 0 }] });
    expect(b.values()).toEqual(['moved', 'next']);
    expect(a.values()).toEqual(['moved', 'stays']);
  });

  it('a lost connection fails every batch in flight; they are retried on a new connection in send order', async () => {
    const b = await broker(1);
    let dropped = false;
    // The first connection answers nothing and drops when its fourth batch arrives.
    b.onBatch = (batch, conn) => {
      if (conn > 1) return ack(batch, b.nextOffset(batch));
      if (!dropped && b.batches.length === 4) {
        dropped = true;
        return 'close';
      }
      return 'hang';
    };
    const p = producer(b, { lingerMs: 0, maxBatchRecords: 1, maxInFlightPerPartition: 5 });
    const sends = Array.from({ length: 8 }, (_, i) => p.send({ topic: 't', messages: [{ value: `${i}` }] }));
    const meta = (await Promise.all(sends)).flat();
    const second = b.batches.filter((r) => r.conn > 1).map((r) => r.batch.records[0]!.value.toString());
    // every record arrived on the new connection, in the order sent
    expect(second).toEqual(['0', '1', '2', '3', '4', '5', '6', '7']);
    expect(meta.map((m) => m.offset)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it('a reply that does not come within requestTimeoutMs fails the attempt; the retry gets through', async () => {
    const b = await broker(1);
    b.onBatch = (batch, conn) => (conn === 1 ? 'hang' : ack(batch, b.nextOffset(batch)));
    const p = producer(b, { lingerMs: 0, requestTimeoutMs: 150 });
    const errors: string[] = [];
    p.on('retry', (e) => errors.push((e.error as { code?: string }).code ?? ''));
    const t0 = Date.now();
    const [m] = await p.send({ topic: 't', messages: [{ value: 'slow' }] });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(140);
    expect(m!.offset).toBe(0);
    expect(errors[0]).toBe('request_timeout');
    // the first attempt may have been appended by a real broker: at-least-once, a duplicate is possible
    expect(b.values()).toEqual(['slow', 'slow']);
  });

  it('a non-retriable error fails the send at once; exhausted retries fail it with the last error', async () => {
    const b = await broker(1);
    b.onBatch = () => 'ERROR: invalid_batch reason=nope class=validation retryable=false';
    const p = producer(b, { lingerMs: 0, retry: { ...FAST, retries: 3 } });
    const errors: unknown[] = [];
    p.on('error', (e) => errors.push(e));
    await expect(p.send({ topic: 't', messages: [{ value: 'x' }] })).rejects.toMatchObject({ code: 'invalid_batch' });
    expect(b.batches).toHaveLength(1);
    expect(errors).toEqual([expect.objectContaining({ topic: 't', partition: 0, records: 1 })]);

    b.onBatch = () => 'ERROR: not_ready class=availability retryable=true';
    await expect(p.send({ topic: 't', messages: [{ value: 'y' }] })).rejects.toMatchObject({ code: 'not_ready' });
    expect(b.batches).toHaveLength(1 + 4); // first attempt + 3 retries
    expect(p.bufferedBytes).toBe(0);
  });
});
