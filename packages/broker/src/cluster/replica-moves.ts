/**
 * What the replica manager does for reassignments (docs/architecture.md "Reassignment"): a leader's
 * followers follow `replicas` under one epoch, a replica being added fetches within the throttle, and a
 * broker that stops being a replica drops its copy.
 */
import type { Logger } from '../common/logger.js';
import type { PartitionState } from './partition-state.js';
import type { Replica } from './replica-manager.js';

/** A reassignment added or removed followers under the same leader epoch: the leader tracks exactly `replicas`. */
export function syncFollowers(r: Replica, me: number): void {
  const now = performance.now();
  for (const id of r.replicas) if (id !== me && !r.followers.has(id)) r.followers.set(id, { offset: -1, caughtUpMs: now, parked: false, sentEnd: -1, sentHwm: -1 });
  for (const id of [...r.followers.keys()]) if (!r.replicas.includes(id)) r.followers.delete(id);
}

/** Bytes/s broker `me` may fetch for the partition now: its reassignment's throttle while `me` is being added and out of the ISR, else 0. */
export function throttleRate(s: PartitionState | undefined, me: number, isr: number[]): number {
  const re = s?.reassign;
  return re && re.throttle > 0 && re.adding.includes(me) && !isr.includes(me) ? re.throttle : 0;
}

/**
 * Not a replica (removed by a reassignment, or never one): whatever is left of the partition here goes,
 * files and directory, once the fetch loop has stopped; the log is dormant until this broker hosts the
 * partition again (docs/architecture.md, "Hosted partitions"). Safe: only replicas in the partition state can ever lead it, so no
 * acknowledged record depends on this copy. A fetch loop starting again waits for it (`r.dropping`).
 */
export function dropLocalData(r: Replica, me: number, closed: () => boolean, logger: Logger): void {
  const prior = r.dropping ?? Promise.resolve();
  const fetcher = r.fetcher ?? Promise.resolve();
  const run: Promise<void> = Promise.all([prior, fetcher])
    .then(() => r.partition.quiesced())
    // The shortcut below reads the epoch history: after a restart it is still being read from its
    // checkpoint. An unreadable checkpoint is a file to drop too, so no shortcut then.
    .then(() => r.epochsLoaded.then(() => true, () => false))
    .then(async (epochsRead) => {
      const unhosted = () => !closed() && r.role === 'none' && r.promoting === null && !r.replicas.includes(me);
      if (!unhosted()) return;
      if (r.partition.log.dormant && epochsRead && r.epochs.entries().length === 0) return;
      const from = r.partition.logEndOffset;
      // The directory goes with the log, the leader epoch checkpoint included. Checked again inside the
      // partition's exclusive section: this broker may have become a replica while the release waited.
      if (await r.partition.release(unhosted, r.epochs)) logger.info({ topic: r.topic, partition: r.id, from }, 'not a replica: local data dropped');
      else logger.info({ topic: r.topic, partition: r.id }, 'a replica again: local data kept');
    })
    .catch((err: unknown) => logger.warn({ err, topic: r.topic, partition: r.id }, 'dropping the data of a removed replica failed'))
    .finally(() => {
      if (r.dropping === run) r.dropping = null;
    });
  r.dropping = run;
}
