/**
 * The producer's sender against a scripted in-process server (no broker): lingering into one frame,
 * the in-flight limit, NOT_LEADER redirects, retries of lost connections in send order, request
 * timeouts, non-retriable errors and exhausted retries; a stuck or frozen leader; idempotent retries
 * through a leader change and past a batch that failed for good.
 */
import net from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Producer, type ProducerOptions } from 'tributary-client/producer.js';
import { type Batch, decodeBatch } from 'tributary-protocol/batch.js';
import { parseLine } from 'tributary-protocol/command.js';
import { FrameDecoder, encodeFrame } from 'tributary-protocol/frame.js';
import { track, untilReal, useFakeTimersForIo } from '../../helpers/fake-timers.js';
import { sleep, until } from '../../helpers/util.js';

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
  /** Per-topic leaders for METADATA (default: `leaders`). */
  readonly topicLeaders = new Map<string, string[]>();
  /** A SIGSTOPped broker: requests are received, nothing is answered (the handshake neither). */
  frozen = false;
  onBatch: (b: Batch, conn: number, n: number) => Reply = (b) => ack(b, this.nextOffset(b));
  /** Topics whose METADATA is never answered. */
  readonly metadataHangs = new Set<string>();
  /** INIT_PRODUCER_ID is answered once this resolves (a slow id allocation). */
  initGate: Promise<void> | undefined;
  initRequests = 0;
  /** Runs before each METADATA answer (e.g. to move leadership once a stale answer went out). */
  beforeMetadata: (() => void) | undefined;
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

  /** Connections accepted so far. */
  get connectionCount(): number {
    return this.conns;
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
      if (this.frozen) return 'hang';
      return this.onBatch(batch, conn, this.batches.length);
    }
    if (this.frozen) return 'hang';
    const line = parseLine(body.toString('utf8'));
    switch (line.head.toUpperCase()) {
      case 'NEGOTIATE':
        return `OK protocol_version=1 enabled=${line.params.get('features')} unsupported=`;
      case 'METADATA': {
        this.beforeMetadata?.();
        const topic = line.params.get('topic')!;
        if (this.metadataHangs.has(topic)) return 'hang';
        const leaders = this.topicLeaders.get(topic) ?? this.leaders;
        return `OK topic=${topic} partitions=${this.topicLeaders.has(topic) ? leaders.length : this.partitions} leaders=${leaders.join(',')} epochs=${leaders.map(() => 0).join(',')}`;
      }
      case 'INIT_PRODUCER_ID':
        // An idempotent producer's id, asked for before its first batch.
        this.initRequests++;
        return this.initGate ? this.initGate.then(() => `OK producerId=${this.port} epoch=0`) : `OK producerId=${this.port} epoch=0`;
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

/**
 * One partition's idempotence check as the broker does it (src/partition/producer-state.ts): the next
 * sequence of the producer's epoch is appended, a remembered batch is answered again, anything else is
 * refused. `log` holds what was appended, in order.
 */
class Sequencer {
  epoch = -1;
  next = 0;
  readonly log: string[] = [];
  private readonly seen: Array<{ first: number; last: number; base: number }> = [];

  constructor(private readonly broker: FakeBroker) {}

  handle(b: Batch): string {
    const epoch = b.records[0]!.epoch;
    const first = b.firstSequence;
    if (epoch < this.epoch) return `ERROR: stale_producer_epoch class=fencing retryable=false epoch=${epoch} current_epoch=${this.epoch}`;
    if (epoch > this.epoch) {
      if (first !== 0) return outOfOrder(first, 0);
      this.epoch = epoch;
      this.next = 0;
      this.seen.length = 0;
    }
    const dup = this.seen.find((x) => x.first === first && x.last === b.lastSequence);
    if (dup) return ack(b, dup.base);
    if (first !== this.next) return outOfOrder(first, this.next);
    const base = this.broker.nextOffset(b);
    this.log.push(...b.records.map((r) => r.value.toString()));
    this.seen.push({ first, last: b.lastSequence, base });
    if (this.seen.length > 5) this.seen.shift();
    this.next = b.lastSequence + 1;
    return ack(b, base);
  }
}

const outOfOrder = (got: number, expected: number) => `ERROR: out_of_order_sequence class=conflict retryable=false sequence=${got} expected=${expected}`;

/** `p`, or a rejection once `ms` passed (a send that hangs fails the test instead of timing it out). */
function within<T>(ms: number, p: Promise<T>): Promise<T> {
  p.catch(() => {});
  return Promise.race([p, sleep(ms).then(() => Promise.reject(new Error(`no result within ${ms} ms`)))]);
}

const FAST = { initialDelayMs: 1, maxDelayMs: 5 };

/** Holds every batch's ack until the returned function is called. */
function holdAcks(b: FakeBroker): () => void {
  let release!: () => void;
  const gate = new Promise<void>((r) => {
    release = r;
  });
  b.onBatch = (batch) => gate.then(() => ack(batch, b.nextOffset(batch)));
  return release;
}

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
    vi.useRealTimers();
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

  it('lingerMs 0 sends at the end of the event-loop turn, without a timer: one burst is one batch', async () => {
    const b = await broker(2);
    const p = producer(b, { lingerMs: 0 });
    await p.send({ topic: 't', messages: [{ value: 'warm', partition: 0 }] }); // METADATA is cached
    // With every timer stopped, only the end of the loop's turn can send.
    useFakeTimersForIo();
    const burst = [
      p.send({ topic: 't', messages: [{ value: 'a', partition: 1 }] }),
      p.send({ topic: 't', messages: [{ value: 'b', partition: 1 }, { value: 'x', partition: 0 }] }),
      p.send({ topic: 't', messages: [{ value: 'c', partition: 1 }] }),
    ];
    await untilReal(() => b.batches.length === 3, 'the burst sent with the clock stopped');
    const meta = (await Promise.all(burst)).flat();
    expect(meta.map((m) => [m.partition, m.offset])).toEqual([
      [1, 0],
      [1, 1],
      [0, 1],
      [1, 2],
    ]);
    expect(b.batches.slice(1).map((x) => [x.batch.partition, x.batch.records.map((r) => r.value.toString())])).toEqual(
      expect.arrayContaining([
        [1, ['a', 'b', 'c']],
        [0, ['x']],
      ]),
    );
  });

  it('keys, values, headers and timestamps arrive as given; changing a message after send() changes nothing queued', async () => {
    const b = await broker(2);
    const p = producer(b, { lingerMs: 50 });
    const bytes = Buffer.from('bytes-value');
    const m1 = { key: 'k1', value: 'ü-string', headers: { trace: 'abc', bin: Buffer.from([1, 2]) }, timestamp: 1234, partition: 1 };
    // The first send waits for METADATA (it queues a snapshot), the second is queued at once (encoded).
    const first = p.send({ topic: 't', messages: [m1] });
    m1.value = 'changed';
    m1.headers.trace = 'changed';
    await first;
    const m2 = { key: new Uint8Array([7, 8]), value: bytes, headers: [{ key: 'x', value: 'a' }, { key: 'x', value: 'b' }], partition: 1 };
    const m3 = { value: new Uint8Array([9]), key: null, partition: 1 };
    const m4 = { key: 'k4', value: 'second', partition: 0 };
    const second = p.send({ topic: 't', messages: [m2, m3, m4] });
    m2.value = Buffer.from('changed');
    m2.headers[0]!.value = 'changed';
    bytes.fill(0x21);
    m4.partition = 1;
    const meta = [...(await first), ...(await second)];
    expect(meta.map((m) => [m.partition, m.offset])).toEqual([
      [1, 0],
      [1, 1],
      [1, 2],
      [0, 0],
    ]);
    const got = b.batches.flatMap((x) => x.batch.records.map((r) => ({ partition: x.batch.partition, key: r.key ? [...r.key] : null, value: r.value.toString(), ts: r.timestamp, headers: r.headers.map((h) => `${h.key}=${h.value.toString('hex')}`) })));
    expect(got).toEqual([
      { partition: 1, key: [...Buffer.from('k1')], value: 'ü-string', ts: 1234, headers: ['trace=616263', 'bin=0102'] },
      { partition: 1, key: [7, 8], value: 'bytes-value', ts: 0, headers: ['x=61', 'x=62'] },
      { partition: 1, key: null, value: '\t', ts: 0, headers: [] },
      { partition: 0, key: [...Buffer.from('k4')], value: 'second', ts: 0, headers: [] },
    ]);
  });

  it('string values of any UTF-8 length arrive whole, with string, byte, empty or no keys, with and without headers', async () => {
    const b = await broker(1);
    const p = producer(b);
    await p.send({ topic: 't', messages: [{ value: 'warm' }] }); // METADATA is cached: the rest is encoded at send()
    const values = ['', 'a', 'ü', '€uro', '😀😀', `${'x'.repeat(300)}ß`];
    const keys = [undefined, null, '', 'k', 'kü€', Buffer.from([1, 2, 3]), new Uint8Array(0)];
    const messages = values.flatMap((value) => keys.flatMap((key) => [{ key, value }, { key, value, headers: { h: 'ä' } }]));
    await p.send({ topic: 't', messages });
    const got = b.batches.slice(1).flatMap((x) => x.batch.records.map((r) => [r.key === null ? null : r.key.toString('hex'), r.value.toString(), r.headers.length]));
    const hex = (k: (typeof keys)[number]) => (k === undefined || k === null || k.length === 0 ? null : Buffer.from(k).toString('hex'));
    expect(got).toEqual(messages.map((m) => [hex(m.key), m.value, m.headers ? 1 : 0]));
  });

  it('a batch retried after a lost connection is resent byte for byte (records are encoded once, at send())', async () => {
    const b = await broker(1);
    let attempts = 0;
    b.onBatch = (batch) => (++attempts === 1 ? 'close' : ack(batch, b.nextOffset(batch)));
    const p = producer(b, { lingerMs: 20 });
    const messages = [{ key: 'a', value: 'one', headers: { h: 'v' } }, { value: Buffer.alloc(300, 7), timestamp: 99 }, { key: 'c', value: '' }];
    const meta = await within(5000, p.send({ topic: 't', messages: messages.map((m) => ({ ...m, partition: 0 })) }));
    expect(meta.map((m) => m.offset)).toEqual([0, 1, 2]);
    expect(b.batches).toHaveLength(2);
    expect(b.batches[1]!.batch).toEqual(b.batches[0]!.batch);
    expect(b.batches[1]!.batch.records.map((r) => r.value.length)).toEqual([3, 300, 0]);
  });

  it('sends at most maxInFlightPerPartition batches of a partition before a reply', async () => {
    const b = await broker(1);
    const release = holdAcks(b);
    const p = producer(b, { lingerMs: 0, maxBatchRecords: 1, maxInFlightPerPartition: 3 });
    const sends = Array.from({ length: 10 }, (_, i) => p.send({ topic: 't', messages: [{ value: `${i}` }] }));
    await sleep(100);
    expect(b.batches).toHaveLength(3);
    release();
    const meta = (await Promise.all(sends)).flat();
    expect(meta.map((m) => m.offset)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(b.values()).toEqual(['0', '1', '2', '3', '4', '5', '6', '7', '8', '9']);
  });

  it('a batch whose lingerMs is up keeps taking records while every in-flight slot is busy', async () => {
    const b = await broker(1);
    const release = holdAcks(b);
    const p = producer(b, { lingerMs: 1, maxInFlightPerPartition: 2 });
    const sends = [p.send({ topic: 't', messages: [{ value: 'r0' }] })];
    await untilReal(() => b.batches.length === 1, 'the first batch');
    sends.push(p.send({ topic: 't', messages: [{ value: 'r1' }] }));
    await untilReal(() => b.batches.length === 2, 'the second batch: both slots busy');
    // Records arriving one at a time, each after its batch's linger time: with the slots busy they all
    // wait in one batch instead of one batch each.
    for (let i = 2; i < 22; i++) {
      sends.push(p.send({ topic: 't', messages: [{ value: `r${i}` }] }));
      await sleep(3);
    }
    release();
    await Promise.all(sends);
    expect(b.batches.map((x) => x.batch.records.length)).toEqual([1, 1, 20]);
    expect(b.values()).toEqual(Array.from({ length: 22 }, (_, i) => `r${i}`));
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
    // The first connection with batches (lookups have their own) answers nothing and drops when its fourth batch arrives.
    let first: number | undefined;
    b.onBatch = (batch, conn) => {
      first ??= conn;
      if (conn !== first) return ack(batch, b.nextOffset(batch));
      if (!dropped && b.batches.length === 4) {
        dropped = true;
        return 'close';
      }
      return 'hang';
    };
    const p = producer(b, { lingerMs: 0, maxBatchRecords: 1, maxInFlightPerPartition: 5 });
    const sends = Array.from({ length: 8 }, (_, i) => p.send({ topic: 't', messages: [{ value: `${i}` }] }));
    const meta = (await Promise.all(sends)).flat();
    const second = b.batches.filter((r) => r.conn !== first).map((r) => r.batch.records[0]!.value.toString());
    // every record arrived on the new connection, in the order sent
    expect(second).toEqual(['0', '1', '2', '3', '4', '5', '6', '7']);
    expect(meta.map((m) => m.offset)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it('a reply that does not come within requestTimeoutMs fails the attempt; the retry gets through', async () => {
    const b = await broker(1);
    let first: number | undefined;
    b.onBatch = (batch, conn) => ((first ??= conn) === conn ? 'hang' : ack(batch, b.nextOffset(batch)));
    useFakeTimersForIo();
    // maxBatchRecords 1: each batch goes out on its append, no linger timer to run
    const p = producer(b, { lingerMs: 0, maxBatchRecords: 1, requestTimeoutMs: 150 });
    const errors: string[] = [];
    p.on('retry', (e) => errors.push((e.error as { code?: string }).code ?? ''));
    const send = track(p.send({ topic: 't', messages: [{ value: 'slow' }] }));
    await untilReal(() => b.batches.length === 1, 'the first attempt to arrive');
    // The clock has not moved since the batch went out: one tick short of requestTimeoutMs it still waits.
    await vi.advanceTimersByTimeAsync(149);
    expect(errors).toEqual([]);
    expect(send.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(errors).toEqual(['request_timeout']);
    await untilReal(() => send.settled, 'the retry to get through');
    const [m] = await send.promise;
    expect(m!.offset).toBe(0);
    // the first attempt may have been appended by a real broker: at-least-once, a duplicate is possible
    expect(b.values()).toEqual(['slow', 'slow']);
  });

  it('a send that finds the buffer full waits for room for requestTimeoutMs, then rejects with buffer_full', async () => {
    const b = await broker(1);
    useFakeTimersForIo();
    const p = producer(b, { lingerMs: 0, maxBatchRecords: 1, maxBufferedBytes: 1000, requestTimeoutMs: 400 });
    await p.send({ topic: 't', messages: [{ value: 'warm-up' }] }); // metadata and connection ready
    b.frozen = true; // nothing is acknowledged: the buffer stays full
    const holding = p.send({ topic: 't', messages: [{ value: Buffer.alloc(600, 1) }] });
    holding.catch(() => {});
    await untilReal(() => b.batches.length === 2, 'the first large batch to arrive');
    const waiting = track(p.send({ topic: 't', messages: [{ value: Buffer.alloc(600, 2) }] }));
    await vi.advanceTimersByTimeAsync(399);
    expect(waiting.settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(waiting.settled).toBe(true);
    const err = await waiting.promise.catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'buffer_full', retriable: true, fields: expect.objectContaining({ waitedMs: 400, max: 1000 }) });
    expect(b.batches).toHaveLength(2); // it never got into the buffer
    await p.close({ signal: AbortSignal.timeout(50) });
  });

  it('sends behind an idempotent producer\'s slow INIT_PRODUCER_ID wait for it, in order, not failing with buffer_full', async () => {
    const b = await broker(1);
    let release!: () => void;
    b.initGate = new Promise<void>((r) => {
      release = r;
    });
    useFakeTimersForIo();
    const p = producer(b, { idempotent: true, requestTimeoutMs: 400, stallTimeoutMs: 5000 });
    const sends = ['a', 'b', 'c'].map((value) => track(p.send({ topic: 't', messages: [{ value, partition: 0 }] })));
    await untilReal(() => b.initRequests === 1, 'the producer to ask for its id');
    // Past requestTimeoutMs with the buffer empty: nothing waits for room, so nothing is buffer_full.
    await vi.advanceTimersByTimeAsync(1000);
    expect(sends.map((x) => x.settled)).toEqual([false, false, false]);
    release();
    const offsets = await Promise.all(sends.map((x) => x.promise.then((m) => m[0]!.offset)));
    expect(offsets).toEqual([0, 1, 2]);
    expect(b.values()).toEqual(['a', 'b', 'c']);
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
  it('the retry budget counts from a batch’s creation: batches queued behind a failing one fail unsent once it is spent, not after a budget each', async () => {
    const b = await broker(1);
    b.onBatch = () => 'hang';
    const p = producer(b, { maxInFlightPerPartition: 1, maxBatchRecords: 1, requestTimeoutMs: 300, retry: { ...FAST, retries: 1, maxElapsedMs: 1000 } });
    p.on('error', () => {});
    const sends = Array.from({ length: 8 }, (_, i) => p.send({ topic: 't', messages: [{ value: `v${i}`, partition: 0 }] }).then(() => 'acked', (e: { code: string }) => e.code));
    const results = await Promise.all(sends);
    expect(results.every((r) => r !== 'acked')).toBe(true);
    // Attempts hang for requestTimeoutMs (300 ms): within the 1 s budget only the first batches get any;
    // without the bound every batch was sent and retried, one full budget after another.
    const sent = new Set(b.batches.map((r) => r.batch.records[0]!.value.toString()));
    expect(sent.size).toBeLessThan(8);
    expect(sent.has('v7')).toBe(false);
  });

  it('keyless records of new producers start on a random partition; a send with fields beside topic and messages is refused', async () => {
    const b = await broker(6);
    const first = new Set<number>();
    for (let i = 0; i < 12; i++) {
      const p = producer(b, { lingerMs: 0 });
      const [m] = await p.send({ topic: 't', messages: [{ value: `k${i}` }] });
      first.add(m!.partition);
    }
    // All 12 on one partition: (1/6)^11 by chance.
    expect(first.size).toBeGreaterThan(1);
    const p = producer(b);
    await expect(p.send({ topic: 't', messages: [{ value: 'x' }], partition: 1 } as never)).rejects.toMatchObject({ code: 'invalid_parameter', fields: { param: 'partition' } });
  });

  it("a send to a known topic is not held behind another topic's METADATA; sends to the waiting topic keep their order", async () => {
    const b = await broker(1);
    const p = producer(b, { lingerMs: 0, requestTimeoutMs: 1000 });
    await p.send({ topic: 'fast', messages: [{ value: 'warm' }] });
    b.metadataHangs.add('slow');
    const slow = [p.send({ topic: 'slow', messages: [{ value: 's1' }] }), p.send({ topic: 'slow', messages: [{ value: 's2' }] })];
    // Answered although the 'slow' sends wait (it waited for their turn, then failed buffer_full).
    const [m] = await p.send({ topic: 'fast', messages: [{ value: 'x' }] });
    expect(m).toMatchObject({ topic: 'fast', partition: 0 });
    b.metadataHangs.delete('slow');
    b.dropConnections(); // the hung METADATA is asked again, now answered
    const [a1, a2] = await Promise.all(slow);
    expect(a2![0]!.offset).toBeGreaterThan(a1![0]!.offset);
  });

  describe('a stuck or frozen leader', () => {
    it('a batch the leader never answers holds back neither leader lookups nor acks from other brokers', async () => {
      const a = await broker(1);
      const b = await broker(1);
      for (const x of [a, b]) x.topicLeaders.set('u', [b.address]);
      a.onBatch = () => 'hang'; // e.g. a waiter on the broker that blocks for its 30 s timeout
      const p = producer(a, { lingerMs: 0 });
      const stuck = p.send({ topic: 't', messages: [{ value: 'stuck' }] });
      stuck.catch(() => {});
      await until(() => a.batches.length === 1, 3000, 'the first batch', 5);
      // a new topic needs METADATA from the bootstrap broker, the one holding the reply
      const [m] = await within(1500, p.send({ topic: 'u', messages: [{ value: 'other' }] }));
      expect(m).toEqual({ topic: 'u', partition: 0, offset: 0 });
      expect(b.values()).toEqual(['other']);
      await p.close({ signal: AbortSignal.timeout(50) });
    });

    it('a frozen leader costs its batches stallTimeoutMs (then the new leader), not requestTimeoutMs', async () => {
      const a = await broker(1);
      const b = await broker(1);
      useFakeTimersForIo();
      const p = new Producer({ brokers: [a.address, b.address], retry: FAST, lingerMs: 0, maxBatchRecords: 1, stallTimeoutMs: 300 });
      producers.push(p);
      expect(p.options.requestTimeoutMs).toBe(30_000);
      await p.send({ topic: 't', messages: [{ value: 'before' }] });
      // SIGSTOP: sockets stay open, nothing is answered; the cluster moves the leadership to B
      a.frozen = true;
      a.leaders = [b.address];
      b.leaders = [b.address];
      const during = track(p.send({ topic: 't', messages: [{ value: 'during' }] }));
      await untilReal(() => a.batches.length === 2, 'the batch to reach the frozen leader');
      // The clock has not moved since the batch went out: one tick short of the stall bound it still waits.
      await vi.advanceTimersByTimeAsync(299);
      expect(during.settled).toBe(false);
      expect(b.batches).toHaveLength(0);
      await vi.advanceTimersByTimeAsync(1);
      // At the bound (the clock stands still from here): the batch goes to the new leader.
      await untilReal(() => during.settled, 'the batch to reach the new leader');
      expect(await during.promise).toEqual([{ topic: 't', partition: 0, offset: 0 }]);
      expect(a.values()).toEqual(['before', 'during']); // received by the frozen broker, never answered
      expect(b.values()).toEqual(['during']);
    });
  });

  it('a stalled leader still named by a stale METADATA is asked about again, not dialled: no handshake to a frozen broker', async () => {
    const a = await broker(1);
    const b = await broker(1);
    const p = new Producer({ brokers: [a.address, b.address], retry: FAST, lingerMs: 0, stallTimeoutMs: 300 });
    producers.push(p);
    await p.send({ topic: 't', messages: [{ value: 'before' }] });
    // Frozen; B has not learnt of the new leader yet when first asked, then it has.
    a.frozen = true;
    b.leaders = [a.address];
    let asked = 0;
    b.beforeMetadata = () => {
      if (++asked >= 2) b.leaders = [b.address];
    };
    const dialled = a.connectionCount;
    const [m] = await within(4000, p.send({ topic: 't', messages: [{ value: 'during' }] }));
    expect(m).toEqual({ topic: 't', partition: 0, offset: 0 });
    expect(b.values()).toEqual(['during']);
    expect(asked).toBeGreaterThanOrEqual(2);
    // The frozen broker was never dialled again (a handshake there would hang for the stall bound).
    expect(a.connectionCount).toBe(dialled);
  });

  describe('idempotent retries', () => {
    it('a later batch refused out_of_order_sequence by a new leader while an earlier one is unsettled is resent after it', async () => {
      // p0 moves from A to B; p1 starts on C. The lookups go to B, which answers at once.
      const a = await broker(2);
      const b = await broker(2);
      const c = await broker(2);
      const brokersNow = (l: string[]) => {
        for (const x of [a, b, c]) x.leaders = l;
      };
      brokersNow([a.address, c.address]);
      const seqB = new Sequencer(b);
      let release!: () => void;
      const held = new Promise<void>((r) => {
        release = r;
      });
      // A holds the first batch of p0 (slow), then answers it NOT_LEADER: it never appended it.
      a.onBatch = () => held.then(() => notLeader(b.address));
      b.onBatch = (batch) => (batch.partition === 0 ? seqB.handle(batch) : ack(batch, b.nextOffset(batch)));
      // C no longer leads p1 and does not know who does: the topic's leader cache is dropped.
      c.onBatch = () => 'ERROR: NOT_LEADER class=routing retryable=true';
      const p = new Producer({ brokers: [b.address], retry: FAST, lingerMs: 0, idempotent: true });
      producers.push(p);

      const first = p.send({ topic: 't', messages: [{ value: 'n0', partition: 0 }] });
      await until(() => a.batches.length === 1, 3000, 'the first batch', 5);
      brokersNow([b.address, b.address]);
      await within(2000, p.send({ topic: 't', messages: [{ value: 'x', partition: 1 }] }));
      // Sent to B (the refreshed leader) while n0 is still unanswered on A: a gap for B.
      const second = p.send({ topic: 't', messages: [{ value: 'n1', partition: 0 }] });
      second.catch(() => {});
      await until(() => b.batches.some((r) => r.batch.partition === 0), 3000, 'the batch at the new leader', 5);
      await sleep(50);
      expect(b.batches.filter((r) => r.batch.partition === 0)).toHaveLength(1); // not resent yet
      release();
      const [m0] = await within(2000, first);
      const [m1] = await within(2000, second);
      expect([m0!.offset, m1!.offset]).toEqual([0, 1]);
      expect(seqB.log).toEqual(['n0', 'n1']);
    });

    it('the batches behind one that failed for good get new numbers ahead of newer batches (send order kept)', async () => {
      const a = await broker(1);
      const seq = new Sequencer(a);
      // the first batch is refused for good (nothing appended); the next one then has a gap before it
      a.onBatch = (batch) => (batch.records[0]!.value.toString() === 'bad' ? 'ERROR: record_too_large class=validation retryable=false' : seq.handle(batch));
      const p = producer(a, { lingerMs: 0, maxBatchRecords: 1, maxInFlightPerPartition: 2, idempotent: true });
      const bad = p.send({ topic: 't', messages: [{ value: 'bad' }] });
      bad.catch(() => {});
      const behind = p.send({ topic: 't', messages: [{ value: 'behind' }] });
      const newer = p.send({ topic: 't', messages: [{ value: 'newer' }] }); // waits for a free in-flight slot
      await expect(bad).rejects.toMatchObject({ code: 'record_too_large' });
      const [m1] = await within(2000, behind);
      const [m2] = await within(2000, newer);
      expect([m1!.offset, m2!.offset]).toEqual([0, 1]);
      expect(seq.log).toEqual(['behind', 'newer']);
      expect(seq.epoch).toBe(1);
    });

    it.each([
      ['was never appended', false],
      ['was appended, its replies lost', true],
    ])('a batch whose replies time out past its retry budget (it %s): later ones are not failed, stay in order, never twice', async (_what, appended) => {
      const a = await broker(1);
      const seq = new Sequencer(a);
      let attemptsOfFirst = 0;
      a.onBatch = (batch) => {
        if (batch.records[0]!.value.toString() !== 'n') return seq.handle(batch);
        attemptsOfFirst++;
        if (appended) seq.handle(batch);
        return 'hang';
      };
      const p = producer(a, { lingerMs: 0, maxBatchRecords: 1, idempotent: true, requestTimeoutMs: 150, retry: { ...FAST, retries: 1 } });
      const errors: unknown[] = [];
      p.on('error', (e) => errors.push(e.error));
      const n = p.send({ topic: 't', messages: [{ value: 'n' }] });
      n.catch(() => {});
      const sends = ['a', 'b'].map((v) => p.send({ topic: 't', messages: [{ value: v }] }));
      await sleep(20);
      sends.push(p.send({ topic: 't', messages: [{ value: 'mid' }] })); // in flight behind n
      await until(() => attemptsOfFirst === 2, 3000, 'the second attempt', 5);
      sends.push(p.send({ topic: 't', messages: [{ value: 'late' }] })); // queued while the others wait
      await expect(within(3000, n)).rejects.toMatchObject({ code: 'request_timeout' });
      const meta = (await within(3000, Promise.all(sends))).flat();
      const base = appended ? 1 : 0;
      expect(meta.map((m) => m.offset)).toEqual([base, base + 1, base + 2, base + 3]);
      expect(seq.log).toEqual([...(appended ? ['n'] : []), 'a', 'b', 'mid', 'late']);
      expect(errors).toHaveLength(1);
      // and the partition goes on normally
      const [next] = await within(2000, p.send({ topic: 't', messages: [{ value: 'next' }] }));
      expect(next!.offset).toBe(base + 4);
    });
  });
});
