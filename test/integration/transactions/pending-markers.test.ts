/**
 * A broker restarted with decided transactions whose markers cannot be written (their partition's log
 * refuses them, as a full disk does: failpoint `partition.marker:<topic>?<file>`, armed while the file
 * exists) starts all the same and serves every other transactional id; the stuck ids' next transaction
 * waits (a retriable error) while the coordinator retries their markers in the background. Once the disk
 * has room the markers land as decided: a read_committed reader sees the committed records and none of
 * the aborted ones (docs/architecture.md, "Transaction coordinator").
 */
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { RawTxnProducer, readAll } from './helpers.js';
import { eventually, expectError, removeDir, tempDir } from '../../helpers/util.js';

const ARGS = ['--transaction-state-partitions', '2', '--log-level', 'info'];
const STUCK = 'pm-stuck';
const OTHER = 'pm-other';

describe('decided transactions whose markers fail across a restart', () => {
  let broker: BrokerProcess;
  let faults: string;
  /** While this file exists, STUCK's partition refuses markers. */
  let diskFull: string;

  beforeAll(async () => {
    faults = await tempDir('tributary-pm-faults-');
    diskFull = path.join(faults, 'disk-full');
    broker = await BrokerProcess.start({ args: ARGS, env: { TRIBUTARY_FAILPOINTS: `partition.marker:${STUCK}?${diskFull}` } });
  });

  afterAll(async () => {
    await broker?.dispose();
    if (faults) await removeDir(faults);
  });

  const values = async (c: Connection, topic: string, isolation: 'read_committed' | 'read_uncommitted') =>
    (await readAll(c, topic, 0, isolation)).filter((r) => !r.control).map((r) => r.value);

  it('the broker starts and serves other ids; the markers land once the disk has room', async () => {
    let c = await broker.connect();
    await c.command('CREATE', { topic: STUCK, partitions: 1 });
    await c.command('CREATE', { topic: OTHER, partitions: 1 });
    const committing = new RawTxnProducer(c, 'pm-commit');
    const aborting = new RawTxnProducer(c, 'pm-abort');
    for (const p of [committing, aborting]) {
      await p.init();
      await p.begin();
    }
    await committing.publish(STUCK, 'c1', { partition: 0 });
    await committing.publish(STUCK, 'c2', { partition: 0 });
    await aborting.publish(STUCK, 'a1', { partition: 0 });
    // The disk fills up: both are decided durably (END_TXN answers the decision), their markers refused.
    await writeFile(diskFull, '');
    expect(await committing.end('commit')).toBe('committed');
    expect(await aborting.end('abort')).toBe('aborted');

    // Restarted with the disk still full: it starts, decided transactions still unfinished.
    await broker.restart();
    expect((await broker.health('/ready')).status).toBe(200);
    c = await broker.connect();
    const stuck = { commit: new RawTxnProducer(c, 'pm-commit'), abort: new RawTxnProducer(c, 'pm-abort') };
    Object.assign(stuck.commit, { producerId: committing.producerId, epoch: committing.epoch });
    Object.assign(stuck.abort, { producerId: aborting.producerId, epoch: aborting.epoch });
    expect((await stuck.commit.status()).get('state')).toBe('committing');
    expect((await stuck.abort.status()).get('state')).toBe('aborting');

    // Every other transactional id works.
    const other = new RawTxnProducer(c, 'pm-other');
    await other.init();
    await other.begin();
    await other.publish(OTHER, 'o1', { partition: 0 });
    expect(await other.end('commit')).toBe('committed');
    expect(await values(c, OTHER, 'read_committed')).toEqual(['o1']);

    // The stuck ids' next transaction waits for their markers: the retriable storage error.
    expect((await expectError(stuck.commit.begin(), 'storage_error')).retriable).toBe(true);
    expect((await expectError(stuck.abort.begin(), 'storage_error')).retriable).toBe(true);
    // read_committed is held below them; the records are there.
    expect(await values(c, STUCK, 'read_committed')).toEqual([]);
    expect(await values(c, STUCK, 'read_uncommitted')).toEqual(['c1', 'c2', 'a1']);
    expect(broker.stderr).toMatch(/"transactionalId":"pm-commit".*"result":"commit".*"attempt":\d+.*retrying its offsets, markers and end/);

    // Room again: the background retry writes the markers as decided.
    await rm(diskFull);
    await eventually(
      'the markers to land',
      async () => (await stuck.commit.status()).get('state') === 'committed' && (await stuck.abort.status()).get('state') === 'aborted',
      30_000,
    );
    expect(await values(c, STUCK, 'read_committed')).toEqual(['c1', 'c2']);
    await stuck.commit.begin();
    expect((await stuck.commit.status()).get('state')).toBe('open');
  });
});
