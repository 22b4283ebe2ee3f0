import { parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { MemberStanding } from '../coordinator/member-fencing.js';

/**
 * Cluster mode: a partition leader's copy of group members' standings, asked of their coordinators with
 * MEMBER_LEASE, so fenced reads (docs/architecture.md, "Fenced reads") cost no round trip per read. A copy
 * is trusted for at most LEASE_MS, and never past the member's session deadline as its coordinator saw
 * it when it answered (measured from when the question was sent): a member that expires on the
 * coordinator, or on one that took over the group, is no longer served here from that moment on. Any
 * other loss (a static replacement, an offset reset) is seen within LEASE_MS. A leader that cannot ask
 * answers a retriable COORDINATOR_NOT_AVAILABLE and serves nothing.
 */
export const LEASE_MS = 1000;

/** How many cached standings trigger a sweep of the lapsed ones. */
const SWEEP_AT = 10_000;

interface Entry {
  standing: MemberStanding;
  topic: string;
  /** On the injected clock: the copy is not used from then on. */
  until: number;
}

export interface MemberLeaseView {
  standing: MemberStanding;
  /** Milliseconds the copy may still be used (until the next read must ask again). */
  validForMs: number;
}

/** MEMBER_LEASE to the group's coordinator, over the peer connection; resolves with the reply line. */
export type AskCoordinator = (group: string, topic: string, member: string) => Promise<string>;

export class MemberLeases {
  private readonly entries = new Map<string, Entry>();
  private readonly asking = new Map<string, Promise<Entry>>();

  constructor(
    private readonly ask: AskCoordinator,
    /** Monotonic milliseconds (performance.now unless a test passes a fake clock). */
    private readonly now: () => number = () => performance.now(),
  ) {}

  /**
   * The member's standing: the cached copy while it is valid and names the generation the read carries,
   * else a fresh one from the coordinator (one question per member at a time). Without a generation (a
   * running stream, admitted at one) any copy that is still valid will do. The coordinator's refusals
   * (member_not_found, FENCED_INSTANCE_ID, group_not_found, another topic) are thrown as it sent them.
   */
  async standing(group: string, topic: string, member: string, generation?: number): Promise<MemberLeaseView> {
    const key = `${group}\u0000${member}`;
    let e = this.entries.get(key);
    const fresh = (x: Entry | undefined): x is Entry => x !== undefined && x.topic === topic && x.until > this.now();
    // Another generation than the copy's: the member may have rejoined since it was taken.
    if (!fresh(e) || (generation !== undefined && e.standing.generation !== generation)) {
      let p = this.asking.get(key);
      if (!p) {
        p = this.fetch(group, topic, member).finally(() => this.asking.delete(key));
        this.asking.set(key, p);
      }
      e = await p;
    }
    return { standing: e.standing, validForMs: Math.max(0, e.until - this.now()) };
  }

  private async fetch(group: string, topic: string, member: string): Promise<Entry> {
    const sentAt = this.now();
    const reply = await this.ask(group, topic, member);
    const p = parseLine(reply).params;
    const owned = new Set(list(p.get('owned')));
    const reset = new Set(list(p.get('reset')));
    const sessionLeftMs = Number(p.get('session_left_ms'));
    if (!(sessionLeftMs > 0)) {
      // Its session is due on the coordinator: it is about to expire, or to be heard from again.
      throw new TributaryError('COORDINATOR_NOT_AVAILABLE', { group, reason: 'the member’s session is due at the coordinator' });
    }
    const memberId = p.get('member') ?? member;
    const groupGeneration = Number(p.get('group_generation'));
    const entry: Entry = {
      topic,
      until: sentAt + Math.min(LEASE_MS, sessionLeftMs),
      standing: {
        group,
        groupGeneration,
        memberId,
        generation: Number(p.get('generation')),
        owns: (x) => owned.has(x),
        isReset: (x) => reset.has(x),
      },
    };
    if (this.entries.size >= SWEEP_AT) this.sweep();
    this.entries.set(`${group}\u0000${member}`, entry);
    return entry;
  }

  private sweep(): void {
    const now = this.now();
    for (const [k, e] of this.entries) if (e.until <= now) this.entries.delete(k);
  }
}

function list(v: string | undefined): number[] {
  if (!v) return [];
  const inner = v.replace(/^\[|\]$/g, '');
  return inner.length === 0 ? [] : inner.split(',').map(Number);
}
