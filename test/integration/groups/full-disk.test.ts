/**
 * Consumer groups on a full disk (docs/operations.md, "A full disk"): a join needs a write of the group to
 * `__consumer_offsets`, which the full disk refuses (failpoint `disk.full?<file>`: every segment write
 * fails with ENOSPC while the file exists). The join is answered with the retriable `storage_error`
 * naming the full disk, not COORDINATOR_LOADING (which a partition reload after each refusal answered,
 * for ever), the broker logs it a bounded number of times, the SDK consumer reports it as a non-fatal
 * `crash`, and once space frees the group forms.
 */
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Consumer } from 'tributary-client/consumer.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { BrokerProcess } from '../../helpers/launcher.js';
import { eventually, expectError, removeDir, tempDir } from '../../helpers/util.js';

const TOPIC = 'full';

describe('consumer groups on a full disk', () => {
  let broker: BrokerProcess;
  let faults: string;
  let diskFull: string;

  beforeAll(async () => {
    faults = await tempDir('tributary-fd-groups-');
    diskFull = path.join(faults, 'disk-full');
    broker = await BrokerProcess.start({ args: ['--log-level', 'info', '--group-join-window-ms', '20'], env: { TRIBUTARY_FAILPOINTS: `disk.full?${diskFull}` } });
  });

  afterAll(async () => {
    await broker?.dispose();
    if (faults) await removeDir(faults);
  });

  const lines = (msg: string) => broker.stderr.split('\n').filter((l) => l.includes(msg)).length;

  it('a join is refused with storage_error while the disk is full, logged a bounded number of times; the group forms once space frees', async () => {
    const c = await broker.connect();
    await c.command('CREATE', { topic: TOPIC, partitions: 2 });
    await c.command('PUBLISH', { topic: TOPIC, partition: 0, message: 'm0' });
    await writeFile(diskFull, '');

    for (let i = 0; i < 40; i++) {
      const err = await expectError(c.command('JOIN_GROUP', { topic: TOPIC, group: 'gfull', member: 'w', session_timeout_ms: 60_000 }), 'storage_error');
      expect(err.retriable).toBe(true);
      expect(String(err.fields.reason)).toMatch(/disk is full/);
    }
    // The SDK consumer retries and reports the refusal after a session of it, not fatal.
    const consumer = new Consumer({ brokers: [broker.address], groupId: 'gfull2', topic: TOPIC, autoOffsetReset: 'earliest', sessionTimeoutMs: 6000, heartbeatIntervalMs: 500 });
    const crashes: Array<{ error: Error; fatal: boolean }> = [];
    consumer.on('crash', (e) => crashes.push(e));
    const got: string[] = [];
    const run = consumer.run({ eachMessage: ({ message }) => void got.push(message.value.toString()) });
    await eventually('a crash event', () => crashes.length > 0, 20_000);
    expect(crashes[0]!.fatal).toBe(false);
    expect(crashes[0]!.error).toBeInstanceOf(TributaryError);
    expect((crashes[0]!.error as TributaryError).code).toBe('storage_error');

    // Bounded: the first refusal at once, the rest counted into at most one line per 10 s.
    expect(lines('a group change was not written')).toBeGreaterThan(0);
    expect(lines('a group change was not written')).toBeLessThanOrEqual(3);
    expect(lines('reloading the partition')).toBe(0);
    expect(lines('rebalance failed')).toBeLessThanOrEqual(3);

    // Produce on the full disk: refused, and logged (rate-limited) naming the directory and the full disk.
    for (let i = 0; i < 100; i++) await expectError(c.command('PUBLISH', { topic: TOPIC, partition: 1, message: `x${i}` }), 'storage_error');
    const appends = broker.stderr.split('\n').filter((l) => l.includes('an append failed'));
    expect(appends.filter((l) => l.includes(`${TOPIC}`) && l.includes('disk is full')).length).toBeGreaterThan(0);
    expect(appends.length).toBeLessThanOrEqual(6);

    await rm(diskFull);
    const join = await c.command('JOIN_GROUP', { topic: TOPIC, group: 'gfull', member: 'w', session_timeout_ms: 60_000 });
    expect(join).toMatch(/generation=\d+/);
    await eventually('the group to form and read m0', () => got.includes('m0'), 20_000);
    await consumer.close();
    await run.catch(() => undefined);
  }, 60_000);
});
