/**
 * Idempotent producers against a real broker: PUBLISH with producerId/epoch/seqNum and idempotent batch
 * frames are deduplicated (answered with the original offsets, nothing appended), gaps and stale epochs
 * are refused and change nothing, the state survives a graceful restart, and the SDK producer with
 * `idempotent: true` retries a batch whose reply was lost without writing it twice.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { Producer } from 'tributary-client/producer.js';
import { type Batch, encodeBatch } from 'tributary-protocol/batch.js';
import { parseLine } from 'tributary-protocol/command.js';
import { BrokerProcess } from '../helpers/launcher.js';

const ARGS = ['--offsets-topic-partitions', '1'];

function idemBatch(topic: string, partition: number, pid: string, epoch: number, first: number, values: string[]): Batch {
  return {
    topic,
    partition,
    acks: '1',
    idempotent: true,
    firstSequence: first,
    lastSequence: first + values.length - 1,
    records: values.map((v, i) => ({
      offset: 0,
      sequence: first + i,
      producerId: pid,
      key: null,
      epoch,
      value: Buffer.from(v),
      timestamp: 0,
      attributes: 0,
      headers: [],
    })),
  };
}

/** A producer id from the broker (INIT_PRODUCER_ID without a transactional id). */
async function newProducerId(c: Connection): Promise<string> {
  return parseLine(await c.command('INIT_PRODUCER_ID')).params.get('producerId')!;
}

async function leo(c: Connection, topic: string, partition: number): Promise<number> {
  const csv = parseLine(await c.command('LIST_OFFSETS', { topic, partition })).params.get('offsets')!;
  return Number(/leo=(\d+)/.exec(csv)![1]);
}

describe('idempotent producers', () => {
  let broker: BrokerProcess;
  let c: Connection;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ARGS });
    c = await broker.connect();
    await c.command('CREATE', { topic: 'idem', partitions: 2 });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('PUBLISH: a duplicate gets the original offset and is not appended; gaps and stale epochs are refused', async () => {
    const pid = await newProducerId(c);
    const pub = (seqNum: number, epoch = 0, message = `m${seqNum}`) =>
      c.json<{ offset: number; partition: number }>('PUBLISH', { topic: 'idem', partition: 0, producerId: pid, epoch, seqNum, message });
    await c.command('PUBLISH', { topic: 'idem', partition: 0, message: 'plain' });
    const first = await pub(0);
    expect(first).toMatchObject({ partition: 0, offset: 1 });
    expect((await pub(1)).offset).toBe(2);
    expect(await pub(0)).toMatchObject({ partition: 0, offset: 1 }); // earlier in-window duplicate
    expect((await pub(1)).offset).toBe(2);
    expect(await leo(c, 'idem', 0)).toBe(3);
    await expect(pub(3)).rejects.toMatchObject({ code: 'out_of_order_sequence' });
    await expect(c.command('PUBLISH', { topic: 'idem', partition: 0, producerId: pid, epoch: 0, message: 'x' })).rejects.toMatchObject({
      code: 'invalid_parameter',
    });
    // a new epoch restarts at 0 and fences the old one
    expect((await pub(0, 1, 'e1')).offset).toBe(3);
    await expect(pub(2, 0)).rejects.toMatchObject({ code: 'stale_producer_epoch' });
    expect(await leo(c, 'idem', 0)).toBe(4);
    const recs = (await c.consume({ topic: 'idem', partition: 0, offset: 0, batch: 100 })).records;
    expect(recs.map((r) => r.value.toString())).toEqual(['plain', 'm0', 'm1', 'e1']);
  });

  it('batch frames: a retried batch gets the original reply; overlaps, gaps and stale epochs change nothing', async () => {
    const pid = await newProducerId(c);
    const a = await c.produceBatch(idemBatch('idem', 1, pid, 0, 0, ['a', 'b', 'c']));
    const b = await c.produceBatch(idemBatch('idem', 1, pid, 0, 3, ['d', 'e']));
    expect(a).toEqual({ status: 'OK', partition: 1, base_offset: 0, last_offset: 2, count: 3 });
    expect(await c.produceBatch(idemBatch('idem', 1, pid, 0, 0, ['a', 'b', 'c']))).toEqual(a);
    expect(await c.produceBatch(idemBatch('idem', 1, pid, 0, 3, ['d', 'e']))).toEqual(b);
    // pipelined duplicates of a new batch: one append, the same reply
    const [x, y] = await Promise.all([c.produceBatch(idemBatch('idem', 1, pid, 0, 5, ['f'])), c.produceBatch(idemBatch('idem', 1, pid, 0, 5, ['f']))]);
    expect(y).toEqual(x);
    expect(x.base_offset).toBe(5);
    await expect(c.produceBatch(idemBatch('idem', 1, pid, 0, 4, ['e', 'f']))).rejects.toMatchObject({ code: 'out_of_order_sequence' });
    await expect(c.produceBatch(idemBatch('idem', 1, pid, 0, 9, ['z']))).rejects.toMatchObject({ code: 'out_of_order_sequence' });
    const bad = idemBatch('idem', 1, pid, 0, 6, ['g', 'h']);
    bad.lastSequence = 9;
    await expect(c.produceBatch(bad)).rejects.toMatchObject({ code: 'invalid_batch' });
    await c.produceBatch(idemBatch('idem', 1, pid, 2, 0, ['new-epoch']));
    await expect(c.produceBatch(idemBatch('idem', 1, pid, 1, 0, ['old']))).rejects.toMatchObject({ code: 'stale_producer_epoch' });
    expect(await leo(c, 'idem', 1)).toBe(7);
    const recs = (await c.consume({ topic: 'idem', partition: 1, offset: 0, batch: 100 })).records;
    expect(recs.map((r) => r.value.toString())).toEqual(['a', 'b', 'c', 'd', 'e', 'f', 'new-epoch']);
  });

  it('acks=0 with idempotence is refused: the sequence and epoch checks could not be answered, so a gap or a fenced epoch got OK and was dropped', async () => {
    const topic = 'idem-acks0';
    await c.command('CREATE', { topic, partitions: 1 });
    const pid = await newProducerId(c);
    expect((await c.json<{ offset: number }>('PUBLISH', { topic, partition: 0, producerId: pid, epoch: 1, seqNum: 0, message: 'e1' })).offset).toBe(0);
    // A zombie's older epoch, a gap, and the right next sequence: acks=0 is refused for each, before anything.
    for (const [epoch, seqNum] of [
      [0, 0],
      [1, 5],
      [1, 1],
    ]) {
      await expect(c.command('PUBLISH', { topic, partition: 0, producerId: pid, epoch, seqNum, acks: '0', message: 'z' })).rejects.toMatchObject({
        code: 'invalid_parameter',
        fields: { param: 'acks' },
      });
    }
    for (const epoch of [0, 1]) {
      const batch: Batch = { ...idemBatch(topic, 0, pid, epoch, 1, ['b']), acks: '0' };
      await expect(c.produceBatch(batch)).rejects.toMatchObject({ code: 'invalid_batch' });
    }
    expect(await leo(c, topic, 0)).toBe(1);
    // The producer goes on at its next sequence, and acks=0 without idempotence is taken as before.
    expect((await c.json<{ offset: number }>('PUBLISH', { topic, partition: 0, producerId: pid, epoch: 1, seqNum: 1, message: 'e1-1' })).offset).toBe(1);
    expect(await c.command('PUBLISH', { topic, partition: 0, acks: '0', message: 'plain' })).toBe('OK');
  });

  it('batch frames: the records keep the producer id and epoch and are numbered from the header; a batch of mixed ids or epochs, or none, is refused', async () => {
    await c.command('CREATE', { topic: 'idem-ids', partitions: 1 });
    const pid = await newProducerId(c);
    const other = await newProducerId(c);
    await c.produceBatch(idemBatch('idem-ids', 0, pid, 3, 0, ['a', 'b']));
    // The records' own sequence fields are not what counts: the header's first sequence is.
    const second = idemBatch('idem-ids', 0, pid, 3, 2, ['c']);
    second.records[0]!.sequence = 99;
    await c.produceBatch(second);
    const recs = (await c.consume({ topic: 'idem-ids', partition: 0, offset: 0, batch: 100 })).records;
    expect(recs.map((r) => [r.offset, r.producerId, r.epoch, r.sequence, r.value.toString()])).toEqual([
      [0, pid, 3, 0, 'a'],
      [1, pid, 3, 1, 'b'],
      [2, pid, 3, 2, 'c'],
    ]);
    const mixedIds = idemBatch('idem-ids', 0, pid, 3, 3, ['d', 'e']);
    mixedIds.records[1]!.producerId = other;
    const mixedEpochs = idemBatch('idem-ids', 0, pid, 3, 3, ['d', 'e']);
    mixedEpochs.records[1]!.epoch = 4;
    for (const refused of [mixedIds, mixedEpochs, idemBatch('idem-ids', 0, '', 0, 0, ['f'])]) {
      await expect(c.produceBatch(refused)).rejects.toMatchObject({ code: 'invalid_batch' });
    }
    // Producer id bytes that are not UTF-8 are no issued id.
    const body = encodeBatch(idemBatch('idem-ids', 0, 'Z', 3, 3, ['g']), { extensions: true });
    body[body.indexOf(0x5a)] = 0xff;
    const reply = await c.request(body);
    expect(reply.kind === 'text' && reply.text).toMatch(/^ERROR: unknown_producer_id /);
    expect(await leo(c, 'idem-ids', 0)).toBe(3);
    expect((await c.produceBatch(idemBatch('idem-ids', 0, pid, 3, 3, ['h']))).base_offset).toBe(3);
  });

  it('keeps the state across a graceful restart', async () => {
    await c.command('CREATE', { topic: 'idem-r', partitions: 1 });
    const pid = await newProducerId(c);
    const a = await c.produceBatch(idemBatch('idem-r', 0, pid, 0, 0, ['a', 'b']));
    await broker.restart();
    c = await broker.connect();
    expect(await c.produceBatch(idemBatch('idem-r', 0, pid, 0, 0, ['a', 'b']))).toEqual(a);
    await expect(c.produceBatch(idemBatch('idem-r', 0, pid, 0, 5, ['x']))).rejects.toMatchObject({ code: 'out_of_order_sequence' });
    expect((await c.produceBatch(idemBatch('idem-r', 0, pid, 0, 2, ['c']))).base_offset).toBe(2);
    expect(await leo(c, 'idem-r', 0)).toBe(3);
    // Ids are handed out past a restart, never again: the next one is new and accepted.
    const after = await newProducerId(c);
    expect(Number(after)).toBeGreaterThan(Number(pid));
    expect((await c.produceBatch(idemBatch('idem-r', 0, after, 0, 0, ['d']))).base_offset).toBe(3);
  });

  it('a producer id no broker handed out, or an epoch past 16 bits, is refused on PUBLISH and in batch frames, and nothing is appended', async () => {
    await c.command('CREATE', { topic: 'idem-forged', partitions: 1 });
    const issued = await newProducerId(c);
    // Made up: a UUID as older clients chose, a decimal far past what was reserved, non-canonical forms.
    for (const forged of ['3f1c2a5e-0000-4000-8000-000000000001', String(Number(issued) + 1_000_000), `0${issued}`, '-1']) {
      await expect(c.command('PUBLISH', { topic: 'idem-forged', partition: 0, producerId: forged, epoch: 0, seqNum: 0, message: 'x' })).rejects.toMatchObject({
        code: 'unknown_producer_id',
      });
      await expect(c.produceBatch(idemBatch('idem-forged', 0, forged, 0, 0, ['y']))).rejects.toMatchObject({ code: 'unknown_producer_id' });
    }
    // Epochs are 16-bit.
    await expect(c.command('PUBLISH', { topic: 'idem-forged', partition: 0, producerId: issued, epoch: 32_768, seqNum: 0, message: 'x' })).rejects.toMatchObject({
      code: 'invalid_parameter',
    });
    await expect(c.produceBatch(idemBatch('idem-forged', 0, issued, 32_768, 0, ['y']))).rejects.toMatchObject({ code: 'invalid_batch' });
    expect(await leo(c, 'idem-forged', 0)).toBe(0);
    expect((await c.produceBatch(idemBatch('idem-forged', 0, issued, 0, 0, ['z']))).base_offset).toBe(0);
    expect((await broker.health('/live')).status).toBe(200);
  });
});

describe('SDK producer with idempotent: true', () => {
  let broker: BrokerProcess;
  let proxy: net.Server;
  let admin: Connection;
  /** Drop the client side of the next connection that carries a produce batch, right after forwarding it. */
  let dropNextBatch = 0;

  beforeAll(async () => {
    proxy = net.createServer((client) => {
      const upstream = net.connect(broker.port, '127.0.0.1');
      let buf = Buffer.alloc(0);
      client.on('data', (d: Buffer) => {
        upstream.write(d);
        buf = Buffer.concat([buf, d]);
        // Frames: u32 length + body; a batch body starts with the batch magic 0xba7c.
        while (buf.length >= 4 && buf.length >= 4 + buf.readUInt32BE(0)) {
          const body = buf.subarray(4, 4 + buf.readUInt32BE(0));
          buf = buf.subarray(4 + body.length);
          if (body.length >= 2 && body.readUInt16BE(0) === 0xba7c && dropNextBatch > 0) {
            dropNextBatch--;
            client.destroy(); // the broker appends; the reply is lost
            setTimeout(() => upstream.destroy(), 500);
            return;
          }
        }
      });
      upstream.on('data', (d: Buffer) => {
        if (!client.destroyed) client.write(d);
      });
      client.on('error', () => upstream.destroy());
      upstream.on('error', () => client.destroy());
      client.on('close', () => setTimeout(() => upstream.destroy(), 500));
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
    const proxyPort = (proxy.address() as net.AddressInfo).port;
    broker = await BrokerProcess.start({ args: [...ARGS, '--advertised-host', '127.0.0.1', '--advertised-port', String(proxyPort)] });
    admin = await broker.connect();
  });

  afterAll(async () => {
    await broker?.dispose();
    await new Promise<void>((r) => proxy?.close(() => r()));
  });

  it('retries a batch whose reply was lost without writing it twice', async () => {
    await admin.command('CREATE', { topic: 'sdk-idem', partitions: 1 });
    const proxyAddr = `127.0.0.1:${(proxy.address() as net.AddressInfo).port}`;
    const p = new Producer({ brokers: [proxyAddr], idempotent: true, lingerMs: 0, retry: { initialDelayMs: 20, maxDelayMs: 50 } });
    let retries = 0;
    p.on('retry', () => retries++);
    try {
      expect(p.producerId).toBe(''); // asked for at the first send
      await p.send({ topic: 'sdk-idem', messages: [{ value: 'warm-up' }] });
      expect(p.producerId).toMatch(/^(0|[1-9][0-9]*)$/);
      dropNextBatch = 1;
      const meta = await p.send({ topic: 'sdk-idem', messages: [{ value: 'one' }, { value: 'two' }, { value: 'three' }] });
      expect(meta.map((m) => m.offset)).toEqual([1, 2, 3]);
      expect(retries).toBeGreaterThanOrEqual(1);
      const sent = await Promise.all(Array.from({ length: 20 }, (_, i) => p.send({ topic: 'sdk-idem', messages: [{ value: `n${i}` }] })));
      expect(sent.map((m) => m[0]!.offset)).toEqual(Array.from({ length: 20 }, (_, i) => 4 + i));
    } finally {
      await p.close();
    }
    const recs = (await admin.consume({ topic: 'sdk-idem', partition: 0, offset: 0, batch: 1000 })).records;
    expect(recs.map((r) => r.value.toString())).toEqual(['warm-up', 'one', 'two', 'three', ...Array.from({ length: 20 }, (_, i) => `n${i}`)]);
    expect(recs.every((r) => r.producerId === p.producerId)).toBe(true);
  });
});
