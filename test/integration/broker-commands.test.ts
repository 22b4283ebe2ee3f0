import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { partitionForKey } from 'tributary-protocol/partitioner.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { RawClient } from '../helpers/raw-client.js';
import { batchRec, sleep } from '../helpers/util.js';

function params(reply: string): Map<string, string> {
  return parseLine(reply).params;
}

describe('standalone broker commands', () => {
  let broker: BrokerProcess;
  let c: Connection;

  beforeAll(async () => {
    // A long poll may wait longer than a test lasts (see 'long-polls with wait_ms').
    broker = await BrokerProcess.start({ args: ['--max-wait-ms', '600000'] });
    c = await broker.connect();
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('answers PROTOCOL_INFO, NEGOTIATE and HELP', async () => {
    const info = params(await c.command('PROTOCOL_INFO'));
    expect(info.get('protocol')).toBe('tributary');
    expect(info.get('features')).toContain('structured_errors_v1');
    expect(info.get('error_classes')).toContain('routing');
    const neg = params(await c.command('NEGOTIATE', { version: 1, features: 'structured_errors_v1,bogus_v9' }));
    expect(neg.get('enabled')).toBe('structured_errors_v1');
    expect(neg.get('unsupported')).toBe('bogus_v9');
    await expect(c.command('NEGOTIATE', { version: 1, features: 'bogus_v9', require_features: true })).rejects.toMatchObject({ code: 'UNSUPPORTED_FEATURE' });
    // restore the SDK's features on this connection
    await c.command('NEGOTIATE', { version: 1, features: '*' });
    expect(params(await c.command('HELP')).get('commands')).toContain('CONSUME');
  });

  it('creates, lists, describes and deletes topics; CREATE is idempotent for an identical definition', async () => {
    const created = params(await c.command('CREATE', { topic: 'orders', partitions: 3 }));
    expect(created.get('partitions')).toBe('3');
    expect(created.get('created')).toBe('true');
    expect(params(await c.command('CREATE', { topic: 'orders', partitions: 3 })).get('created')).toBe('false');
    await expect(c.command('CREATE', { topic: 'orders', partitions: 5 })).rejects.toMatchObject({ code: 'topic_already_exists' });
    expect(params(await c.command('LIST')).get('topics')?.split(',')).toContain('orders');
    const d = await c.json<{ status: string; partitions: Array<{ id: number; leo: number; hwm: number; leader: string }> }>('DESCRIBE', { topic: 'orders' });
    expect(d.status).toBe('OK');
    expect(d.partitions.map((p) => p.id)).toEqual([0, 1, 2]);
    expect(d.partitions[0]!.leader).toBe(broker.address);
    const md = params(await c.command('METADATA', { topic: 'orders' }));
    expect(md.get('leaders')).toBe([broker.address, broker.address, broker.address].join(','));
    expect(md.get('epochs')).toBe('0,0,0');
    expect(params(await c.command('DELETE', { topic: 'orders' })).get('deleted')).toBe('true');
    await expect(c.command('DESCRIBE', { topic: 'orders' })).rejects.toMatchObject({ code: 'topic_not_found' });
  });

  it('ADD_PARTITIONS adds partitions (never removes them) and they survive a restart', async () => {
    await c.command('CREATE', { topic: 'grow', partitions: 2 });
    await c.command('PUBLISH', { topic: 'grow', partition: 1, message: 'old' });
    expect(await c.command('ADD_PARTITIONS', { topic: 'grow', partitions: 4 })).toBe('OK topic=grow partitions=4');
    await expect(c.command('ADD_PARTITIONS', { topic: 'grow', partitions: 3 })).rejects.toMatchObject({ code: 'invalid_parameter' });
    await expect(c.command('ADD_PARTITIONS', { topic: 'grow', partitions: 4 })).rejects.toMatchObject({ code: 'invalid_parameter' });
    await expect(c.command('ADD_PARTITIONS', { topic: 'nope', partitions: 4 })).rejects.toMatchObject({ code: 'topic_not_found' });
    await expect(c.command('ADD_PARTITIONS', { topic: '__consumer_offsets', partitions: 99 })).rejects.toMatchObject({ code: 'invalid_topic_name' });
    const r = await c.json<{ partition: number; offset: number }>('PUBLISH', { topic: 'grow', partition: 3, message: 'new' });
    expect(r).toMatchObject({ partition: 3, offset: 0 });
    expect(parseLine(await c.command('METADATA', { topic: 'grow' })).params.get('partitions')).toBe('4');
    await broker.restart();
    c = await broker.connect();
    expect(parseLine(await c.command('METADATA', { topic: 'grow' })).params.get('partitions')).toBe('4');
    expect((await c.consume({ topic: 'grow', partition: 3, offset: 0 })).records.map((x) => x.value.toString())).toEqual(['new']);
    expect((await c.consume({ topic: 'grow', partition: 1, offset: 0 })).records.map((x) => x.value.toString())).toEqual(['old']);
  });

  it('concurrent CREATEs of one name with different definitions: one is created, the other gets topic_already_exists', async () => {
    const other = await broker.connect();
    try {
      for (let i = 0; i < 3; i++) {
        const name = `cc${i}`;
        const [x, y] = await Promise.allSettled([
          c.command('CREATE', { topic: name, partitions: 2 }),
          other.command('CREATE', { topic: name, partitions: 5, retention_hours: 1 }),
        ]);
        const outcomes = [x, y].map((r) => (r.status === 'fulfilled' ? params(r.value).get('created') : (r.reason as { code: string }).code)).sort();
        expect(outcomes).toEqual(['topic_already_exists', 'true']);
        await c.command('DELETE', { topic: name });
      }
    } finally {
      await other.close();
    }
  });

  it('ADD_PARTITIONS racing DELETE never brings the deleted topic back: nothing is acknowledged for it, before or after a restart', async () => {
    const other = await broker.connect();
    try {
      for (let i = 0; i < 5; i++) {
        const name = `ad${i}`;
        await c.command('CREATE', { topic: name, partitions: 2 });
        const [add, del] = await Promise.allSettled([c.command('ADD_PARTITIONS', { topic: name, partitions: 4 }), other.command('DELETE', { topic: name })]);
        expect(del.status).toBe('fulfilled');
        if (add.status === 'rejected') expect(add.reason).toMatchObject({ code: 'topic_not_found' });
        expect(params(await c.command('LIST')).get('topics')?.split(',')).not.toContain(name);
        await expect(c.command('PUBLISH', { topic: name, partition: 3, acks: 'all', message: 'precious' })).rejects.toMatchObject({ code: 'topic_not_found' });
      }
    } finally {
      await other.close();
    }
    await c.close();
    await broker.restart();
    c = await broker.connect();
    const topics = params(await c.command('LIST')).get('topics')?.split(',') ?? [];
    expect(topics.filter((t) => /^ad\d$/.test(t))).toEqual([]);
  });

  it('rejects reserved and malformed topic names', async () => {
    for (const topic of ['__consumer_offsets', '.', '..', '../etc', 'a b', 'x'.repeat(250)]) {
      await expect(c.command('CREATE', { topic })).rejects.toMatchObject({ code: 'invalid_topic_name' });
    }
  });

  it('the longest topic name its directory can hold is taken and survives a restart; one character more is refused and stores nothing', async () => {
    // A 249-character name was stored, then failed to open (ENAMETOOLONG): the broker never started again.
    const longest = 'L'.repeat(238);
    await expect(c.command('CREATE', { topic: `${longest}x` })).rejects.toMatchObject({ code: 'invalid_topic_name' });
    await c.command('CREATE', { topic: longest, partitions: 1 });
    await c.command('PUBLISH', { topic: longest, partition: 0, message: 'kept' });
    await c.close();
    await broker.restart();
    c = await broker.connect();
    expect((await c.consume({ topic: longest, partition: 0, offset: 0 })).records.map((r) => r.value.toString())).toEqual(['kept']);
    expect(await c.command('LIST')).not.toContain(`${longest}x`);
    await c.command('DELETE', { topic: longest });
  });

  it('publishes with explicit partition, key hash and round-robin, and reads back in order', async () => {
    await c.command('CREATE', { topic: 'pub', partitions: 4 });
    const a = await c.json<{ partition: number; offset: number; leader: string }>('PUBLISH', { topic: 'pub', partition: 2, message: 'hello world = "quoted"' });
    expect(a).toMatchObject({ status: 'OK', partition: 2, offset: 0, leader: broker.address });
    const keyed = await c.json<{ partition: number }>('PUBLISH', { topic: 'pub', key: 'user-42', message: 'k' });
    expect(keyed.partition).toBe(partitionForKey(Buffer.from('user-42'), 4));
    const rr = new Set<number>();
    for (let i = 0; i < 8; i++) rr.add((await c.json<{ partition: number }>('PUBLISH', { topic: 'pub', message: `rr${i}` })).partition);
    expect(rr.size).toBe(4);
    expect(await c.command('PUBLISH', { topic: 'pub', partition: 1, acks: 0, message: 'fire and forget' })).toBe('OK');
    const batch = await c.consume({ topic: 'pub', partition: 2, offset: 0 });
    expect(batch.records[0]!.value.toString()).toBe('hello world = "quoted"');
    expect(batch.records.map((r) => r.offset)).toEqual(batch.records.map((_, i) => i));
    expect(batch.trailer?.nextOffset).toBe(batch.records.length);
  });

  it('appends binary batches and honours batch and max_bytes limits', async () => {
    await c.command('CREATE', { topic: 'bin', partitions: 1 });
    const records = Array.from({ length: 100 }, (_, i) => batchRec(`v${i}`.padEnd(100, '.'), { key: Buffer.from(`k${i}`) }));
    const r1 = await c.produceBatch({ topic: 'bin', partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records });
    expect(r1).toMatchObject({ partition: 0, base_offset: 0, last_offset: 99, count: 100 });
    const r2 = await c.produceBatch({ topic: 'bin', partition: 0, acks: 'all', idempotent: false, firstSequence: 0, lastSequence: 0, records: records.slice(0, 10) });
    expect(r2).toMatchObject({ base_offset: 100, last_offset: 109 });
    const b = await c.consume({ topic: 'bin', partition: 0, offset: 5, batch: 7 });
    expect(b.records.map((r) => r.offset)).toEqual([5, 6, 7, 8, 9, 10, 11]);
    expect(b.records[0]!.key?.toString()).toBe('k5');
    expect(b.records[0]!.timestamp).toBeGreaterThan(Date.now() - 60_000);
    const small = await c.consume({ topic: 'bin', partition: 0, offset: 0, max_bytes: 150 });
    expect(small.records.length).toBeGreaterThanOrEqual(1);
    expect(small.records.length).toBeLessThan(3);
    const end = await c.consume({ topic: 'bin', partition: 0, offset: 110 });
    expect(end.records).toHaveLength(0);
    await expect(c.consume({ topic: 'bin', partition: 0, offset: 111 })).rejects.toMatchObject({ code: 'OFFSET_OUT_OF_RANGE' });
    const reset = await c.consume({ topic: 'bin', partition: 0, offset: 5000, autoOffsetReset: 'earliest', batch: 1 });
    expect(reset.records[0]!.offset).toBe(0);
    const offs = params(await c.command('LIST_OFFSETS', { topic: 'bin' }));
    expect(offs.get('offsets')).toBe('P0:earliest=0:latest=110:leo=110:hwm=110');
  });

  it('long-polls with wait_ms and wakes when a record arrives', async () => {
    await c.command('CREATE', { topic: 'poll', partitions: 1 });
    const other = await broker.connect();
    // A wait of 10 minutes: only the record arriving can end this poll within the test.
    const pending = c.consume({ topic: 'poll', partition: 0, offset: 0, wait_ms: 600_000 });
    await sleep(200);
    await other.command('PUBLISH', { topic: 'poll', partition: 0, message: 'wake' });
    const b = await pending;
    expect(b.records.map((r) => r.value.toString())).toEqual(['wake']);
    const empty = await c.consume({ topic: 'poll', partition: 0, offset: 1, wait_ms: 300 });
    expect(empty.records).toHaveLength(0);
  });

  it('answers pipelined requests in order', async () => {
    await c.command('CREATE', { topic: 'pipe', partitions: 1 });
    const replies = await Promise.all(Array.from({ length: 200 }, (_, i) => c.json<{ offset: number }>('PUBLISH', { topic: 'pipe', partition: 0, message: `m${i}` })));
    expect(replies.map((r) => r.offset)).toEqual(replies.map((_, i) => i));
    const mixed = await Promise.all([c.command('LIST'), c.command('PUBLISH', { topic: 'pipe', partition: 0, message: 'x' }), c.command('PROTOCOL_INFO')]);
    expect(mixed[0]).toMatch(/^OK count=/);
    expect(mixed[1]).toMatch(/"offset":200/);
    expect(mixed[2]).toMatch(/^OK protocol=tributary/);
  });

  it('streams records as they arrive and ends with STREAM_CONTROL type=CLOSE', async () => {
    await c.command('CREATE', { topic: 'stream', partitions: 1 });
    for (let i = 0; i < 5; i++) await c.command('PUBLISH', { topic: 'stream', partition: 0, message: `s${i}` });
    const s = await broker.connect();
    const ac = new AbortController();
    const seen: string[] = [];
    const it = s.stream({ topic: 'stream', partition: 0, offset: 2 }, ac.signal);
    const consumer = (async () => {
      for (;;) {
        const n = await it.next();
        if (n.done) return n.value;
        for (const r of n.value.records) seen.push(r.value.toString());
        if (seen.length === 5) ac.abort();
      }
    })();
    await sleep(200);
    await c.command('PUBLISH', { topic: 'stream', partition: 0, message: 's5' });
    await c.command('PUBLISH', { topic: 'stream', partition: 0, message: 's6' });
    const close = await consumer;
    expect(seen).toEqual(['s2', 's3', 's4', 's5', 's6']);
    expect(close).toMatchObject({ type: 'CLOSE', reason: 'stopped', offset: '7' });
  });

  it('STREAM_CONTROL: outside a stream no stream is open; on one only type=CLOSE, without other parameters, ends it', async () => {
    await c.command('CREATE', { topic: 'control', partitions: 1 });
    const r = await RawClient.connect(broker.port);
    try {
      const error = (reply: string) => parseLine(reply.slice('ERROR: '.length));
      const outside = error(await r.command('STREAM_CONTROL type=CLOSE'));
      expect(outside.head).toBe('invalid_parameter');
      expect(outside.params.get('param')).toBe('command');
      expect(outside.params.get('reason')).toMatch(/no stream is open/);
      r.send('STREAM topic=control partition=0 offset=0');
      /** The next frame that is not a keepalive. */
      const next = async () => {
        for (;;) {
          const f = await r.next(10_000);
          if (f.length > 0) return f;
        }
      };
      r.send('STREAM_CONTROL type=CLOSE bogus=1');
      const bogus = error(await next());
      expect(Object.fromEntries(bogus.params)).toMatchObject({ param: 'bogus', reason: 'unknown parameter' });
      r.send('STREAM_CONTROL type=OPEN');
      expect(error(await next()).params.get('param')).toBe('command');
      // The stream goes on: a record published now is pushed.
      await c.command('PUBLISH', { topic: 'control', partition: 0, message: 'still streaming' });
      expect(await next()).toContain('still streaming');
      r.send('STREAM_CONTROL type=CLOSE');
      expect(parseLine(await next()).params).toEqual(new Map([['type', 'CLOSE'], ['reason', 'stopped'], ['offset', '1']]));
      await r.closedP;
    } finally {
      r.destroy();
    }
  });

  it('on a stream, a STREAM_CONTROL that does not parse gets the parse error and bytes not UTF-8 invalid_encoding, as off one', async () => {
    await c.command('CREATE', { topic: 'control-parse', partitions: 1 });
    const r = await RawClient.connect(broker.port);
    try {
      const error = (reply: string) => parseLine(reply.slice('ERROR: '.length));
      r.send('STREAM topic=control-parse partition=0 offset=0');
      const next = async () => {
        for (;;) {
          const f = await r.next(10_000);
          if (f.length > 0) return f;
        }
      };
      // The request is STREAM_CONTROL type=CLOSE, written wrong: not "only STREAM_CONTROL type=CLOSE is accepted".
      r.send('STREAM_CONTROL type=CLOSE type=CLOSE');
      expect(Object.fromEntries(error(await next()).params)).toMatchObject({ param: 'type', reason: 'given more than once' });
      r.send('STREAM_CONTROL type=CLOSE note="open');
      expect(Object.fromEntries(error(await next()).params)).toMatchObject({ param: 'note', reason: 'unterminated quoted value' });
      r.send(Buffer.from([0x53, 0x54, 0xff, 0xfe]));
      expect(error(await next()).head).toBe('invalid_encoding');
      // Anything else is still refused as before (a batch frame too), and the stream goes on.
      r.send('HELP');
      expect(error(await next()).params.get('reason')).toMatch(/only STREAM_CONTROL type=CLOSE/);
      r.send(Buffer.from([0xba, 0x7c, 0xff]));
      expect(error(await next()).params.get('reason')).toMatch(/only STREAM_CONTROL type=CLOSE/);
      await c.command('PUBLISH', { topic: 'control-parse', partition: 0, message: 'still streaming' });
      expect(await next()).toContain('still streaming');
      r.send('STREAM_CONTROL type=CLOSE');
      expect(parseLine(await next()).params.get('reason')).toBe('stopped');
      await r.closedP;
    } finally {
      r.destroy();
    }
  });

  it('ends a stream with reason=removed when its topic is deleted', async () => {
    await c.command('CREATE', { topic: 'doomed', partitions: 1 });
    const s = await broker.connect();
    const it = s.stream({ topic: 'doomed', partition: 0, offset: 0 });
    const first = it.next();
    await sleep(200);
    await c.command('DELETE', { topic: 'doomed' });
    const n = await first;
    expect(n.done).toBe(true);
    expect(n.value).toMatchObject({ reason: 'removed' });
  });

  it('reports health, readiness and Prometheus metrics', async () => {
    expect((await broker.health('/live')).status).toBe(200);
    expect((await broker.health('/ready')).status).toBe(200);
    const m = await broker.health('/metrics');
    expect(m.body).toMatch(/tributary_records_in_total\{topic="bin"\} 110/);
    expect(m.body).toContain('tributary_request_duration_seconds_bucket');
    expect(m.body).toMatch(/tributary_connections \d+/);
  });

  it('keeps topics and records across a graceful restart', async () => {
    await c.command('CREATE', { topic: 'durable', partitions: 2 });
    for (let i = 0; i < 20; i++) await c.command('PUBLISH', { topic: 'durable', partition: i % 2, message: `d${i}` });
    expect(await broker.stop()).toBe(0);
    await broker.relaunch();
    c = await broker.connect();
    const b0 = await c.consume({ topic: 'durable', partition: 0, offset: 0 });
    const b1 = await c.consume({ topic: 'durable', partition: 1, offset: 0 });
    expect(b0.records.map((r) => r.value.toString())).toEqual(Array.from({ length: 10 }, (_, i) => `d${i * 2}`));
    expect(b1.records.map((r) => r.value.toString())).toEqual(Array.from({ length: 10 }, (_, i) => `d${i * 2 + 1}`));
    expect(params(await c.command('LIST')).get('topics')).toContain('durable');
  });
});
