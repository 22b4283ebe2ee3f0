/**
 * Fenced reads on a real standalone broker (docs/protocol.md, "Fenced reads"): a CONSUME or STREAM with
 * member= and generation= is served only to the member that owns the partition at its own generation,
 * and a running STREAM ends `removed` the moment its member loses the partition. Reads without a member
 * stay unfenced; a member without its generation (or the reverse) is bad input.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Batch } from 'tributary-protocol/batch.js';
import type { Connection } from 'tributary-protocol/connection.js';
import type { BrokerProcess } from '../../helpers/launcher.js';
import { eventually, expectError } from '../../helpers/util.js';
import { GroupMember, fill, groupStatus, kv, startBroker } from './helpers.js';

const TOPIC = 'fenced';

describe('fenced reads (standalone)', () => {
  let broker: BrokerProcess;
  let admin: Connection;

  beforeAll(async () => {
    broker = await startBroker();
    admin = await broker.connect();
    await admin.command('CREATE', { topic: TOPIC, partitions: 2 });
    await fill(admin, TOPIC, 2, 5);
  });

  afterAll(async () => {
    await admin?.close().catch(() => {});
    await broker?.dispose();
  });

  const read = (c: Connection, fields: Record<string, string | number | undefined>) =>
    c.consume({ topic: TOPIC, offset: 0, batch: 100, max_bytes: 1 << 20, isolation: 'read_uncommitted', ...fields });

  it('refuses a member without its generation (or the reverse) as bad input, and changes nothing', async () => {
    await expectError(read(admin, { partition: 0, group: 'g-bad', member: 'x' }), 'invalid_parameter', { param: 'generation' });
    await expectError(read(admin, { partition: 0, group: 'g-bad', generation: 1 }), 'invalid_parameter', { param: 'member' });
    await expectError(read(admin, { partition: 0, member: 'x', generation: 1 }), 'invalid_parameter', { param: 'group' });
    expect(kv(await admin.command('LIST_GROUPS')).get('groups') ?? '').not.toContain('g-bad');
    // unfenced reads are served as before: without a group, and with a group but no member
    expect((await read(admin, { partition: 0 })).records).toHaveLength(5);
    expect((await read(admin, { partition: 0, group: 'g-bad' })).records).toHaveLength(5);
  });

  it('serves the owner at its generation; refuses strangers, other generations and partitions it does not own', async () => {
    const a = await GroupMember.connect(broker, TOPIC, 'g-own', 'a');
    const b = await GroupMember.connect(broker, TOPIC, 'g-own', 'b');
    try {
      await a.join();
      await a.sync();
      expect(a.owned).toEqual([0, 1]);
      const me = { group: 'g-own', member: a.id, generation: a.generation };
      expect((await read(a.conn, { partition: 1, ...me })).records).toHaveLength(5);
      await expectError(read(a.conn, { partition: 1, ...me, generation: a.generation + 1 }), 'GEN_MISMATCH');
      await expectError(read(a.conn, { partition: 1, ...me, member: 'ghost' }), 'member_not_found');
      // b joins; a gives a partition up at its sync, b takes it
      await b.join();
      await eventually('a and b to share the partitions', async () => {
        await a.poll(20);
        await b.poll(20);
        const s = await groupStatus(admin, 'g-own');
        return s.state === 'Stable' && a.owned.length === 1 && b.owned.length === 1;
      }, 10_000, 0);
      const lost = b.owned[0]!;
      await expectError(read(a.conn, { partition: lost, group: 'g-own', member: a.id, generation: a.generation }), 'NOT_OWNER', { partition: String(lost) });
      expect((await read(b.conn, { partition: lost, group: 'g-own', member: b.id, generation: b.generation })).records).toHaveLength(5);
    } finally {
      await a.conn.close().catch(() => {});
      await b.conn.close().catch(() => {});
    }
  });

  it('ends a running STREAM with CLOSE reason=removed the moment its member expires, serving nothing after', async () => {
    const a = await GroupMember.connect(broker, TOPIC, 'g-stream', 'a');
    const streamConn = await broker.connect();
    try {
      await a.join({ session_timeout_ms: 500 });
      await a.sync();
      const it = streamConn.stream({ topic: TOPIC, partition: 0, offset: 0, group: 'g-stream', member: a.id, generation: a.generation, keepalive_ms: 100 });
      const first = await it.next();
      expect(first.done).toBe(false);
      // a stops heartbeating: its session ends and the stream with it
      const end = await it.next();
      expect(end.done).toBe(true);
      expect(end.value).toMatchObject({ type: 'CLOSE', reason: 'removed', code: 'member_not_found' });
      const s = await groupStatus(admin, 'g-stream');
      expect(s.members).toEqual([]);
      // and a new stream of the expired member is refused before anything is served
      const again = await broker.connect();
      try {
        const it2 = again.stream({ topic: TOPIC, partition: 0, offset: 0, group: 'g-stream', member: a.id, generation: a.generation });
        await expectError(it2.next(), 'member_not_found');
      } finally {
        await again.close().catch(() => {});
      }
    } finally {
      await a.conn.close().catch(() => {});
      await streamConn.close().catch(() => {});
    }
  });

  it('ends the STREAM of a partition its member gives up at a sync, and keeps the one it keeps', async () => {
    const a = await GroupMember.connect(broker, TOPIC, 'g-move', 'a');
    const b = await GroupMember.connect(broker, TOPIC, 'g-move', 'b');
    const s0 = await broker.connect();
    const s1 = await broker.connect();
    try {
      await a.join();
      await a.sync();
      const streams = [s0, s1].map((c, p) => c.stream({ topic: TOPIC, partition: p, offset: 0, group: 'g-move', member: a.id, generation: a.generation, keepalive_ms: 100 }));
      for (const s of streams) expect((await s.next()).done).toBe(false);
      await b.join();
      await eventually('a and b to share the partitions', async () => {
        await a.poll(20);
        await b.poll(20);
        const st = await groupStatus(admin, 'g-move');
        return st.state === 'Stable' && a.owned.length === 1 && b.owned.length === 1;
      }, 10_000, 0);
      const gone = b.owned[0]!;
      const kept = a.owned[0]!;
      const end = await streams[gone]!.next();
      expect(end.done).toBe(true);
      expect(end.value).toMatchObject({ reason: 'removed', code: 'NOT_OWNER' });
      // the kept partition's stream goes on across a's rejoin (new generation): new records still arrive
      await admin.command('PUBLISH', { topic: TOPIC, partition: kept, message: 'after' });
      const next = await streams[kept]!.next();
      expect(next.done).toBe(false);
      expect((next.value as Batch).records.map((r) => r.value.toString())).toContain('after');
    } finally {
      for (const c of [a.conn, b.conn, s0, s1]) await c.close().catch(() => {});
    }
  });
});
