/**
 * Producer ids (docs/architecture.md, "Producer ids"): the allocator hands out blocks reserved from the
 * metadata store, and the local store never reserves a range twice, across reopen included.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LocalMetadataStore } from 'tributary-broker/partition/metadata-store.js';
import { ProducerIdAllocator } from 'tributary-broker/partition/producer-ids.js';
import { PRODUCER_IDS_FILE } from 'tributary-broker/partition/metadata-file.js';
import { removeDir, tempDir } from '../../helpers/util.js';

/** A store whose reservations are counted and can be made to fail or wait. */
class FakeStore {
  next = 0;
  calls = 0;
  failNext = false;
  gate: Promise<void> = Promise.resolve();
  async reserveProducerIds(count: number): Promise<number> {
    this.calls++;
    await this.gate;
    if (this.failNext) {
      this.failNext = false;
      throw new Error('etcd unreachable');
    }
    const first = this.next;
    this.next += count;
    return first;
  }
  reads = 0;
  /** Holds a read's answer (the bound as it was when the read began) until opened. */
  readGate: Promise<void> = Promise.resolve();
  async reservedProducerIds(): Promise<number> {
    this.reads++;
    const bound = this.next;
    await this.readGate;
    return bound;
  }
}

function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((r) => {
    open = r;
  });
  return { promise, open };
}

describe('ProducerIdAllocator', () => {
  it('hands a block out id by id and reserves the next one only when it is used up', async () => {
    const store = new FakeStore();
    const ids = new ProducerIdAllocator(store, 3);
    const got: string[] = [];
    for (let i = 0; i < 7; i++) got.push(await ids.allocate());
    expect(got).toEqual(['0', '1', '2', '3', '4', '5', '6']);
    expect(store.calls).toBe(3);
  });

  it('concurrent callers share one reservation and get distinct ids', async () => {
    const store = new FakeStore();
    let open!: () => void;
    store.gate = new Promise<void>((r) => {
      open = r;
    });
    const ids = new ProducerIdAllocator(store, 10);
    const pending = Array.from({ length: 25 }, () => ids.allocate());
    open();
    const got = await Promise.all(pending);
    expect(new Set(got).size).toBe(25);
    expect(store.calls).toBe(3);
  });

  it('a failed reservation fails its callers and the next call reserves again', async () => {
    const store = new FakeStore();
    store.failNext = true;
    const ids = new ProducerIdAllocator(store, 5);
    await expect(ids.allocate()).rejects.toThrow('etcd unreachable');
    expect(await ids.allocate()).toBe('0');
    expect(store.calls).toBe(2);
  });
});

describe('ProducerIdAllocator.issued', () => {
  it('knows its own ids at once and refuses what is not a canonical decimal id', async () => {
    const store = new FakeStore();
    const ids = new ProducerIdAllocator(store, 10);
    const mine = await ids.allocate();
    expect(ids.issued(mine)).toBe(true);
    expect(ids.issued('9')).toBe(true); // the rest of its block went to no one else, but it is reserved
    for (const bad of ['', 'p-1', '01', '-1', '1.5', ' 1', '1e3', 'ffffffff-ffff', '12345678901234567']) expect(ids.issued(bad)).toBe(false);
    expect(store.reads).toBe(0);
  });

  it("an id another broker reserved is looked up in the store once, then known", async () => {
    const store = new FakeStore();
    const other = new ProducerIdAllocator(store, 10);
    const mine = new ProducerIdAllocator(store, 10);
    await mine.allocate(); // 0..9
    const theirs = await other.allocate(); // 10
    const answer = mine.issued(theirs);
    expect(answer).toBeInstanceOf(Promise);
    expect(await answer).toBe(true);
    expect(mine.issued('19')).toBe(true);
    expect(store.reads).toBe(1);
    expect(await mine.issued('20')).toBe(false);
  });

  it('a read that began before the question cannot refuse it: the id may have been reserved after it', async () => {
    const store = new FakeStore();
    const mine = new ProducerIdAllocator(store, 10);
    await mine.allocate(); // 0..9
    const first = gate();
    store.readGate = first.promise;
    const early = mine.issued('15'); // starts a read of the bound as it is now: 10
    await Promise.resolve();
    const other = new ProducerIdAllocator(store, 10);
    expect(await other.allocate()).toBe('10'); // 10..19, reserved while that read is out
    store.readGate = Promise.resolve();
    const late = mine.issued('15'); // asked after the read began
    first.open();
    // The early question's read answered 10: it started after that question, so the "no" stands for it;
    // the late question needs a read of its own, which sees 20.
    expect(await early).toBe(false);
    expect(await late).toBe(true);
    expect(store.reads).toBe(2);
  });

  it('a failed read fails the question (the caller answers retriably) and the next one reads again', async () => {
    const store = new FakeStore();
    const mine = new ProducerIdAllocator(store, 10);
    let fail = true;
    store.reservedProducerIds = async () => {
      store.reads++;
      if (fail) throw new Error('etcd unreachable');
      return 30;
    };
    await expect(mine.issued('25')).rejects.toThrow('etcd unreachable');
    fail = false;
    expect(await mine.issued('25')).toBe(true);
    expect(store.reads).toBe(2);
  });
});

describe('LocalMetadataStore.reserveProducerIds', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await tempDir('trib-pids-');
  });
  afterEach(async () => {
    await removeDir(dir);
  });

  it('never gives a range twice, also after a reopen, and keeps the topics', async () => {
    const a = new LocalMetadataStore(dir);
    await a.open();
    await a.createTopic({ name: 't', partitions: 2, replicationFactor: 1, idempotent: false, partitioner: 'hash_key', retentionHours: -1, retentionBytes: -1, cleanupPolicy: 'delete' });
    expect(await Promise.all([a.reserveProducerIds(1000), a.reserveProducerIds(1000)])).toEqual([0, 1000]);
    await a.close();
    const b = new LocalMetadataStore(dir);
    await b.open();
    expect(await b.reservedProducerIds()).toBe(2000); // what was reserved before the reopen stays reserved
    expect(await b.reserveProducerIds(10)).toBe(2000);
    expect(b.getTopic('t')?.partitions).toBe(2);
    // A topic change after a reservation keeps the reservation.
    await b.deleteTopic('t');
    await b.close();
    const c = new LocalMetadataStore(dir);
    await c.open();
    expect(await c.reserveProducerIds(1)).toBe(2010);
    expect(c.listTopics()).toEqual([]);
    await c.close();
  });

  it('an older metadata.json put back does not hand out a range again: the counter has a file of its own', async () => {
    const a = new LocalMetadataStore(dir);
    await a.open();
    await a.createTopic({ name: 't', partitions: 1, replicationFactor: 1, idempotent: false, partitioner: 'hash_key', retentionHours: -1, retentionBytes: -1, cleanupPolicy: 'delete' });
    const older = await fs.readFile(path.join(dir, 'metadata.json'), 'utf8');
    expect(JSON.parse(older).nextProducerId).toBe(0);
    expect(await a.reserveProducerIds(1000)).toBe(0);
    expect(await a.reserveProducerIds(1000)).toBe(1000);
    await a.close();
    await fs.writeFile(path.join(dir, 'metadata.json'), older);
    const b = new LocalMetadataStore(dir);
    await b.open();
    expect(b.getTopic('t')).toBeDefined();
    expect(await b.reservedProducerIds()).toBe(2000);
    expect(await b.reserveProducerIds(1000)).toBe(2000);
    await b.close();
    // A data directory from before the counter's own file: metadata.json's counter is taken.
    await fs.rm(path.join(dir, PRODUCER_IDS_FILE));
    const c = new LocalMetadataStore(dir);
    await c.open();
    expect(await c.reserveProducerIds(1)).toBe(3000);
    // A damaged counter file stops the start, naming it.
    await fs.writeFile(path.join(dir, PRODUCER_IDS_FILE), '{"nextProducerId":"x"}');
    await expect(new LocalMetadataStore(dir).open()).rejects.toThrow(`metadata file ${path.join(dir, PRODUCER_IDS_FILE)} is not a producer id counter`);
  });

  it('refuses a bad count and a corrupt counter', async () => {
    const a = new LocalMetadataStore(dir);
    await a.open();
    await expect(a.reserveProducerIds(0)).rejects.toMatchObject({ code: 'invalid_parameter' });
    await a.close();
    await fs.writeFile(path.join(dir, 'metadata.json'), JSON.stringify({ version: 1, topics: [], nextProducerId: -5 }));
    await expect(new LocalMetadataStore(dir).open()).rejects.toThrow(/nextProducerId/);
  });
});
