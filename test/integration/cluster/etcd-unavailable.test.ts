/**
 * etcd frozen (SIGSTOP): metadata changes fail fast with the retriable metadata_unavailable, reads keep
 * serving the last known state, and everything works again after SIGCONT. Own etcd: freezing it would
 * stall the other files' tests.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { EtcdMetadataStore } from 'tributary-broker/cluster/etcd-metadata-store.js';
import { PartitionStateStore } from 'tributary-broker/cluster/partition-state.js';
import { type EtcdServer, startEtcd } from '../../helpers/etcd.js';
import { REQUEST_TIMEOUT_MS, uniquePrefix } from './helpers.js';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { eventually, rejection } from '../../helpers/util.js';
import { topicSpec } from '../../helpers/topic-spec.js';

let etcd: EtcdServer;
const closers: Array<() => Promise<void>> = [];


function options(prefix: string) {
  return { etcd: { endpoints: etcd.endpoints, requestTimeoutMs: REQUEST_TIMEOUT_MS }, prefix };
}

async function openTopics(prefix: string): Promise<EtcdMetadataStore> {
  const s = new EtcdMetadataStore(options(prefix));
  closers.push(() => s.close());
  await s.open();
  return s;
}

/**
 * The error of a change made while etcd is frozen: the retriable metadata_unavailable, and ended by the
 * call's own deadline (requestTimeoutMs), as its reason says: nothing else answers while etcd is
 * stopped, and the client is not left waiting on it.
 */
async function deadlineRejection(p: Promise<unknown>): Promise<TributaryError> {
  const err = await rejection(p);
  expect(err).toMatchObject({ code: 'metadata_unavailable', retriable: true });
  expect(String(err.fields.reason)).toMatch(/deadline exceeded/i);
  return err;
}

beforeAll(async () => {
  etcd = await startEtcd();
});

afterEach(async () => {
  await etcd.kill('SIGCONT');
  await Promise.all(closers.splice(0).map((c) => c()));
});

afterAll(async () => {
  await etcd?.dispose();
});

describe('metadata while etcd is unreachable', () => {
  it('fails changes with metadata_unavailable within the request timeout, serves reads, and recovers', async () => {
    const prefix = uniquePrefix('topics');
    const [a, b] = await Promise.all([openTopics(prefix), openTopics(prefix)]);
    const { topic: kept } = await a.createTopic(topicSpec('kept', { partitions: 2 }));
    await eventually('B to see the topic', () => b.getTopic('kept') !== undefined);

    await etcd.kill('SIGSTOP');
    // Each fails while etcd is still stopped (it is resumed below), ended by its deadline.
    for (const attempt of [() => a.createTopic(topicSpec('new', { partitions: 2 })), () => a.deleteTopic('kept'), () => b.deleteTopic('absent')]) await deadlineRejection(attempt());
    // Reads answer at once from the last known state.
    expect(a.getTopic('kept')).toEqual(kept);
    expect(b.listTopics()).toEqual([kept]);
    expect(a.getTopic('new')).toBeUndefined();

    await etcd.kill('SIGCONT');
    const created = await eventually('a change to succeed again', () => a.createTopic(topicSpec('new', { partitions: 2 })).catch(() => undefined), 10_000, 100);
    // The timed-out create above may have been applied after all; either way the topic exists exactly once.
    expect(created.topic.name).toBe('new');
    await eventually('B to catch up', () => b.getTopic('new')?.topicId === created.topic.topicId);
    // The timed-out delete too: a frozen etcd still had it in its socket buffer and may have applied it on
    // SIGCONT. Retrying is safe: it deletes the version we knew, or finds nothing.
    const deleted = await a.deleteTopic('kept');
    expect(deleted === undefined || deleted.topicId === kept.topicId).toBe(true);
    expect(a.getTopic('kept')).toBeUndefined();
    await eventually('B to see the delete', () => b.getTopic('kept') === undefined);
  });

  it('fails partition-state changes the same way and keeps their last known state', async () => {
    const prefix = uniquePrefix('partitions');
    const store = new PartitionStateStore(options(prefix));
    closers.push(() => store.close());
    await store.open();
    const initial = { replicas: [1, 2], leader: 1, leaderEpoch: 0, isr: [1, 2], hwm: 0 };
    await store.create('p', [initial]);

    await etcd.kill('SIGSTOP');
    await deadlineRejection(store.compareAndSet('p', 0, { leaderEpoch: 0 }, { ...initial, leader: 2, leaderEpoch: 1 }));
    await deadlineRejection(store.create('q', [initial]));
    expect(store.get('p', 0)?.value).toEqual(initial);

    await etcd.kill('SIGCONT');
    // The timed-out change may have applied; retrying with the same expectation is safe either way.
    const done = await eventually(
      'the change to go through',
      async () => {
        const res = await store.compareAndSet('p', 0, { leaderEpoch: 0 }, { ...initial, leader: 2, leaderEpoch: 1 }).catch(() => undefined);
        return res && (res.ok || res.current?.value.leaderEpoch === 1);
      },
      10_000,
      100,
    );
    expect(done).toBe(true);
    expect((await store.read('p', 0))?.value).toMatchObject({ leader: 2, leaderEpoch: 1 });
  });

  it('fails open() with metadata_unavailable when etcd does not answer', async () => {
    await etcd.kill('SIGSTOP');
    const store = new EtcdMetadataStore(options(uniquePrefix('open')));
    closers.push(() => store.close());
    await deadlineRejection(store.open());
  });
});

describe('metadata across an etcd restart', () => {
  it('reconnects its watch and catches up with changes made while it was away', async () => {
    const prefix = uniquePrefix('restart');
    const [a, b] = await Promise.all([openTopics(prefix), openTopics(prefix)]);
    const { topic: before } = await a.createTopic(topicSpec('before', { partitions: 2 }));
    await eventually('B to see the first topic', () => b.getTopic('before') !== undefined);

    await etcd.restart();
    // Writes right after the restart, while B's watch may still be reconnecting.
    const created = await eventually('a change after the restart', () => a.createTopic(topicSpec('after', { partitions: 2 })).catch(() => undefined), 10_000, 100);
    expect(await a.deleteTopic('before')).toEqual(before);
    await eventually('B to catch up', () => b.getTopic('after')?.topicId === created.topic.topicId && b.getTopic('before') === undefined, 15_000);
    expect(b.listTopics().map((t) => t.name)).toEqual(['after']);
  });
});
