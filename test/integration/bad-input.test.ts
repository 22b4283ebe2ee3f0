/**
 * Hostile and malformed input against a real broker process. Every case checks the broker's answer
 * (or that it closes the connection where no answer is possible) and then that a separate, healthy
 * client can still publish and consume and that nothing already stored changed.
 */
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { type Batch, decodeBatch, encodeBatch } from 'tributary-protocol/batch.js';
import { parseLine } from 'tributary-protocol/command.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { holdsWithin, sleep } from '../helpers/util.js';

// ---------------------------------------------------------------- tiny raw framing helpers

function frame(body: Buffer | string): Buffer {
  const b = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
  const h = Buffer.alloc(4);
  h.writeUInt32BE(b.length, 0);
  return Buffer.concat([h, b]);
}

function header(length: number): Buffer {
  const h = Buffer.alloc(4);
  h.writeUInt32BE(length >>> 0, 0);
  return h;
}

/** A bare TCP client: writes whatever bytes it is given and splits whatever comes back into frames. */
class RawClient {
  private buf = Buffer.alloc(0);
  private readonly frames: Buffer[] = [];
  private waiter: (() => void) | undefined;
  closed = false;
  closedAt = 0;
  readonly closedP: Promise<void>;

  private constructor(readonly socket: net.Socket) {
    socket.on('data', (d: Buffer) => {
      this.buf = Buffer.concat([this.buf, d]);
      while (this.buf.length >= 4) {
        const len = this.buf.readUInt32BE(0);
        if (this.buf.length < 4 + len) break;
        this.frames.push(this.buf.subarray(4, 4 + len));
        this.buf = this.buf.subarray(4 + len);
      }
      this.waiter?.();
    });
    socket.on('error', () => {});
    this.closedP = new Promise((resolve) =>
      socket.once('close', () => {
        this.closed = true;
        this.closedAt = Date.now();
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

  send(bytes: Buffer | string): void {
    this.socket.write(typeof bytes === 'string' ? Buffer.from(bytes, 'latin1') : bytes);
  }

  /** Send one framed text or binary body. */
  request(body: Buffer | string): void {
    this.socket.write(frame(body));
  }

  /** Next frame (keepalives included), or throws when the connection closes or the wait ends first. */
  async next(timeoutMs = 5000): Promise<Buffer> {
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

  async text(timeoutMs = 5000): Promise<string> {
    return (await this.next(timeoutMs)).toString('utf8');
  }

  async waitClosed(timeoutMs: number): Promise<boolean> {
    await Promise.race([this.closedP, sleep(timeoutMs)]);
    return this.closed;
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** Topic names of a LIST reply without internal (`__`) topics such as `__consumer_offsets`. */
function userTopics(csv: string): string[] {
  return csv
    .split(',')
    .filter((t) => t && !t.startsWith('__'))
    .sort();
}

function errCode(reply: string): string {
  expect(reply).toMatch(/^ERROR: /);
  return parseLine(reply.slice('ERROR: '.length)).head;
}

function errParams(reply: string): Map<string, string> {
  return parseLine(reply.slice('ERROR: '.length)).params;
}

function batchOf(topic: string, partition: number, values: string[]): Batch {
  return {
    topic,
    partition,
    acks: '1',
    idempotent: false,
    firstSequence: 0,
    lastSequence: 0,
    records: values.map((v) => ({
      offset: 0,
      sequence: 0,
      producerId: '',
      key: null,
      epoch: -1,
      value: Buffer.from(v),
      timestamp: 0,
      attributes: 0,
      headers: [],
    })),
  };
}

/** Byte position of the i32 record count in a batch frame without extensions. */
function countFieldAt(topic: string, acks: string): number {
  return 2 + 2 + Buffer.byteLength(topic) + 4 + 1 + acks.length + 1 + 16;
}

async function metric(broker: BrokerProcess, re: RegExp): Promise<number> {
  const m = re.exec((await broker.health('/metrics')).body);
  return m ? Number(m[1]) : 0;
}

/** These tests use no consumer groups: one `__consumer_offsets` partition instead of 50 makes every start faster. */
const BASE_ARGS = ['--offsets-topic-partitions', '1'];

// ---------------------------------------------------------------- the main broker

describe('bad input', () => {
  let broker: BrokerProcess;
  /** Every record each topic/partition must hold, in order. */
  const model = new Map<string, string[][]>();
  const raws: RawClient[] = [];
  let healthRound = 0;

  async function raw(): Promise<RawClient> {
    const r = await RawClient.connect(broker.port);
    raws.push(r);
    return r;
  }

  async function readAll(c: Connection, topic: string, partition: number): Promise<string[]> {
    const out: string[] = [];
    let offset = 0;
    for (;;) {
      const b = await c.consume({ topic, partition, offset, batch: 10_000, max_bytes: 8 * 1024 * 1024 });
      if (b.records.length === 0) return out;
      for (const r of b.records) {
        expect(r.offset).toBe(offset);
        out.push(r.value.toString());
        offset++;
      }
    }
  }

  /**
   * A fresh client publishes to and consumes from the broker, and every stored record of every topic is
   * unchanged; no topic appeared or disappeared.
   */
  async function assertHealthy(): Promise<void> {
    const c = await broker.connect();
    try {
      const round = healthRound++;
      const msg = `health ${round}`;
      const ack = await c.json<{ partition: number; offset: number }>('PUBLISH', { topic: 'health', partition: 0, message: msg });
      const hp = model.get('health')![0]!;
      expect(ack.offset).toBe(hp.length);
      hp.push(msg);
      const back = await c.consume({ topic: 'health', partition: 0, offset: ack.offset });
      expect(back.records.map((r) => r.value.toString())).toEqual([msg]);

      const listed = userTopics(parseLine(await c.command('LIST')).params.get('topics')!);
      expect(listed).toEqual([...model.keys()].sort());
      for (const [topic, parts] of model) {
        const offs = parseLine(await c.command('LIST_OFFSETS', { topic })).params.get('offsets');
        expect(offs).toBe(parts.map((p, i) => `P${i}:earliest=0:latest=${p.length}:leo=${p.length}:hwm=${p.length}`).join(','));
        for (let i = 0; i < parts.length; i++) expect(await readAll(c, topic, i)).toEqual(parts[i]);
      }
    } finally {
      await c.close();
    }
  }

  beforeAll(async () => {
    broker = await BrokerProcess.start({
      args: [...BASE_ARGS, '--frame-timeout-ms', '500', '--max-pending-reply-bytes', '65536', '--write-stall-timeout-ms', '1000'],
    });
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'seed', partitions: 2 });
    await c.command('CREATE', { topic: 'health', partitions: 1 });
    const seed: string[][] = [[], []];
    for (let i = 0; i < 30; i++) {
      const v = `seed-${i} "quoted" = value`;
      await c.command('PUBLISH', { topic: 'seed', partition: i % 2, message: v });
      seed[i % 2]!.push(v);
    }
    model.set('seed', seed);
    model.set('health', [[]]);
    await c.close();
    await assertHealthy();
  });

  afterEach(() => {
    for (const r of raws.splice(0)) r.destroy();
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('answers a 0xFFFFFFFF frame length with frame_too_large and closes the connection', async () => {
    const r = await raw();
    r.send(header(0xffffffff));
    const reply = await r.text();
    expect(errCode(reply)).toBe('frame_too_large');
    expect(errParams(reply).get('max')).toBe(String(64 * 1024 * 1024));
    expect(errParams(reply).get('declared')).toBe('4294967295');
    expect(await r.waitClosed(3000)).toBe(true);
    await assertHealthy();
  });

  it('is unaffected by a truncated frame followed by the client closing', async () => {
    const open = () => metric(broker, /^tributary_connections (\d+)/m);
    // Earlier tests' connections are all closed; then this one is the only one.
    expect(await holdsWithin(async () => (await open()) === 0, 3000)).toBe(true);
    const r = await raw();
    expect(await holdsWithin(async () => (await open()) === 1, 3000)).toBe(true);
    // Header promises 200 bytes of a PUBLISH, only part of it arrives.
    const body = Buffer.from('PUBLISH topic=seed partition=0 message=never-complete'.padEnd(200, 'x'));
    r.send(Buffer.concat([header(body.length), body.subarray(0, 40)]));
    await sleep(50);
    r.socket.end();
    await r.closedP;
    expect(await holdsWithin(async () => (await open()) === 0, 3000)).toBe(true);
    await assertHealthy();
  });

  it('closes a connection whose frame never completes after --frame-timeout-ms', async () => {
    const r = await raw();
    r.send(Buffer.concat([header(100), Buffer.from('PUBLISH topic=seed partition=0 message=')]));
    // Closed by the frame timer (500 ms here, 30 s by default), which says so; its deadline itself is driven
    // by a fake clock in client-connection-frame-timer.test.ts.
    const reply = await r.text(15_000);
    expect(errCode(reply)).toBe('request_timeout');
    expect(errParams(reply).get('reason')).toBe('incomplete frame');
    expect(await r.waitClosed(10_000)).toBe(true);
    await assertHealthy();
  });

  it('closes a client that trickles a frame one byte at a time, while others are served', async () => {
    const r = await raw();
    // At a byte every 200 ms this frame (112 bytes) takes ~22 s to complete, against the 500 ms frame timeout.
    const body = frame(`PUBLISH topic=seed partition=0 message=slowloris${'.'.repeat(60)}`);
    let sent = 0;
    let allSent!: () => void;
    const complete = new Promise<void>((resolve) => {
      allSent = resolve;
    });
    // Steady progress must not keep resetting the frame timer.
    const timer = setInterval(() => {
      if (r.closed) return;
      if (sent < body.length) r.send(body.subarray(sent, ++sent));
      if (sent === body.length) allSent();
    }, 200);
    try {
      // Meanwhile healthy clients work normally.
      await assertHealthy();
      await Promise.race([r.closedP, complete]);
    } finally {
      clearInterval(timer);
    }
    // Closed before the frame was complete, by the frame timer.
    expect(r.closed).toBe(true);
    expect(sent).toBeLessThan(body.length);
    expect(errCode(await r.text())).toBe('request_timeout');
    await assertHealthy();
  });

  it('rejects invalid UTF-8 with invalid_encoding and keeps the connection usable', async () => {
    const r = await raw();
    r.request(Buffer.concat([Buffer.from('PUBLISH topic=seed partition=0 message='), Buffer.from([0xff, 0xfe, 0xc3, 0x28])]));
    expect(errCode(await r.text())).toBe('invalid_encoding');
    r.request(Buffer.from([0xc0, 0xaf, 0x20, 0x41])); // overlong encoding
    expect(errCode(await r.text())).toBe('invalid_encoding');
    r.request('PROTOCOL_INFO');
    expect(await r.text()).toMatch(/^OK protocol=tributary/);
    await assertHealthy();
  });

  it('rejects an unknown command with unknown_command command=<name>', async () => {
    const r = await raw();
    r.request('FROBNICATE topic=seed');
    const reply = await r.text();
    expect(errCode(reply)).toBe('unknown_command');
    expect(errParams(reply).get('command')).toBe('FROBNICATE');
    expect(reply).toMatch(/class=validation/);
    r.request('X'.repeat(5000));
    const long = await r.text();
    expect(errCode(long)).toBe('unknown_command');
    expect(long.length).toBeLessThan(500); // the echo of a huge name is bounded
    await assertHealthy();
  });

  it('refuses the broker-to-broker transaction commands on a standalone broker: no client writes markers or records for a transaction', async () => {
    const r = await raw();
    for (const line of [
      'TXN_MARKER topic=seed partition=0 producerId=1 epoch=0 result=commit coordinator_partition=0 coordinator_epoch=0',
      'TXN_APPEND topic=seed partition=0 producerId=999999 epoch=0 coordinator_partition=0 coordinator_epoch=0 message=evil',
      'TXN_GROUP_OFFSETS op=restore transactional_id=ghost group=gg topic=seed P0:1',
      'TXN_VERIFY transactional_id=ghost producerId=1 epoch=0 topic=seed partition=0',
      'TXN_OFFSETS transactional_id=ghost producerId=1 epoch=0 group=gg topic=seed generation=0 member=m P0:1',
    ]) {
      r.request(line);
      const reply = await r.text();
      expect(errCode(reply), line).toBe('unknown_command');
    }
    await assertHealthy();
  });

  it('rejects missing parameters with invalid_parameter param=<name>', async () => {
    const r = await raw();
    r.request('PUBLISH partition=0 message=orphan');
    let reply = await r.text();
    expect(errCode(reply)).toBe('invalid_parameter');
    expect(errParams(reply).get('param')).toBe('topic');
    r.request('CONSUME partition=0 offset=0');
    reply = await r.text();
    expect(errCode(reply)).toBe('invalid_parameter');
    expect(errParams(reply).get('param')).toBe('topic');
    r.request('CONSUME topic=seed partition=0');
    reply = await r.text();
    expect(errCode(reply)).toBe('invalid_parameter');
    expect(errParams(reply).get('param')).toBe('offset');
    r.request('CREATE');
    reply = await r.text();
    expect(errParams(reply).get('param')).toBe('topic');
    await assertHealthy();
  });

  it('rejects malformed parameters: unterminated quote, duplicate key, non-integer partition', async () => {
    const r = await raw();
    const cases: Array<[string, string]> = [
      ['PUBLISH topic="seed partition=0 message=x', 'topic'],
      ['CREATE topic="unterminated', 'topic'],
      ['PUBLISH topic=seed topic=health partition=0 message=dup', 'topic'],
      ['PUBLISH topic=seed partition=0 partition=1 message=dup', 'partition'],
      ['PUBLISH topic=seed partition=abc message=x', 'partition'],
      ['CONSUME topic=seed partition=abc offset=0', 'partition'],
      ['PUBLISH topic=seed partition=1.5 message=x', 'partition'],
      ['PUBLISH topic=seed partition=0x1 message=x', 'partition'],
      ['PUBLISH topic=se"ed partition=0 message=x', 'topic'],
      ['PUBLISH topic="seed"x partition=0 message=x', 'topic'],
    ];
    for (const [cmd, param] of cases) {
      r.request(cmd);
      const reply = await r.text();
      expect(errCode(reply), cmd).toBe('invalid_parameter');
      expect(errParams(reply).get('param'), cmd).toBe(param);
    }
    await assertHealthy();
  });

  it('refuses an unknown parameter with the nearest valid name, and a stray positional token, creating nothing', async () => {
    const r = await raw();
    r.request('CREATE topic=typo partitons=3');
    let reply = await r.text();
    expect(errCode(reply)).toBe('invalid_parameter');
    expect(Object.fromEntries(errParams(reply))).toMatchObject({ param: 'partitons', reason: 'unknown parameter', did_you_mean: 'partitions' });
    // An unquoted value with a space: `sp` and a stray `ace`, not a topic named `sp`.
    r.request('CREATE topic=sp ace');
    reply = await r.text();
    expect(errCode(reply)).toBe('invalid_parameter');
    expect(errParams(reply).get('param')).toBe('ace');
    expect(errParams(reply).get('reason')).toMatch(/positional/);
    // A name nothing is close to: no suggestion; a huge one is echoed bounded.
    r.request('PUBLISH topic=seed partition=0 zzzzzz=1 message=x');
    reply = await r.text();
    expect(Object.fromEntries(errParams(reply))).toEqual({ param: 'zzzzzz', reason: 'unknown parameter', class: 'validation', retryable: 'false' });
    r.request(`PUBLISH topic=seed partition=0 ${'k'.repeat(5000)}=1 message=x`);
    reply = await r.text();
    expect(errCode(reply)).toBe('invalid_parameter');
    expect(reply.length).toBeLessThan(500);
    // Every command, STREAM included, refuses a parameter it does not take, before it runs.
    const c = await broker.connect();
    const commands = parseLine(await c.command('HELP'))
      .params.get('commands')!
      .split(',');
    await c.close();
    expect(commands).toContain('STREAM');
    for (const cmd of commands.filter((x) => x !== 'STREAM_CONTROL')) {
      r.request(`${cmd} no_such_param=1`);
      reply = await r.text();
      expect(errCode(reply), cmd).toBe('invalid_parameter');
      expect(errParams(reply).get('param'), cmd).toBe('no_such_param');
    }
    await assertHealthy(); // LIST shows neither `typo` nor `sp`; no record was appended
  });

  it('rejects partitions=1e12 and partitions=0 and creates nothing', async () => {
    const r = await raw();
    for (const n of ['1e12', '0', '-1', '1000000000000', '']) {
      r.request(`CREATE topic=x partitions=${n}`);
      const reply = await r.text();
      expect(errCode(reply), n).toBe('invalid_parameter');
      expect(errParams(reply).get('param'), n).toBe('partitions');
    }
    await assertHealthy(); // LIST must not show "x"
  });

  it('rejects CONSUME offsets that are negative or beyond 2^53', async () => {
    const r = await raw();
    for (const off of ['-1', '9007199254740993', '9007199254740992', '99999999999999999999', '1e3']) {
      r.request(`CONSUME topic=seed partition=0 offset=${off}`);
      const reply = await r.text();
      expect(errCode(reply), off).toBe('invalid_parameter');
      expect(errParams(reply).get('param'), off).toBe('offset');
    }
    // Largest safe integer parses but is past the end of the log.
    r.request('CONSUME topic=seed partition=0 offset=9007199254740991');
    expect(errCode(await r.text())).toBe('OFFSET_OUT_OF_RANGE');
    await assertHealthy();
  });

  it('rejects a 10,000-character topic name and path-like names without touching the file system', async () => {
    const logsDir = path.join(broker.dataDir, 'logs');
    const logsBefore = (await fs.readdir(logsDir)).filter((d) => !d.startsWith('__')).sort();
    const dataBefore = (await fs.readdir(broker.dataDir)).sort();
    const tmpBefore = new Set(await fs.readdir(os.tmpdir()));
    const r = await raw();
    for (const name of ['t'.repeat(10_000), '../evil', '..', '.', '../../evil', 'a/b', 'evil\\..\\x', '~evil']) {
      r.request(`CREATE topic="${name.replace(/\\/g, '\\\\')}" partitions=1`);
      const reply = await r.text();
      expect(errCode(reply), name.slice(0, 20)).toBe('invalid_topic_name');
      expect(reply.length).toBeLessThan(1000);
    }
    // Other commands with such names find nothing rather than resolving a path.
    r.request('PUBLISH topic=../evil partition=0 message=x');
    expect(errCode(await r.text())).toBe('topic_not_found');
    r.request(encodeBatch(batchOf('../evil', 0, ['x'])));
    expect(errCode(await r.text())).toBe('topic_not_found');
    r.request('DELETE topic=..');
    expect(errCode(await r.text())).toBe('topic_not_found');
    expect((await fs.readdir(logsDir)).filter((d) => !d.startsWith('__')).sort()).toEqual(logsBefore);
    expect(logsBefore.map((d) => d.split('~')[0]).sort()).toEqual(['health', 'seed']);
    expect((await fs.readdir(broker.dataDir)).sort()).toEqual(dataBefore);
    const tmpNew = (await fs.readdir(os.tmpdir())).filter((e) => !tmpBefore.has(e));
    expect(tmpNew.filter((e) => e.includes('evil'))).toEqual([]);
    await expect(fs.stat(path.join(broker.dataDir, 'evil'))).rejects.toThrow();
    await assertHealthy();
  });

  it('rejects truncated batches and batches with a bad record count with invalid_batch', async () => {
    const r = await raw();
    const good = encodeBatch(batchOf('seed', 0, ['b1', 'b2', 'b3']));
    const at = countFieldAt('seed', '1');
    expect(good.readInt32BE(at)).toBe(3);
    const variants: Array<[string, Buffer]> = [];
    variants.push(['truncated in a record', good.subarray(0, good.length - 5)]);
    variants.push(['truncated in the header', good.subarray(0, at - 3)]);
    variants.push(['magic only', good.subarray(0, 2)]);
    for (const [label, count] of [
      ['count too high', 4],
      ['count too low (trailing bytes)', 2],
      ['negative count', -1],
      ['huge count', 0x7fffffff],
      ['zero count with records', 0],
    ] as const) {
      const b = Buffer.from(good);
      b.writeInt32BE(count, at);
      variants.push([label, b]);
    }
    const badLen = Buffer.from(good);
    badLen.writeUInt32BE(0xfffffff0, good.length - 4 - 2); // last record's payload length
    variants.push(['payload length past the end', badLen]);
    for (const [label, body] of variants) {
      r.request(body);
      const reply = await r.text();
      expect(errCode(reply), label).toBe('invalid_batch');
    }
    // The same connection can still append a well-formed batch; the model gets it.
    r.request(good);
    const ack = JSON.parse(await r.text()) as { base_offset: number; last_offset: number };
    const p0 = model.get('seed')![0]!;
    expect(ack).toMatchObject({ base_offset: p0.length, last_offset: p0.length + 2 });
    p0.push('b1', 'b2', 'b3');
    await assertHealthy();
  });

  it('answers pipelined garbage and valid commands on one connection in order', async () => {
    const r = await raw();
    const p0 = model.get('seed')![0]!;
    const good = encodeBatch(batchOf('seed', 0, ['pipe-b']));
    const truncated = good.subarray(0, good.length - 3);
    const bodies: Array<Buffer | string> = [
      'PROTOCOL_INFO',
      Buffer.from([0x50, 0xff, 0xfe]),
      'NOPE a=1',
      'PUBLISH topic=seed partition=0 message=pipe-1',
      'PUBLISH topic=seed partition=zero message=bad',
      truncated,
      Buffer.alloc(0), // a client keepalive: no reply
      good,
      'CREATE topic=.. partitions=1',
      'PUBLISH topic=seed partition=0 message=pipe-2',
      `CONSUME topic=seed partition=0 offset=${p0.length}`, // must see the three appends sent before it
      'CONSUME topic=seed partition=0 offset=-5',
      'list',
    ];
    const base = p0.length;
    r.send(Buffer.concat(bodies.map((b) => frame(b))));
    p0.push('pipe-1', 'pipe-b', 'pipe-2');
    const replies: Buffer[] = [];
    for (let i = 0; i < bodies.length - 1; i++) replies.push(await r.next());
    const t = (i: number) => replies[i]!.toString('utf8');
    expect(t(0)).toMatch(/^OK protocol=tributary/);
    expect(errCode(t(1))).toBe('invalid_encoding');
    expect(errCode(t(2))).toBe('unknown_command');
    expect(JSON.parse(t(3))).toMatchObject({ partition: 0, offset: base });
    expect(errCode(t(4))).toBe('invalid_parameter');
    expect(errCode(t(5))).toBe('invalid_batch');
    expect(JSON.parse(t(6))).toMatchObject({ base_offset: base + 1, last_offset: base + 1 });
    expect(errCode(t(7))).toBe('invalid_topic_name');
    expect(JSON.parse(t(8))).toMatchObject({ offset: base + 2 });
    const consumed = decodeBatch(replies[9]!);
    expect(consumed.records.map((x) => x.value.toString())).toEqual(['pipe-1', 'pipe-b', 'pipe-2']);
    expect(consumed.records.map((x) => x.offset)).toEqual([base, base + 1, base + 2]);
    expect(errCode(t(10))).toBe('invalid_parameter');
    expect(t(11)).toMatch(/^OK count=/);
    expect(userTopics(parseLine(t(11)).params.get('topics')!)).toEqual(['health', 'seed']);
    await assertHealthy();
  });

  it('closes a client that pipelines CONSUMEs and never reads, without unbounded broker memory', async () => {
    // A ~1 MiB partition; each CONSUME below asks for all of it.
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'big', partitions: 1 });
    const value = 'v'.repeat(1000);
    const big: string[] = [];
    for (let i = 0; i < 10; i++) {
      const vals = Array.from({ length: 100 }, (_, j) => `${i * 100 + j} ${value}`);
      await c.produceBatch(batchOf('big', 0, vals));
      big.push(...vals);
    }
    model.set('big', [big]);
    await c.close();

    const rssBefore = await metric(broker, /^tributary_process_resident_memory_bytes (\d+)/m);
    // Closed by the write-stall limit; or, should TCP split the requests so that the paused broker holds a
    // partial frame, by the (shorter) frame timeout. Either way the broker, not the client, closes it.
    const closedCount = async () =>
      (await metric(broker, /^tributary_connections_rejected_total\{reason="client does not read its replies"\} (\d+)/m)) +
      (await metric(broker, /^tributary_connections_rejected_total\{reason="incomplete frame timeout"\} (\d+)/m));
    const closedBefore = await closedCount();
    const r = await raw();
    r.socket.pause(); // never read a reply
    // 500 requests x ~1 MiB replies: ~500 MiB if the broker built them all. One ~35 KB write, which
    // loopback normally delivers whole, so the paused broker holds no partial frame.
    const req = frame('CONSUME topic=big partition=0 offset=0 batch=10000 max_bytes=2000000');
    r.send(Buffer.concat(Array.from({ length: 500 }, () => req)));

    let peak = rssBefore;
    const sample = async () => {
      peak = Math.max(peak, await metric(broker, /^tributary_process_resident_memory_bytes (\d+)/m));
    };
    // Healthy clients are served while the stalled one is pending.
    await sample();
    await assertHealthy();
    await sample();
    const closedByBroker = await holdsWithin(
      async () => {
        await sample();
        return (await closedCount()) > closedBefore;
      },
      8000,
      100,
    );
    expect(closedByBroker).toBe(true);
    await sample();
    // The stalled client, when it finally reads, finds its connection closed with a bounded backlog.
    let received = 0;
    r.socket.on('data', (d: Buffer) => {
      received += d.length;
    });
    r.socket.resume();
    expect(await r.waitClosed(5000)).toBe(true);
    expect(received).toBeLessThan(200 * 1024 * 1024);
    expect(peak - rssBefore).toBeLessThan(256 * 1024 * 1024);
    await assertHealthy();
  });
});

// ---------------------------------------------------------------- connection limit

describe('connection limit', () => {
  let broker: BrokerProcess;
  const raws: RawClient[] = [];

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: [...BASE_ARGS, '--max-connections', '5'] });
  });

  afterAll(async () => {
    for (const r of raws) r.destroy();
    await broker?.dispose();
  });

  it('refuses connections beyond --max-connections with too_many_connections and accepts again after some close', async () => {
    const admitted: RawClient[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await RawClient.connect(broker.port);
      raws.push(r);
      r.request('PROTOCOL_INFO');
      expect(await r.text()).toMatch(/^OK protocol=tributary/);
      admitted.push(r);
    }
    const extra: RawClient[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await RawClient.connect(broker.port);
      raws.push(r);
      extra.push(r);
    }
    for (const r of extra) {
      const reply = await r.text();
      expect(errCode(reply)).toBe('too_many_connections');
      expect(errParams(reply).get('max')).toBe('5');
      expect(errParams(reply).get('retryable')).toBe('true');
      expect(await r.waitClosed(3000)).toBe(true);
    }
    // The admitted ones are untouched.
    for (const r of admitted) {
      r.request('LIST');
      expect(userTopics(parseLine(await r.text()).params.get('topics')!)).toEqual([]);
    }
    // Close two; once the broker has noticed, two new clients get in and work.
    admitted[0]!.destroy();
    admitted[1]!.destroy();
    expect(await holdsWithin(async () => /^tributary_connections 3$/m.test((await broker.health('/metrics')).body), 3000)).toBe(true);
    const c1 = await broker.connect();
    const c2 = await broker.connect();
    await c1.command('CREATE', { topic: 'limit', partitions: 1 });
    expect(await c1.json('PUBLISH', { topic: 'limit', partition: 0, message: 'in' })).toMatchObject({ offset: 0 });
    expect((await c2.consume({ topic: 'limit', partition: 0, offset: 0 })).records.map((x) => x.value.toString())).toEqual(['in']);
    // Now full again: a sixth is refused.
    const sixth = await RawClient.connect(broker.port);
    raws.push(sixth);
    expect(errCode(await sixth.text())).toBe('too_many_connections');
    expect(await sixth.waitClosed(3000)).toBe(true);
  });
});
