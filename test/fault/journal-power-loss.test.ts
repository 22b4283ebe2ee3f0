/**
 * The journal on a real broker process (--journal true; docs/architecture.md "The journal"): acknowledged
 * records are durable in the journal before any segment fsync, so a crash of the machine that takes the
 * segments' unsynced bytes loses none of them. Simulated here by a kill -9 and then cutting every segment
 * file to nothing (no segment was fsynced: the flush interval is longer than the test), before the restart.
 * A journal write that finds the disk full (failpoint `journal.full`: half of it written, then ENOSPC) is
 * tried again until space frees, its appends acknowledged then; no log fails (docs/operations.md, "A full disk").
 */
import { readdirSync } from 'node:fs';
import { readdir, rm, truncate, unlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { expectAcknowledgedStored, readValues, type StoredAt } from '../helpers/acked-records.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { RawClient } from '../helpers/raw-client.js';
import { parseLine } from 'tributary-protocol/command.js';
import { removeDir, tempDir, until } from '../helpers/util.js';

const PARTITIONS = 3;

async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...(await filesUnder(p)));
    else out.push(p);
  }
  return out;
}

/** Cuts every segment file of topic `topic` to nothing and deletes its indexes (a machine crash before any segment fsync). */
async function loseUnsyncedSegments(dataDir: string, topic: string, logs: number): Promise<void> {
  const segments = (await filesUnder(path.join(dataDir, 'logs'))).filter((f) => f.includes(`${path.sep}${topic}~`) && /\.(log|index)$/.test(f));
  expect(segments.filter((f) => f.endsWith('.log'))).toHaveLength(logs);
  for (const f of segments) {
    if (f.endsWith('.log')) await truncate(f, 0);
    else await unlink(f);
  }
}

describe('the journal', () => {
  let broker: BrokerProcess | undefined;
  let faults: string | undefined;
  afterEach(async () => {
    await broker?.dispose();
    broker = undefined;
    if (faults) await removeDir(faults);
    faults = undefined;
  });

  it('a restart after the segments lost every unsynced byte still has each acknowledged record where it was acknowledged', async () => {
    broker = await BrokerProcess.start({ args: ['--journal', 'true', '--flush-interval-ms', '600000', '--offsets-topic-partitions', '1'] });
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'j', partitions: PARTITIONS });
    const acked = new Map<string, StoredAt>();
    await Promise.all(
      Array.from({ length: PARTITIONS }, async (_, partition) => {
        for (let i = 0; i < 150; i++) {
          const value = `p${partition}-${i}`;
          const r = await c.json<{ offset: number }>('PUBLISH', { topic: 'j', partition, acks: 'all', message: value });
          acked.set(value, { partition, offset: r.offset });
        }
      }),
    );
    // Every acknowledgement came from a journal write (one write may cover several appends).
    const metrics = (await broker.health('/metrics')).body;
    const writes = Number(/^tributary_journal_write_seconds_count (\d+)/m.exec(metrics)?.[1]);
    expect(writes).toBeGreaterThan(0);
    expect(writes).toBeLessThanOrEqual(acked.size + 10);
    await broker.kill();
    await loseUnsyncedSegments(broker.dataDir, 'j', PARTITIONS);
    await broker.relaunch();
    const r = await broker.connect();
    const stored = new Map<string, StoredAt>();
    for (let p = 0; p < PARTITIONS; p++) await readValues(r, 'j', p, stored);
    expect(stored.size).toBe(acked.size);
    expectAcknowledgedStored(acked, stored);
    expect(broker.stderr).toMatch(/replayed records from the journal/);
  });

  it('a journal write that finds the disk full is tried again until space frees: its append is acknowledged then, no log fails, and a power loss keeps every acknowledged record', async () => {
    faults = await tempDir('tributary-journal-full-');
    const full = path.join(faults, 'journal-full');
    broker = await BrokerProcess.start({
      args: ['--journal', 'true', '--flush-interval-ms', '600000', '--offsets-topic-partitions', '1'],
      env: { TRIBUTARY_FAILPOINTS: `journal.full?${full}` },
    });
    const c = await broker.connect();
    await c.command('CREATE', { topic: 'f', partitions: 1 });
    const acked = new Map<string, StoredAt>();
    const publish = async (value: string) => {
      const r = await c.json<{ offset: number }>('PUBLISH', { topic: 'f', partition: 0, acks: 'all', message: value });
      acked.set(value, { partition: 0, offset: r.offset });
    };
    for (let i = 0; i < 20; i++) await publish(`before-${i}`);

    await writeFile(full, '');
    let settled = false;
    const during = publish('during').finally(() => {
      settled = true;
    });
    await until(() => /journal write failed, the disk is full/.test(broker!.stderr) && /failpoint journal\.full: refusing/.test(broker!.stderr), 10_000, 'the full journal write');
    // Retried, not failed: the append waits and the log takes no failure.
    await until(() => (broker!.stderr.match(/failpoint journal\.full: refusing/g) ?? []).length >= 3, 10_000, 'a retry');
    expect(settled).toBe(false);
    expect(/^tributary_failed_logs (\d+)/m.exec((await broker.health('/metrics')).body)?.[1]).toBe('0');

    await rm(full);
    await during;
    expect(acked.get('during')).toEqual({ partition: 0, offset: 20 });
    for (let i = 0; i < 20; i++) await publish(`after-${i}`);

    await broker.kill();
    await loseUnsyncedSegments(broker.dataDir, 'f', 1);
    await broker.relaunch();
    const r = await broker.connect();
    const stored = new Map<string, StoredAt>();
    await readValues(r, 'f', 0, stored);
    expect(stored.size).toBe(41);
    expectAcknowledgedStored(acked, stored);
    // The retry wrote over what the short write left: the journal reads whole.
    expect(broker.stderr).not.toMatch(/cut or damaged/);
  });

  it('a broker stopped while a journal write waits for space gives up on it and stops (it hung), losing nothing it acknowledged', async () => {
    faults = await tempDir('tributary-journal-full-');
    const full = path.join(faults, 'journal-full');
    broker = await BrokerProcess.start({ args: ['--journal', 'true'], env: { TRIBUTARY_FAILPOINTS: `journal.full?${full}` } });
    const c = await broker.connect();
    await c.command('CREATE', { topic: 's', partitions: 1 });
    await c.json('PUBLISH', { topic: 's', partition: 0, acks: 'all', message: 'acked' });
    await writeFile(full, '');
    const waiting = c.json('PUBLISH', { topic: 's', partition: 0, acks: 'all', message: 'never acked' }).then(
      () => 'acknowledged',
      () => 'refused',
    );
    await until(() => /journal write failed, the disk is full/.test(broker!.stderr), 10_000, 'the full journal write');
    // Its other final writes had room (only the journal's failpoint refuses): a clean stop.
    expect(await broker.stop()).toBe(0);
    expect(await waiting).toBe('refused');
    expect(broker.stderr).toMatch(/journal failed: appends under flush=always are refused/);
    await rm(full);
    await broker.relaunch();
    const stored = new Map<string, StoredAt>();
    await readValues(await broker.connect(), 's', 0, stored);
    expect(stored.get('acked')).toEqual({ partition: 0, offset: 0 });
  });

  it('while a journal write waits for space, retention goes on (it may be what frees the space), and a stop with a coordinator write waiting returns', async () => {
    faults = await tempDir('tributary-journal-full-');
    const full = path.join(faults, 'journal-full');
    broker = await BrokerProcess.start({
      args: ['--journal', 'true', '--segment-bytes', '1024', '--retention-check-ms', '100', '--offsets-topic-partitions', '1', '--transaction-state-partitions', '1', '--shutdown-timeout-ms', '1000'],
      env: { TRIBUTARY_FAILPOINTS: `journal.full?${full}` },
    });
    const segments = (topic: string) => {
      const logs = path.join(broker!.dataDir, 'logs');
      const d = readdirSync(logs).find((x) => x.startsWith(`${topic}~`)) as string;
      return readdirSync(path.join(logs, d, '0')).filter((f) => f.endsWith('.log')).length;
    };
    const c = await broker.connect();
    for (const topic of ['a', 'b']) await c.command('CREATE', { topic, partitions: 1 });
    for (let i = 0; i < 30; i++) for (const topic of ['a', 'b']) await c.json('PUBLISH', { topic, partition: 0, acks: 'all', message: 'x'.repeat(200) });
    expect(segments('a')).toBeGreaterThan(5);
    // A member with a commit: the group coordinator's partition loaded and written.
    const raw = await RawClient.connect(broker.port);
    const joined = parseLine(await raw.command('JOIN_GROUP topic=a group=g member=m1 session_timeout_ms=300000 rebalance_timeout_ms=300000'));
    const as = `member=${joined.params.get('member')} generation=${joined.params.get('generation')}`;
    expect(await raw.command(`SYNC_GROUP topic=a group=g ${as}`)).toMatch(/^OK /);
    expect(await raw.command(`COMMIT_OFFSET topic=a group=g partition=0 offset=1 ${as}`)).toBe('OK');
    // The transaction coordinator loaded: a later INIT_PRODUCER_ID goes straight to its write.
    expect(await raw.command('INIT_PRODUCER_ID transactional_id=x0 transaction_timeout_ms=900000')).toMatch(/^OK /);
    await writeFile(full, '');
    let settled = false;
    const pending = (await broker.connect()).json('PUBLISH', { topic: 'a', partition: 0, acks: 'all', message: 'pending' }).finally(() => {
      settled = true;
    });
    pending.catch(() => {}); // refused once the stop gives up
    await until(() => /journal write failed, the disk is full/.test(broker!.stderr), 10_000, 'the full journal write');
    for (const topic of ['a', 'b']) await c.command('ALTER_TOPIC', { topic, retention_bytes: 2000 });
    await until(() => segments('a') < 5 && segments('b') < 5, 20_000, 'retention of both topics');
    expect(settled).toBe(false);

    // A transactional id's first INIT_PRODUCER_ID writes __transaction_state, and waits for the journal too,
    // holding the transaction coordinator's lock of the id, which its stop waits for.
    const tries = () => (broker!.stderr.match(/failpoint journal\.full: refusing/g) ?? []).length;
    const before = tries();
    let initSettled = false;
    const init = (await RawClient.connect(broker.port)).command('INIT_PRODUCER_ID transactional_id=x1 transaction_timeout_ms=900000').then(
      (reply) => `answered ${reply}`,
      () => 'connection closed',
    );
    void init.finally(() => {
      initSettled = true;
    });
    // A try of the journal's write after the INIT's write joined it.
    await until(() => tries() >= before + 2, 10_000, 'two more tries');
    expect(initSettled).toBe(false);
    expect(await broker.stop()).toBe(0);
    expect(await init).toBe('connection closed');
    expect(broker.stderr).toMatch(/journal failed: appends under flush=always are refused/);
  });
});
