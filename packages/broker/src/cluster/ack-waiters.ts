/**
 * acks=all waiters of a leader's replica (docs/architecture.md, "Cluster mode", acks=all): answered OK only
 * once the HWM passed the record, while the broker still leads at the append's epoch (a leader never
 * truncates, so the record at that offset is the one appended) and while the ISR holds min_insync_replicas.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import { type AckWaiter, type Replica, notEnoughReplicas } from './replica-types.js';

/**
 * Resolves once the HWM of `r` passed `lastOffset`, appended while this broker led at `epoch`. A change of
 * epoch or role fails it at once (failAckWaiters) with a retriable NOT_LEADER, never a wait for the timeout.
 */
export function waitReplicated(r: Replica | undefined, epoch: number, lastOffset: number, timeoutMs: number, minIsr: number, notLeader: () => Error): Promise<void> {
  if (r?.role !== 'leader' || r.leaderEpoch !== epoch) return Promise.reject(notLeader());
  if (r.partition.highWatermark > lastOffset) {
    const few = notEnoughReplicas(r, minIsr);
    return few ? Promise.reject(few) : Promise.resolve();
  }
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      r.ackWaiters.delete(w);
      reject(new TributaryError('request_timeout', { reason: 'the in-sync replicas did not confirm the record in time', topic: r.topic, partition: r.id }));
    }, timeoutMs);
    const w: AckWaiter = {
      epoch,
      offset: lastOffset,
      resolve: () => {
        clearTimeout(timer);
        resolve();
      },
      reject: (err) => {
        clearTimeout(timer);
        reject(err);
      },
    };
    r.ackWaiters.add(w);
  });
}

/** The HWM moved: answers the waiters it passed, with NOT_ENOUGH_REPLICAS if the ISR shrank below the minimum. */
export function releaseAckWaiters(r: Replica, minIsr: number): void {
  if (r.ackWaiters.size === 0) return;
  const hwm = r.partition.highWatermark;
  for (const w of r.ackWaiters) {
    if (w.epoch !== r.leaderEpoch || r.role !== 'leader') continue;
    if (hwm > w.offset) {
      r.ackWaiters.delete(w);
      const few = notEnoughReplicas(r, minIsr);
      if (few) w.reject(few);
      else w.resolve();
    }
  }
}

export function failAckWaiters(r: Replica, error: () => Error): void {
  if (r.ackWaiters.size === 0) return;
  const waiters = [...r.ackWaiters];
  r.ackWaiters.clear();
  for (const w of waiters) w.reject(error());
}
