/**
 * Wall-clock steps (NTP) while the SDK measures a bound: Date.now() jumps, timers and performance.now()
 * do not. Retry budgets, the bootstrap timeout and the stall watchdog must keep their real length.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Cluster } from 'tributary-client/cluster.js';
import { Producer } from 'tributary-client/producer.js';
import { retry } from 'tributary-client/retry.js';
import { decodeBatch } from 'tributary-protocol/batch.js';
import { Connection } from 'tributary-protocol/connection.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { ScriptedServer } from '../../helpers/scripted-server.js';
import { sleep } from '../../helpers/util.js';

const HOUR = 3_600_000;
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

const notReady = () => new TributaryError('not_ready');
const NOT_READY = 'ERROR: not_ready class=availability retryable=true';

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

  it('retry(): a forward step after a failed attempt does not spend the budget; a backward one does not stretch it', async () => {
    spyOnDateNow();
    let calls = 0;
    const ok = await retry(
      async () => {
        if (calls++ > 0) return 'ok';
        stepWallClock(2 * HOUR);
        throw notReady();
      },
      { initialDelayMs: 1, maxDelayMs: 5, maxElapsedMs: 10_000 },
    );
    expect(ok).toBe('ok');

    stepWallClock(0);
    const stop = new AbortController();
    cleanups.push(() => stop.abort());
    let first = true;
    const failing = retry(
      async () => {
        if (first) stepWallClock(-2 * HOUR);
        first = false;
        throw notReady();
      },
      { initialDelayMs: 1, maxDelayMs: 5, maxElapsedMs: 300, retries: 1e9, signal: stop.signal },
    );
    await expect(within(5000, failing)).rejects.toMatchObject({ code: 'not_ready' });
  });

  it('producer: a batch whose first attempt failed retriably is still retried and acknowledged after a +2 h step', async () => {
    spyOnDateNow();
    const s = await server();
    s.on('METADATA', (line) => `OK topic=${line.params.get('topic')} partitions=1 leaders=${s.address} epochs=0`);
    let attempts = 0;
    s.onBatch = (body) => {
      const b = decodeBatch(body);
      if (attempts++ === 0) {
        // The step lands between the failed attempt and the sender's look at the batch's budget.
        stepWallClock(2 * HOUR);
        return NOT_READY;
      }
      return JSON.stringify({ status: 'OK', partition: b.partition, base_offset: 0, last_offset: b.records.length - 1, count: b.records.length });
    };
    const p = new Producer({ brokers: [s.address], lingerMs: 0, retry: { initialDelayMs: 1, maxDelayMs: 5, maxElapsedMs: 10_000 } });
    cleanups.push(() => p.close({ signal: AbortSignal.timeout(2000) }));
    p.on('error', () => {});
    const meta = await within(5000, p.send({ topic: 't', messages: [{ value: 'x' }] }));
    expect(meta).toEqual([expect.objectContaining({ partition: 0, offset: 0 })]);
    expect(attempts).toBe(2);
  });

  it('producer: after a -2 h step a batch failing retriably still fails within about retry.maxElapsedMs', async () => {
    spyOnDateNow();
    const s = await server();
    s.on('METADATA', (line) => `OK topic=${line.params.get('topic')} partitions=1 leaders=${s.address} epochs=0`);
    let attempts = 0;
    s.onBatch = () => {
      if (attempts++ === 0) stepWallClock(-2 * HOUR);
      return NOT_READY;
    };
    const p = new Producer({ brokers: [s.address], lingerMs: 0, retry: { initialDelayMs: 1, maxDelayMs: 5, maxElapsedMs: 300, retries: 1e9 } });
    cleanups.push(() => p.close({ signal: AbortSignal.timeout(2000) }));
    p.on('error', () => {});
    await expect(within(5000, p.send({ topic: 't', messages: [{ value: 'x' }] }))).rejects.toMatchObject({
      code: expect.stringMatching(/^(not_ready|request_timeout)$/),
    });
  });

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

  it('cluster: a +2 h step during bootstrap does not end it at once: connects are retried until bootstrapTimeoutMs', async () => {
    spyOnDateNow();
    const s = await server();
    s.on('NEGOTIATE', () => {
      if (s.count('NEGOTIATE') === 1) stepWallClock(2 * HOUR);
      return 'close';
    });
    const c = new Cluster({ brokers: [s.address], bootstrapTimeoutMs: 1000, retry: { initialDelayMs: 10, maxDelayMs: 50, retries: 1e9 } });
    cleanups.push(() => c.close());
    const err = await within(10_000, c.anyCommand('PING')).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'brokers_unreachable' });
    expect(s.count('NEGOTIATE')).toBeGreaterThan(1);
    expect((err as TributaryError).fields.elapsedMs).toBeLessThan(HOUR);
  });

  /** b (the first bootstrap broker, named leader) leaves a lookup unanswered and is marked unresponsive; a answers. */
  async function markedLeader(): Promise<{ c: Cluster; b: ScriptedServer; thaw: () => void }> {
    const a = await server();
    const b = await server();
    let frozen = true;
    const reply = () => `OK topic=t partitions=1 leaders=${b.address} epochs=1`;
    a.on('METADATA', reply);
    b.on('METADATA', () => (frozen ? 'hang' : reply()));
    b.on('PROTOCOL_INFO', () => (frozen ? 'hang' : undefined));
    const c = new Cluster({ brokers: [b.address, a.address], stallTimeoutMs: 100, connectTimeoutMs: 1000, retry: { initialDelayMs: 1, maxDelayMs: 5 } });
    cleanups.push(() => c.close());
    expect((await within(2000, c.fetchMetadata('t'))).leaders).toEqual([b.address]);
    return { c, b, thaw: () => (frozen = false) };
  }

  it('cluster: a +2 h step does not lift an unresponsive mark at once: the leader named is asked about again first', async () => {
    spyOnDateNow();
    const { c } = await markedLeader();
    stepWallClock(2 * HOUR);
    await expect(within(2000, c.leaderFor('t', 0))).rejects.toMatchObject({ code: 'NOT_LEADER' });
  });

  it('cluster: after a -5 min step an unresponsive mark still lapses after two stall bounds', async () => {
    spyOnDateNow();
    const { c, b, thaw } = await markedLeader();
    stepWallClock(-5 * 60_000);
    thaw();
    await sleep(250);
    expect(await within(1000, c.leaderFor('t', 0))).toBe(b.address);
  });
});
