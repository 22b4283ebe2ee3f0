/**
 * A rejoin that fails with an error waiting does not fix (docs/sdk.md, "Lifecycle"): only start()'s own
 * rebalance rejects start(); any later one crashes the consumer (`crash` fatal=true), which closes and
 * makes run() reject. That includes the fresh rejoin of a member the coordinator had lost, which holds
 * no partition and no member id, as a consumer that never joined does: taken for the first rebalance,
 * its failure was thrown where nobody waits, and run() stayed pending while the member kept its session
 * and its partitions unread. Scripted broker: the fresh join assigns a new partition without a committed
 * offset and autoOffsetReset is 'error'.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Consumer } from 'tributary-client/consumer.js';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { batchFrom, TOPIC } from '../../helpers/scripted-group.js';
import { ScriptedServer } from '../../helpers/scripted-server.js';
import { sleep, until } from '../../helpers/util.js';

describe('Consumer: a failed rejoin after a member loss (scripted broker)', () => {
  const cleanup: Array<() => Promise<unknown> | unknown> = [];
  const unhandled: unknown[] = [];
  const onUnhandled = (r: unknown) => unhandled.push(r);

  beforeEach(() => {
    unhandled.length = 0;
    process.on('unhandledRejection', onUnhandled);
  });

  afterEach(async () => {
    for (const f of cleanup.splice(0).reverse()) await f();
    process.off('unhandledRejection', onUnhandled);
  });

  it('crashes the consumer: run() rejects with the error, nothing is left unhandled', async () => {
    const s = await ScriptedServer.start();
    cleanup.push(() => s.close());
    const g = { member: '', generation: 0, assignments: [0], heartbeatErrors: [] as string[] };
    const reply = () => `OK generation=${g.generation} member=${g.member} leader=${g.member} assignments=[${g.assignments.join(',')}]`;
    s.on('FIND_COORDINATOR', () => `OK coordinator_id=0 host=127.0.0.1 port=${s.port} partition=0`);
    s.on('METADATA', () => `OK topic=${TOPIC} partitions=2 leaders=${s.address},${s.address} epochs=0,0`);
    s.on('JOIN_GROUP', (l) => {
      if (!l.params.has('generation')) g.member = `${l.params.get('member')}-${g.generation + 1}`;
      g.generation++;
      return reply();
    });
    s.on('SYNC_GROUP', reply);
    s.on('HEARTBEAT', async (l) => {
      const err = g.heartbeatErrors.shift();
      if (err) return err;
      await sleep(Math.min(Number(l.params.get('wait_ms') ?? 0), 30));
      return `OK member=${g.member} generation=${g.generation}`;
    });
    // Partition 0 has a committed offset; partition 1 (assigned by the fresh join) has none.
    s.on('FETCH_OFFSET', (l) => (l.params.get('partition') === '0' ? 'OK offset=0 committed=true' : 'OK offset=0 committed=false'));
    s.on('CONSUME', async (l) => {
      await sleep(Math.min(Number(l.params.get('wait_ms') ?? 0), 30));
      return batchFrom(Number(l.params.get('offset')), 0, Number(l.params.get('partition')));
    });
    s.on('BATCH_COMMIT', (l) => `OK batched=${l.positional[0]!.split(',').length}`);
    s.on('LEAVE_GROUP', (l) => `OK group=g member=${l.params.get('member')} left=true`);

    const c = new Consumer({
      brokers: [s.address],
      groupId: 'g',
      topic: TOPIC,
      clientId: 'cli',
      autoOffsetReset: 'error',
      sessionTimeoutMs: 1000,
      heartbeatIntervalMs: 50,
      maxWaitMs: 30,
      retry: { initialDelayMs: 1, maxDelayMs: 10 },
    });
    cleanup.push(() => c.close());
    const crashes: Array<{ code: string; fatal: boolean }> = [];
    c.on('crash', (e) => crashes.push({ code: (e.error as TributaryError).code, fatal: e.fatal }));
    const lost: number[][] = [];
    c.on('partitions.lost', (e) => lost.push(e.partitions));
    let outcome: string | undefined;
    const run = c.run({ eachMessage: () => {} });
    run.then(
      () => (outcome = 'resolved'),
      (e: TributaryError) => (outcome = `rejected ${e.code}`),
    );
    await until(() => c.state === 'running' && s.count('HEARTBEAT') > 0, 5000, 'the first join');
    expect(c.assignment()).toEqual([0]);

    // The member expired (a pause past its session): it joins fresh and is given partition 1 too.
    g.assignments = [0, 1];
    g.heartbeatErrors.push(`ERROR: member_not_found class=fencing retryable=false member=${g.member}`);
    await until(() => outcome !== undefined, 5000, 'run() to settle');
    expect(lost).toEqual([[0]]);
    expect(outcome).toBe('rejected OFFSET_OUT_OF_RANGE');
    expect(crashes).toEqual([{ code: 'OFFSET_OUT_OF_RANGE', fatal: true }]);
    expect(c.state).toBe('closed');
    await sleep(20);
    expect(unhandled).toEqual([]);
  });
});
