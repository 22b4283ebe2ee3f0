/**
 * The group coordinator against steps of the wall clock (NTP): session expiry, timeouts and the scheduler
 * run on the monotonic time, so a step forward expires nobody and a step back delays no expiry; the
 * times it shows (last heartbeat, generation history) stay wall times. Fake clock, no server.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { JoinRequest, MemberView } from 'tributary-broker/coordinator/group-coordinator.js';
import type { ClassicJoinAnswer } from 'tributary-broker/coordinator/classic-groups.js';
import type { JoinResult } from 'tributary-broker/coordinator/classic-group.js';
import { type Coordinators, classicJoinRequest, GROUP_CONFIG, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { removeDir, tempDir, until } from '../../helpers/util.js';

const TOPIC = 't';
const WINDOW = GROUP_CONFIG.joinWindowMs;
const SESSION = 1000;
const BEAT = 250;
const TWO_HOURS = 2 * 60 * 60 * 1000;
const FIVE_MINUTES = 5 * 60 * 1000;

interface Status {
  state: string;
  generation: number;
  members: Array<{ member_id: string; last_heartbeat: string; last_heartbeat_ms_ago: number }>;
  history: Array<{ generation: number; at: number; reasons: Array<{ cause: string; member: string; missedByMs?: number }> }>;
}

let dir: string;
let clock: FakeClock;
let c: Coordinators;

beforeEach(async () => {
  dir = await tempDir('trib-clock-steps-');
  clock = new FakeClock();
  c = await openCoordinators(dir, clock, { topics: { [TOPIC]: 2 } });
});

afterEach(async () => {
  await c.close();
  await removeDir(dir);
});

/**
 * Members heartbeating every BEAT for `ms`; the wall clock steps by `jump` once, right before the
 * coordinator's next timer falls due (after the last heartbeats, so the timer is what sees the step).
 */
async function beatWithStep(ms: number, jump: number, beat: () => Promise<unknown>): Promise<void> {
  let stepped = false;
  for (let t = 0; t < ms; t += BEAT) {
    if (!stepped && clock.nextAt()! <= clock.monotonic() + BEAT) {
      clock.jumpWall(jump);
      stepped = true;
    }
    await clock.advance(BEAT);
    await beat();
  }
  expect(stepped).toBe(true);
}

describe('Tributary groups when the wall clock steps', () => {
  const gc = () => c.groups;
  const status = () => gc().status('g') as unknown as Status;
  const req = (member: string): JoinRequest => ({ topic: TOPIC, group: 'g', member, host: '127.0.0.1', sessionTimeoutMs: SESSION });
  const heartbeat = (v: MemberView) => gc().heartbeat({ topic: TOPIC, group: 'g', member: v.memberId, generation: v.generation });

  async function twoSynced(): Promise<[MemberView, MemberView]> {
    const joins = [gc().join(req('a')), gc().join(req('b'))];
    await until(() => gc().scheduler.has('window:g'), 5000, 'the join window');
    await clock.advance(WINDOW);
    const [a, b] = await Promise.all(joins);
    const sync = (v: MemberView) => gc().sync({ topic: TOPIC, group: 'g', member: v.memberId, generation: v.generation });
    return [await sync(a!), await sync(b!)];
  }

  it('a step forward of 2 h expires none of the members that keep heartbeating', async () => {
    const [a, b] = await twoSynced();
    await beatWithStep(5 * SESSION, TWO_HOURS, () => Promise.all([heartbeat(a), heartbeat(b)]));
    const s = status();
    expect(s).toMatchObject({ state: 'Stable', generation: 1 });
    expect(s.members.map((m) => m.member_id).sort()).toEqual([a.memberId, b.memberId].sort());
    for (const m of s.members) {
      expect(m.last_heartbeat_ms_ago).toBe(0);
      expect(Date.parse(m.last_heartbeat)).toBe(clock.now());
    }
  });

  it('a step back of 5 min does not delay the expiry of a member that stopped heartbeating', async () => {
    const [live, quiet] = await twoSynced();
    await heartbeat(quiet);
    const lastBeat = clock.monotonic();
    clock.jumpWall(-FIVE_MINUTES);
    await clock.advance(SESSION - BEAT);
    await heartbeat(live);
    await clock.advanceTo(lastBeat + SESSION - 1);
    expect(status().members.map((m) => m.member_id)).toContain(quiet.memberId);
    await clock.advance(1);
    await until(() => !status().members.some((m) => m.member_id === quiet.memberId), 5000, 'quiet to expire on time');
    await clock.advance(WINDOW);
    await until(() => status().generation === 2, 5000, 'generation 2');
    const change = status().history.at(-1)!;
    expect(change.reasons).toEqual([{ cause: 'expired', member: quiet.memberId, missedByMs: 0 }]);
    // The history keeps wall times: the expiry happened one window ago on the (stepped) wall clock.
    expect(change.at).toBe(clock.now() - WINDOW);
  });

  it('after a step back, a last heartbeat shows its monotonic age (never negative) and a wall time', async () => {
    const [, quiet] = await twoSynced();
    await heartbeat(quiet);
    clock.jumpWall(-FIVE_MINUTES);
    await clock.advance(400);
    const shown = status().members.find((m) => m.member_id === quiet.memberId)!;
    expect(shown.last_heartbeat_ms_ago).toBe(400);
    expect(Date.parse(shown.last_heartbeat)).toBe(clock.now() - 400);
  });
});

describe('Kafka classic groups when the wall clock steps', () => {
  const classic = () => c.groups.classic;
  const req = (memberId: string) => classicJoinRequest(memberId, { sessionTimeoutMs: SESSION });
  const joined = (a: ClassicJoinAnswer): JoinResult => {
    if ('memberIdRequired' in a) throw new Error('unexpected MEMBER_ID_REQUIRED');
    return a;
  };
  const hb = (m: JoinResult) => classic().heartbeat({ group: 'g', memberId: m.memberId, instanceId: null, generation: m.generation });
  const memberIds = () => classic().describe('g').members.map((m) => m.memberId);

  async function twoSynced(): Promise<[JoinResult, JoinResult]> {
    const first = classic().join(req(''));
    const second = classic().join(req(''));
    await clock.advance(WINDOW);
    const [a, b] = [joined(await first), joined(await second)];
    const sync = (m: JoinResult) => classic().sync({ group: 'g', memberId: m.memberId, instanceId: null, generation: 1, assignments: [], protocolType: null, protocolName: null });
    const [leader, follower] = a.leader === a.memberId ? [a, b] : [b, a];
    const followerSync = sync(follower);
    await sync(leader);
    await followerSync;
    return [leader, follower];
  }

  it('a step forward of 2 h expires none of the members that keep heartbeating', async () => {
    const [a, b] = await twoSynced();
    await beatWithStep(5 * SESSION, TWO_HOURS, () => Promise.all([hb(a), hb(b)]));
    const d = classic().describe('g');
    expect(d).toMatchObject({ state: 'Stable', generation: 1 });
    expect(d.members.map((m) => m.memberId).sort()).toEqual([a.memberId, b.memberId].sort());
    for (const m of d.members) expect(m.lastHeartbeat).toBe(clock.now());
  });

  it('a step back of 5 min does not delay the expiry of a member that stopped heartbeating', async () => {
    const [live, quiet] = await twoSynced();
    await hb(quiet);
    const lastBeat = clock.monotonic();
    clock.jumpWall(-FIVE_MINUTES);
    await clock.advance(SESSION - BEAT);
    await hb(live);
    await clock.advanceTo(lastBeat + SESSION - 1);
    expect(memberIds()).toContain(quiet.memberId);
    await clock.advance(1);
    await until(() => !memberIds().includes(quiet.memberId), 5000, 'quiet to expire on time');
  });
});
