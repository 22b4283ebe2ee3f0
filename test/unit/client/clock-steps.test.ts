/**
 * Wall-clock steps (NTP) while the SDK measures a bound: Date.now() jumps, timers and performance.now()
 * do not. Retry budgets, the bootstrap timeout and the stall watchdog must keep their real length.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Connection } from 'tributary-protocol/connection.js';
import { ScriptedServer } from '../../helpers/scripted-server.js';
import { sleep } from '../../helpers/util.js';

const realDateNow = Date.now.bind(Date);
let step = 0;

/** From now on Date.now() reads the real time plus `ms` (timers and performance.now() unaffected). */
function stepWallClock(ms: number): void {
  step = ms;
}

/** `p`, or a rejection once `ms` passed (a bound that never ends fails the test instead of timing it out). */
function within<T>(ms: number, p: Promise<T>): Promise<T> {
  p.catch(() => {});
  return Promise.race([p, sleep(ms).then(() => Promise.reject(new Error(`no result within ${ms} ms`)))]);
}

describe('wall-clock steps do not change the SDK’s bounds', () => {
  const cleanups: Array<() => Promise<unknown> | unknown> = [];

  function spyOnDateNow(): void {
    step = 0;
    vi.spyOn(Date, 'now').mockImplementation(() => realDateNow() + step);
  }

  afterEach(async () => {
    vi.restoreAllMocks();
    for (const c of cleanups.splice(0).reverse()) await Promise.resolve(c()).catch(() => {});
  });

  async function server(): Promise<ScriptedServer> {
    const s = await ScriptedServer.start();
    cleanups.push(() => s.close());
    return s;
  }

  it('connection: after a -5 min step a request the server never answers still fails with connection_lost after about stallTimeoutMs', async () => {
    spyOnDateNow();
    const s = await server();
    s.on('HANG', () => 'hang');
    const conn = await Connection.connect({ host: '127.0.0.1', port: s.port, stallTimeoutMs: 300 });
    cleanups.push(() => conn.abandon(new Error('test over')));
    stepWallClock(-5 * 60_000);
    await expect(within(5000, conn.command('HANG'))).rejects.toMatchObject({ code: 'connection_lost', fields: expect.objectContaining({ reason: 'stalled' }) });
  });

  it('connection: a -5 min step while a STREAM waits does not keep it open past silenceMs', async () => {
    spyOnDateNow();
    const s = await server();
    s.on('STREAM', () => 'hang');
    const conn = await Connection.connect({ host: '127.0.0.1', port: s.port });
    cleanups.push(() => conn.abandon(new Error('test over')));
    const next = conn.stream({ topic: 't', partition: 0, offset: 0 }, undefined, { silenceMs: 300 }).next();
    await sleep(50);
    stepWallClock(-5 * 60_000);
    await expect(within(5000, next)).rejects.toMatchObject({ code: 'connection_lost', fields: expect.objectContaining({ reason: 'stalled' }) });
  });
});
