/**
 * A JOIN_GROUP or SYNC_GROUP that waits (a new member for its join window, a client-side follower for its
 * leader's plan) is held to the rights in force when its wait ends (docs/security.md, "Group ACLs"): the
 * broker passes `afterWait`, which throws once a SIGHUP has withdrawn the principal from the group. A
 * refused JOIN leaves no member behind; a refused SYNC takes no assignment.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { GroupCoordinator, JoinRequest } from 'tributary-broker/coordinator/group-coordinator.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { type Coordinators, GROUP_CONFIG, openCoordinators } from '../../helpers/coordinators.js';
import { FakeClock } from '../../helpers/fake-clock.js';
import { expectError, removeDir, tempDir, until } from '../../helpers/util.js';

const TOPIC = 't';

let dir: string;
let clock: FakeClock;
let c: Coordinators;
let gc: GroupCoordinator;
/** What afterWait throws once the test withdraws the rights (undefined: still granted). */
let withdrawn: TributaryError | undefined;
const afterWait = (): void => {
  if (withdrawn) throw withdrawn;
};

beforeEach(async () => {
  dir = await tempDir('trib-withdrawn-');
  clock = new FakeClock();
  c = await openCoordinators(dir, clock, { topics: { [TOPIC]: 4 } });
  gc = c.groups;
  withdrawn = undefined;
});

afterEach(async () => {
  await c.close();
  await removeDir(dir);
});

const refusal = () => new TributaryError('NOT_AUTHORIZED_FOR_GROUP', { group: 'g', principal: 'bob' });
const memberIds = (): string[] => (gc.status('g') as unknown as { members: Array<{ member_id: string }> }).members.map((m) => m.member_id);
const joinReq = (member: string, extra: Partial<JoinRequest> = {}): JoinRequest => ({ topic: TOPIC, group: 'g', member, host: '127.0.0.1', afterWait, ...extra });

describe('rights checked again when a group wait ends', () => {
  it('a JOIN waiting for its join window when the rights are withdrawn is refused, and its member removed', async () => {
    const first = gc.join(joinReq('a'));
    await until(() => gc.scheduler.has('window:g'), 5000, 'the join window');
    await clock.advance(GROUP_CONFIG.joinWindowMs);
    const a = await first;
    await gc.sync({ topic: TOPIC, group: 'g', member: a.memberId, generation: a.generation });

    const second = gc.join(joinReq('b'));
    await until(() => memberIds().length === 2, 5000, 'the second join to be registered');
    withdrawn = refusal();
    await clock.advance(GROUP_CONFIG.joinWindowMs);
    await expectError(second, 'NOT_AUTHORIZED_FOR_GROUP');
    // No member is left holding a share of the partitions until its session ends.
    await until(() => memberIds().length === 1, 5000, 'the refused member to be removed');
    expect(memberIds()).toEqual([a.memberId]);
  });

  it("a client-side follower's SYNC waiting for the plan when the rights are withdrawn is refused", async () => {
    const joins = [gc.join(joinReq('l', { protocol: 'client' })), gc.join(joinReq('f', { protocol: 'client' }))];
    await until(() => gc.scheduler.has('window:g'), 5000, 'the join window');
    await clock.advance(GROUP_CONFIG.joinWindowMs);
    const views = await Promise.all(joins);
    const leader = views.find((v) => v.memberId === v.leader)!;
    const follower = views.find((v) => v.memberId !== v.leader)!;

    // Checked from the start: it may be refused before the leader's SYNC below returns.
    const refused = expectError(gc.sync({ topic: TOPIC, group: 'g', member: follower.memberId, generation: follower.generation, afterWait }), 'NOT_AUTHORIZED_FOR_GROUP');
    // The follower's SYNC now waits for the leader's plan; the rights go meanwhile.
    await new Promise((r) => setImmediate(r));
    withdrawn = refusal();
    const plan = `${leader.memberId}:0,1;${follower.memberId}:2,3`;
    await gc.sync({ topic: TOPIC, group: 'g', member: leader.memberId, generation: leader.generation, plan });
    await refused;
  });
});
