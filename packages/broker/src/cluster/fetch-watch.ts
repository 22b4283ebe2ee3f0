/**
 * Leader side of parked replica fetches (docs/architecture.md, "Cluster mode"; docs/protocol.md,
 * `REPLICA_WAIT`). A follower whose `REPLICA_FETCH ... park=true` found nothing new parks that partition
 * instead of long-polling it on a connection of its own; it keeps one `REPLICA_WAIT` long poll per leader.
 * When a parked partition's log end or HWM moves past what its follower was last sent, the partition is
 * marked for that follower and the follower's REPLICA_WAIT answers with every marked one. So a broker
 * following thousands of partitions holds a few connections per leader, not one per partition, and an idle
 * partition costs no request at all.
 */

/** A partition marked for a follower: what REPLICA_WAIT reports. */
export interface MarkedPartition {
  topic: string;
  partition: number;
}

interface FollowerWatch {
  /** Marked since the follower's last REPLICA_WAIT took them, by `topic\0partition`. */
  marked: Map<string, MarkedPartition>;
  /** The waiting REPLICA_WAIT, if one is parked. */
  wake: (() => void) | null;
}

export class FetchWatch {
  private readonly followers = new Map<number, FollowerWatch>();

  private watch(follower: number): FollowerWatch {
    let w = this.followers.get(follower);
    if (!w) {
      w = { marked: new Map(), wake: null };
      this.followers.set(follower, w);
    }
    return w;
  }

  /** The partition has news for `follower` (which parked it): its REPLICA_WAIT answers. */
  mark(follower: number, topic: string, partition: number): void {
    const w = this.watch(follower);
    w.marked.set(`${topic}\u0000${partition}`, { topic, partition });
    const wake = w.wake;
    w.wake = null;
    wake?.();
  }

  /**
   * REPLICA_WAIT: the partitions marked for `follower`, at once if there are any, else once one is
   * marked, `waitMs` passed or `signal` aborted (then the list may be empty). A newer wait of the same
   * follower (it reconnected) ends an older one, which then answers empty.
   */
  async wait(follower: number, waitMs: number, signal?: AbortSignal): Promise<MarkedPartition[]> {
    const w = this.watch(follower);
    if (w.marked.size === 0 && waitMs > 0 && !signal?.aborted) {
      const previous = w.wake;
      w.wake = null;
      previous?.();
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          signal?.removeEventListener('abort', done);
          if (w.wake === done) w.wake = null;
          resolve();
        };
        const timer = setTimeout(done, waitMs);
        signal?.addEventListener('abort', done, { once: true });
        w.wake = done;
      });
    }
    // An older wait ended by a newer one leaves the marks to it.
    if (w.wake !== null) return [];
    const out = [...w.marked.values()];
    w.marked.clear();
    return out;
  }
}

/** The wire form of a REPLICA_WAIT list: `topic:partition,...` (topic names hold no `:` or `,`). */
export function formatMarked(list: MarkedPartition[]): string {
  return list.map((m) => `${m.topic}:${m.partition}`).join(',');
}

/** Parses formatMarked's output; entries that do not parse are skipped. */
export function parseMarked(s: string | undefined): MarkedPartition[] {
  if (!s) return [];
  const out: MarkedPartition[] = [];
  for (const item of s.split(',')) {
    const i = item.lastIndexOf(':');
    if (i <= 0) continue;
    const partition = Number(item.slice(i + 1));
    if (Number.isSafeInteger(partition) && partition >= 0) out.push({ topic: item.slice(0, i), partition });
  }
  return out;
}
