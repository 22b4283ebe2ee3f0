/**
 * The SDK consumer in stream mode (docs/sdk.md, "Stream mode"; docs/protocol.md, "STREAM"): a seek() on an
 * idle partition takes effect without new records, and so does a pause(); a read_committed stream that passes only an aborted
 * transaction's records and marker moves the committed offset to the partition's end, as polls do; and a
 * stream the broker closes with `reason=error` but no code is a failed read (the leader looked up again,
 * backed off), not a clean end reopened at once.
 */
import diagnostics from 'node:diagnostics_channel';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { Consumer } from 'tributary-client/consumer.js';
import { channels } from 'tributary-client/events.js';
import { Producer } from 'tributary-client/producer.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { ScriptedServer } from '../../helpers/scripted-server.js';
import { until } from '../../helpers/util.js';

/** Lets the reader finish the batch it delivered and park in its wait for the next one. */
const settle = () => new Promise((r) => setImmediate(r)).then(() => new Promise((r) => setImmediate(r)));

describe('stream mode against a broker', () => {
  let broker: BrokerProcess;
  let admin: Connection;
  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--transaction-state-partitions', '1', '--group-join-window-ms', '20'] });
    admin = await broker.connect();
  });
  afterAll(async () => {
    await admin?.close();
    await broker?.dispose();
  });

  it('seek() on an idle partition reads again from there without new records', async () => {
    const topic = 'sm-seek';
    await admin.command('CREATE', { topic, partitions: 1 });
    const p = new Producer({ brokers: [broker.address] });
    await p.send({ topic, messages: Array.from({ length: 5 }, (_, i) => ({ value: `v${i}`, partition: 0 })) });
    await p.close();
    const c = new Consumer({ brokers: [broker.address], groupId: 'sm-seek', topic, mode: 'stream', autoCommit: false, autoOffsetReset: 'earliest' });
    try {
      const seen: number[] = [];
      void c.run({ eachMessage: async ({ message }) => void seen.push(message.offset) });
      await until(() => seen.length === 5, 15_000, 'the five records');
      await settle();
      c.seek(0, 2);
      await until(() => seen.length >= 8, 15_000, 'offsets 2..4 again');
      expect(seen).toEqual([0, 1, 2, 3, 4, 2, 3, 4]);
    } finally {
      await c.close();
    }
  });

  it('pause() on an idle partition stops its reader without new records; resume() reads on', async () => {
    const topic = 'sm-pause';
    await admin.command('CREATE', { topic, partitions: 1 });
    await admin.command('PUBLISH', { topic, partition: 0, message: 'v0' });
    // The reader of a paused partition reports when it has stopped (docs/sdk.md, tributary:consumer:paused).
    const stopped: number[] = [];
    const onPaused = (m: unknown) => {
      const e = m as { group: string; partition: number };
      if (e.group === 'sm-pause') stopped.push(e.partition);
    };
    diagnostics.subscribe(channels.consumerPaused.name, onPaused);
    const c = new Consumer({ brokers: [broker.address], groupId: 'sm-pause', topic, mode: 'stream', autoCommit: false, autoOffsetReset: 'earliest' });
    try {
      const seen: string[] = [];
      void c.run({ eachMessage: async ({ message }) => void seen.push(message.value.toString()) });
      await until(() => seen.length === 1, 15_000, 'the record');
      await settle(); // the stream is open and has nothing more to deliver
      c.pause([0]);
      await until(() => stopped.includes(0), 10_000, 'the paused reader to stop');
      await admin.command('PUBLISH', { topic, partition: 0, message: 'v1' });
      c.resume([0]);
      await until(() => seen.length === 2, 15_000, 'the record after resume()');
      expect(seen).toEqual(['v0', 'v1']);
    } finally {
      diagnostics.unsubscribe(channels.consumerPaused.name, onPaused);
      await c.close();
    }
  });

  it('read_committed: the committed offset passes an aborted transaction at the end of the partition', async () => {
    const topic = 'sm-abort';
    const group = 'sm-abort';
    await admin.command('CREATE', { topic, partitions: 1 });
    const p = new Producer({ brokers: [broker.address], transactionalId: 'sm-abort' });
    const c = new Consumer({ brokers: [broker.address], groupId: group, topic, mode: 'stream', autoOffsetReset: 'earliest', autoCommitIntervalMs: 50 });
    try {
      const inTransaction = async (values: string[]) => {
        const t = await p.transaction();
        await t.send({ topic, messages: values.map((value) => ({ value, partition: 0 })) });
        return t;
      };
      await (await inTransaction(['c0', 'c1'])).commit(); // 0, 1 and the commit marker at 2
      const committed = async () => {
        const r = parseLine(await admin.command('FETCH_OFFSET', { topic, group, partition: 0 })).params;
        return r.get('committed') === 'true' ? Number(r.get('offset')) : -1;
      };
      const seen: string[] = [];
      void c.run({ eachMessage: async ({ message }) => void seen.push(message.value.toString()) });
      await until(async () => (await committed()) === 3, 15_000, 'committed 3');
      await (await inTransaction(['a0', 'a1'])).abort(); // 3, 4 and the abort marker at 5
      await until(async () => (await committed()) === 6, 15_000, 'committed 6');
      expect(seen).toEqual(['c0', 'c1']);
    } finally {
      await c.close();
      await p.close();
    }
  });
});

describe('stream mode against a scripted broker', () => {
  let s: ScriptedServer;
  afterAll(async () => {
    await s?.close();
  });

  it('a close with reason=error and no code is a failed read: the leader is looked up again each time', async () => {
    s = await ScriptedServer.start();
    let gen = 0;
    s.on('FIND_COORDINATOR', () => `OK coordinator_id=0 host=127.0.0.1 port=${s.port} partition=0`);
    s.on('METADATA', () => `OK topic=t partitions=1 leaders=${s.address} epochs=0`);
    s.on('JOIN_GROUP', () => `OK generation=${++gen} member=m-1 leader=m-1 assignments=[0]`);
    s.on('SYNC_GROUP', () => `OK generation=${gen} member=m-1 leader=m-1 assignments=[0]`);
    s.on('HEARTBEAT', () => `OK member=m-1 generation=${gen}`);
    s.on('FETCH_OFFSET', () => 'OK offset=0 committed=true');
    s.on('LEAVE_GROUP', () => 'OK group=g member=m-1 left=true');
    s.on('STREAM', () => 'STREAM_CONTROL type=CLOSE reason=error offset=0');
    const c = new Consumer({ brokers: [s.address], groupId: 'g', topic: 't', mode: 'stream', heartbeatIntervalMs: 50, sessionTimeoutMs: 1000 });
    try {
      void c.run({ eachMessage: async () => {} });
      await until(() => s.count('STREAM') >= 3, 15_000, 'three streams');
      // Taken for a clean end, the stream was opened again at once on the same route, no METADATA between.
      expect(s.count('METADATA')).toBeGreaterThanOrEqual(3);
    } finally {
      await c.close();
    }
  });
});
