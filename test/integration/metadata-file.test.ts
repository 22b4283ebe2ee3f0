/**
 * A broker process on a data directory whose metadata.json is missing or damaged does not start as a new
 * or smaller broker: it stays unready with a reason naming the file, and every topic directory (the
 * committed offsets in __consumer_offsets among them) is still there, so putting the file back brings
 * every record back (docs/operations.md, "The metadata file"); an older copy put back does not make
 * producer ids be handed out twice. A broker.lock that is not a file is named too.
 */
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseLine } from 'tributary-protocol/command.js';
import { BrokerProcess } from '../helpers/launcher.js';

const FAST = ['--offsets-topic-partitions', '1', '--transaction-state-partitions', '1'];

let broker: BrokerProcess | undefined;
afterEach(async () => {
  await broker?.dispose();
  broker = undefined;
});

/** A broker with topic t1 of 3 records, killed with -9; returns the names in its logs/. */
async function crashedWithTopic(): Promise<string[]> {
  broker = await BrokerProcess.start({ args: FAST });
  const c = await broker.connect();
  await c.command('CREATE', { topic: 't1', partitions: 1 });
  for (let i = 0; i < 3; i++) await c.json('PUBLISH', { topic: 't1', partition: 0, message: `m${i}` });
  // A committed offset, in __consumer_offsets.
  await c.command('RESET_OFFSETS', { group: 'g1', topic: 't1', to: 'offset', offset: 2 });
  await broker.kill('SIGKILL');
  return (await fs.readdir(path.join(broker.dataDir, 'logs'))).sort();
}

async function expectRecords(b: BrokerProcess): Promise<void> {
  const c = await b.connect();
  const batch = await c.consume({ topic: 't1', partition: 0, offset: 0 });
  expect(batch.records.map((r) => r.value.toString())).toEqual(['m0', 'm1', 'm2']);
  expect(await c.command('FETCH_OFFSET', { topic: 't1', group: 'g1', partition: 0 })).toBe('OK offset=2 committed=true');
}

describe('a damaged metadata.json at start', () => {
  it('missing: the broker stays unready naming the file, deletes nothing, and starts whole once the file is back', async () => {
    const dirs = await crashedWithTopic();
    expect(dirs.some((d) => d.startsWith('t1~'))).toBe(true);
    expect(dirs.some((d) => d.startsWith('__consumer_offsets~'))).toBe(true);
    const file = path.join(broker!.dataDir, 'metadata.json');
    await fs.rename(file, `${file}.away`);
    await broker!.relaunch();
    expect(broker!.stdout).toContain(`NOT READY: metadata file ${file}`);
    expect(broker!.stdout).toContain(`metadata file ${file} is missing`);
    const ready = await broker!.health('/ready');
    expect(ready.status).toBe(503);
    expect(ready.body).toContain(`metadata file ${file} is missing`);
    await broker!.kill('SIGKILL');
    expect((await fs.readdir(path.join(broker!.dataDir, 'logs'))).sort()).toEqual(dirs);
    await fs.rename(`${file}.away`, file);
    await broker!.relaunch();
    expect(broker!.stdout).not.toContain('NOT READY');
    await expectRecords(broker!);
  });

  it('a topic entry without topicId: unready naming the file and the entry, nothing deleted', async () => {
    const dirs = await crashedWithTopic();
    const file = path.join(broker!.dataDir, 'metadata.json');
    const good = await fs.readFile(file, 'utf8');
    const meta = JSON.parse(good);
    const t1 = meta.topics.find((t: { name: string }) => t.name === 't1');
    delete t1.topicId;
    await fs.writeFile(file, JSON.stringify(meta));
    await broker!.relaunch();
    expect(broker!.stdout).toMatch(/NOT READY: metadata file \S+metadata\.json has an invalid topic entry \d+ \("t1"\): "topicId" is missing/);
    await broker!.kill('SIGKILL');
    expect((await fs.readdir(path.join(broker!.dataDir, 'logs'))).sort()).toEqual(dirs);
    await fs.writeFile(file, good);
    await broker!.relaunch();
    await expectRecords(broker!);
  });

  it('empty or null: unready naming the file and the problem', async () => {
    await crashedWithTopic();
    const file = path.join(broker!.dataDir, 'metadata.json');
    await fs.writeFile(file, '');
    await broker!.relaunch();
    expect(broker!.stdout).toContain(`NOT READY: metadata file ${file} is empty`);
    await broker!.kill('SIGKILL');
    await fs.writeFile(file, 'null');
    await broker!.relaunch();
    expect(broker!.stdout).toContain(`NOT READY: metadata file ${file} does not hold a JSON object (found null)`);
  });

  it('a broker.lock that is a directory: the start fails naming the lock file', async () => {
    broker = await BrokerProcess.start({ args: FAST });
    await broker.kill('SIGKILL');
    const lock = path.join(broker.dataDir, 'broker.lock');
    await fs.rm(lock, { force: true });
    await fs.mkdir(lock);
    const err = await broker.relaunch().then(
      () => null,
      (e: Error) => e.message,
    );
    expect(err).toMatch(/exited with [1-9]\d* before listening/);
    expect(err).toContain(`${lock} is not a regular file (a directory)`);
    expect(existsSync(lock)).toBe(true);
  });
});

describe('an older metadata.json put back', () => {
  it('INIT_PRODUCER_ID does not hand out an id already used: a new producer is not taken for a duplicate of an old one', async () => {
    broker = await BrokerProcess.start({ args: FAST });
    let c = await broker.connect();
    await c.command('CREATE', { topic: 't1', partitions: 1 });
    const file = path.join(broker.dataDir, 'metadata.json');
    const older = await fs.readFile(file, 'utf8');
    const pid = async () => parseLine(await c.command('INIT_PRODUCER_ID')).params.get('producerId')!;
    const first = await pid();
    expect(await c.json('PUBLISH', { topic: 't1', partition: 0, producerId: first, epoch: 0, seqNum: 0, message: 'first' })).toMatchObject({ offset: 0 });
    await broker.kill('SIGKILL');
    // The copy from before the producer id was reserved (a restore, a file put back by hand).
    await fs.writeFile(file, older);
    await broker.relaunch();
    c = await broker.connect();
    const second = await pid();
    expect(Number(second)).toBeGreaterThan(Number(first));
    expect(await c.json('PUBLISH', { topic: 't1', partition: 0, producerId: second, epoch: 0, seqNum: 0, message: 'second' })).toMatchObject({ offset: 1 });
    const batch = await c.consume({ topic: 't1', partition: 0, offset: 0 });
    expect(batch.records.map((r) => r.value.toString())).toEqual(['first', 'second']);
  });
});
