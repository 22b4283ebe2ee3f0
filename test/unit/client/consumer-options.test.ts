/**
 * Consumer options are validated at construction: a consumer that cannot work throws a TributaryError
 * with code invalid_config (naming the option) from its constructor, before any connection is opened.
 */
import { describe, expect, it } from 'vitest';
import { Consumer, type ConsumerOptions } from 'tributary-client/consumer.js';
import { TributaryError } from 'tributary-protocol/errors.js';

// Nothing listens here: construction must not connect, so valid options still construct fine.
const BASE: ConsumerOptions = { brokers: ['127.0.0.1:1'], groupId: 'g', topic: 't' };

function configFailure(opts: unknown): TributaryError {
  try {
    new Consumer(opts as ConsumerOptions);
  } catch (err) {
    expect(err).toBeInstanceOf(TributaryError);
    const e = err as TributaryError;
    expect(e.code).toBe('invalid_config');
    expect(e.errorClass).toBe('validation');
    expect(e.retriable).toBe(false);
    return e;
  }
  throw new Error(`constructor accepted ${JSON.stringify(opts)}`);
}

describe('Consumer options', () => {
  it.each<[string, Partial<Record<keyof ConsumerOptions, unknown>>]>([
    ['sessionTimeoutMs', { sessionTimeoutMs: -1 }],
    ['sessionTimeoutMs', { sessionTimeoutMs: 0 }],
    ['sessionTimeoutMs', { sessionTimeoutMs: 1500.5 }],
    ['sessionTimeoutMs', { sessionTimeoutMs: Number.NaN }],
    ['sessionTimeoutMs', { sessionTimeoutMs: '10000' }],
    ['heartbeatIntervalMs', { heartbeatIntervalMs: -100 }],
    ['rebalanceTimeoutMs', { rebalanceTimeoutMs: -1 }],
    ['processingTimeoutMs', { processingTimeoutMs: -5 }],
    ['processingTimeoutMs', { processingTimeoutMs: 0 }],
    ['autoCommitIntervalMs', { autoCommitIntervalMs: -1 }],
    ['maxWaitMs', { maxWaitMs: -1 }],
    ['maxWaitMs', { maxWaitMs: Number.POSITIVE_INFINITY }],
    ['maxBatchRecords', { maxBatchRecords: 0 }],
    ['maxBatchBytes', { maxBatchBytes: -1 }],
    ['partitionsConsumedConcurrently', { partitionsConsumedConcurrently: 0 }],
    ['stallTimeoutMs', { stallTimeoutMs: 0 }],
    ['stallTimeoutMs', { stallTimeoutMs: 9 }],
    ['stallTimeoutMs', { stallTimeoutMs: 2500.5 }],
    ['stallTimeoutMs', { stallTimeoutMs: '3000' }],
  ])('%s: %j is refused', (option, extra) => {
    expect(configFailure({ ...BASE, ...extra }).fields.option).toBe(option);
  });

  it('heartbeatIntervalMs must be below sessionTimeoutMs', () => {
    expect(configFailure({ ...BASE, sessionTimeoutMs: 3000, heartbeatIntervalMs: 3000 }).fields.option).toBe('heartbeatIntervalMs');
    expect(configFailure({ ...BASE, sessionTimeoutMs: 3000, heartbeatIntervalMs: 5000 }).fields.option).toBe('heartbeatIntervalMs');
    // against the default session timeout (10 s) too
    expect(configFailure({ ...BASE, heartbeatIntervalMs: 10_000 }).fields.option).toBe('heartbeatIntervalMs');
    expect(() => new Consumer({ ...BASE, sessionTimeoutMs: 3000, heartbeatIntervalMs: 2999 })).not.toThrow();
  });

  it('the default heartbeat interval follows a short session timeout', () => {
    const c = new Consumer({ ...BASE, sessionTimeoutMs: 1500 });
    expect(c.options.heartbeatIntervalMs).toBe(500);
    expect(new Consumer(BASE).options.heartbeatIntervalMs).toBe(3000);
    expect(new Consumer({ ...BASE, sessionTimeoutMs: 1500, heartbeatIntervalMs: 200 }).options.heartbeatIntervalMs).toBe(200);
  });

  it('an option given as undefined takes its default, as one left out does', () => {
    const c = new Consumer({ ...BASE, maxWaitMs: undefined, sessionTimeoutMs: undefined, heartbeatIntervalMs: undefined, mode: undefined, autoCommit: undefined });
    const d = new Consumer(BASE);
    for (const k of ['maxWaitMs', 'sessionTimeoutMs', 'heartbeatIntervalMs', 'mode', 'autoCommit'] as const) expect(c.options[k], k).toBe(d.options[k]);
    expect(c.options.maxWaitMs).toBe(1000);
  });

  it('an unknown assignor is refused; every known one is accepted', () => {
    expect(configFailure({ ...BASE, assignor: 'fair-share' }).fields.option).toBe('assignor');
    expect(configFailure({ ...BASE, assignor: 'Range' }).fields.option).toBe('assignor');
    for (const assignor of ['range', 'roundrobin', 'sticky', 'cooperative-sticky'] as const) expect(() => new Consumer({ ...BASE, assignor })).not.toThrow();
  });

  it.each<[string, unknown]>([
    ['empty', ''],
    ['with a space', 'my group'],
    ['with a slash', 'a/b'],
    ['not a string', 42],
    ['missing', undefined],
  ])('a group id %s is refused', (_what, groupId) => {
    expect(configFailure({ ...BASE, groupId }).fields.option).toBe('groupId');
  });

  it('bad client and instance ids and an empty topic are refused', () => {
    expect(configFailure({ ...BASE, clientId: 'has space' }).fields.option).toBe('clientId');
    expect(configFailure({ ...BASE, clientId: '' }).fields.option).toBe('clientId');
    expect(configFailure({ ...BASE, instanceId: 'x"y' }).fields.option).toBe('instanceId');
    expect(configFailure({ ...BASE, topic: '' }).fields.option).toBe('topic');
    expect(configFailure({ ...BASE, topic: undefined }).fields.option).toBe('topic');
  });

  it.each<[keyof ConsumerOptions, unknown]>([
    ['isolation', 'read_dirty'],
    ['isolation', 'READ_COMMITTED'],
    ['mode', 'push'],
    ['autoOffsetReset', 'smallest'],
    ['autoOffsetReset', 'none'],
    ['autoCommit', 'false'],
    ['autoCommit', 0],
  ])('%s: %j is refused', (option, value) => {
    expect(configFailure({ ...BASE, [option]: value }).fields.option).toBe(option);
  });

  it.each<[string, unknown]>([
    ['an empty list', []],
    ['no list', undefined],
    ['a string instead of a list', '127.0.0.1:9000'],
  ])('brokers: %s is refused', (_what, brokers) => {
    expect(configFailure({ ...BASE, brokers }).fields.option).toBe('brokers');
  });

  it.each([['localhost'], ['localhost:'], [':9000'], ['host:0'], ['host:65536'], ['host:abc'], ['host:90.5'], ['']])('broker address %j is refused', (addr) => {
    const e = configFailure({ ...BASE, brokers: ['127.0.0.1:9000', addr] });
    expect(e.fields.option).toBe('brokers');
    expect(e.fields.value).toBe(addr);
  });

  it('IPv6 and host names with ports are accepted', () => {
    expect(() => new Consumer({ ...BASE, brokers: ['[::1]:9000', 'broker-1.example:19000', '10.0.0.1:1'] })).not.toThrow();
  });

  it('maxBatchRecords above the protocol maximum of 10000 is refused at construction', () => {
    expect(configFailure({ ...BASE, maxBatchRecords: 10_001 }).fields.option).toBe('maxBatchRecords');
    expect(() => new Consumer({ ...BASE, maxBatchRecords: 10_000 })).not.toThrow();
  });

  it('valid options construct a consumer in state new, without connecting', async () => {
    const c = new Consumer({ ...BASE, maxWaitMs: 0, sessionTimeoutMs: 6000, heartbeatIntervalMs: 1000, isolation: 'read_uncommitted', mode: 'stream', autoOffsetReset: 'error', autoCommit: false });
    expect(c.state).toBe('new');
    expect(c.options.stallTimeoutMs).toBe(3000);
    expect(new Consumer({ ...BASE, stallTimeoutMs: 500 }).options.stallTimeoutMs).toBe(500);
    expect(c.memberId).toBeUndefined();
    expect(c.assignment()).toEqual([]);
    // closing a consumer that never started is immediate and final
    await c.close();
    expect(c.state).toBe('closed');
    await expect(c.start()).rejects.toMatchObject({ code: 'client_closed' });
  });

  it('run() needs exactly one of eachMessage and eachBatch', async () => {
    const c = new Consumer(BASE);
    await expect(c.run({})).rejects.toMatchObject({ code: 'invalid_config' });
    await expect(c.run({ eachMessage: () => {}, eachBatch: () => {} })).rejects.toMatchObject({ code: 'invalid_config' });
    // Checked before anything starts: a corrected run() is not refused as a second consumer of it.
    await expect(c.run({ eachMessage: 42 as never })).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'eachMessage' } });
    await expect(c.run({ eachBatch: 'x' as never })).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'eachBatch' } });
    await expect(c.run({ eachMessage: () => {}, signal: {} as never })).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'signal' } });
    await expect(c.run({ eachMessage: () => {}, concurrency: { perPartition: 2, ordering: null as never } })).rejects.toMatchObject({
      code: 'invalid_config',
      fields: { option: 'concurrency.ordering' },
    });
    const ac = new AbortController();
    ac.abort();
    await expect(c.run({ eachMessage: () => {}, signal: ac.signal })).resolves.toBeUndefined();
    await c.close();
  });

  it('seek() refuses a negative or fractional offset', () => {
    const c = new Consumer(BASE);
    expect(() => c.seek(0, -1)).toThrow(expect.objectContaining({ code: 'invalid_config' }));
    expect(() => c.seek(0, 1.5)).toThrow(expect.objectContaining({ code: 'invalid_config' }));
    // a partition that is not assigned
    expect(() => c.seek(0, 1)).toThrow(expect.objectContaining({ code: 'NOT_OWNER' }));
  });
});
