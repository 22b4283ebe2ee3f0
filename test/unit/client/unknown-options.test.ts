/**
 * Every SDK constructor, and the admin calls and messages that take option objects, refuse names they
 * do not know (a typo would otherwise be ignored and the default silently used), naming the nearest
 * valid one. Nothing connects: the brokers listed are never contacted.
 */
import { describe, expect, it } from 'vitest';
import { Admin } from 'tributary-client/admin.js';
import { Consumer } from 'tributary-client/consumer.js';
import { Producer } from 'tributary-client/producer.js';
import { toBatchRecord } from 'tributary-client/producer-messages.js';
import { rejection, thrown } from '../../helpers/util.js';

const brokers = ['127.0.0.1:1'];


describe('unknown options', () => {
  it('Consumer: autoOffsetRest is refused with the name it was meant to be', () => {
    const e = thrown(() => new Consumer({ brokers, groupId: 'g', topic: 't', autoOffsetRest: 'earliest' } as never));
    expect(e.code).toBe('invalid_config');
    expect(e.fields).toMatchObject({ option: 'autoOffsetRest', reason: 'unknown option', did_you_mean: 'autoOffsetReset' });
    expect(e.message).toBe('invalid consumer option autoOffsetRest: unknown option (did you mean autoOffsetReset?)');
  });

  it('Producer: a misspelt option, and one nothing is close to', () => {
    expect(thrown(() => new Producer({ brokers, idempotant: true } as never)).fields).toMatchObject({ option: 'idempotant', did_you_mean: 'idempotent' });
    const far = thrown(() => new Producer({ brokers, compressionCodec: 'gzip' } as never));
    expect(far.fields).toEqual({ option: 'compressionCodec', reason: 'unknown option' });
    expect(far.message).toBe('invalid producer option compressionCodec: unknown option');
  });

  it('nested retry and auth objects are checked too', () => {
    expect(thrown(() => new Producer({ brokers, retry: { retires: 3 } } as never)).fields).toMatchObject({ option: 'retry.retires', did_you_mean: 'retry.retries' });
    expect(thrown(() => new Consumer({ brokers, groupId: 'g', topic: 't', auth: { principal: 'a', tokn: 'b' } } as never)).fields).toMatchObject({ option: 'auth.tokn', did_you_mean: 'auth.token' });
    expect(thrown(() => new Admin({ brokers, conectTimeoutMs: 5 } as never)).fields).toMatchObject({ option: 'conectTimeoutMs', did_you_mean: 'connectTimeoutMs' });
  });

  it('every documented option is accepted', () => {
    expect(() => new Producer({ brokers, clientId: 'p', acks: 1, lingerMs: 1, maxBatchBytes: 1024, maxBatchRecords: 10, maxBufferedBytes: 1 << 20, maxInFlightPerPartition: 1, requestTimeoutMs: 1000, retry: { retries: 1, initialDelayMs: 1, maxDelayMs: 2, factor: 2, maxElapsedMs: 100 }, stallTimeoutMs: 1000, idempotent: true })).not.toThrow();
    expect(() => new Consumer({ brokers, groupId: 'g', topic: 't', clientId: 'c', instanceId: 'i', sessionTimeoutMs: 6000, heartbeatIntervalMs: 1000, rebalanceTimeoutMs: 1000, assignor: 'range', autoOffsetReset: 'earliest', isolation: 'read_uncommitted', mode: 'stream', maxBatchRecords: 10, maxBatchBytes: 1000, maxWaitMs: 10, autoCommit: false, autoCommitIntervalMs: 10, partitionsConsumedConcurrently: 2, processingTimeoutMs: 10, retry: {}, stallTimeoutMs: 1000, tls: undefined, auth: { principal: 'a', token: 'b' } })).not.toThrow();
    expect(() => new Admin({ brokers, connectTimeoutMs: 10, bootstrapTimeoutMs: 10, retry: {}, stallTimeoutMs: 1000, requestTimeoutMs: 1000, auth: { principal: 'a', token: 'b' } })).not.toThrow();
    expect(() => new Consumer({ brokers: [], groupId: 'g', topic: 't' })).toThrow(expect.objectContaining({ code: 'invalid_config', fields: expect.objectContaining({ option: 'brokers' }) }));
  });

  it('Admin createTopic and resetOffsets refuse unknown fields before sending anything', async () => {
    const admin = new Admin({ brokers });
    try {
      await expect(admin.createTopic({ topic: 'x', partitons: 3 } as never)).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'partitons', did_you_mean: 'partitions' } });
      await expect(admin.resetOffsets({ group: 'g', topic: 't', to: 'earliest', partiton: 1 } as never)).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'partiton', did_you_mean: 'partition' } });
    } finally {
      await admin.close();
    }
  });

  it('every Admin call refuses unknown names in its options argument ({ signal }, ...) before sending anything', async () => {
    const admin = new Admin({ brokers });
    const signal = new AbortController().signal;
    try {
      const listed = await rejection(admin.listTopics({ includeInteral: true } as never));
      expect(listed).toMatchObject({ code: 'invalid_config', fields: { option: 'includeInteral', reason: 'unknown option', did_you_mean: 'includeInternal' } });
      expect(listed.message).toBe('invalid listTopics option includeInteral: unknown option (did you mean includeInternal?)');
      await expect(admin.listOffsets('t', undefined, { timestap: 5 } as never)).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'timestap', did_you_mean: 'timestamp' } });
      await expect(admin.describeTopic('t', { sigal: signal } as never)).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'sigal', did_you_mean: 'signal' } });
      await expect(admin.createTopic({ topic: 't' }, { signal, timeoutMs: 5 } as never)).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'timeoutMs' } });
      await expect(admin.readRecords({ topic: 't', partition: 0, offset: 0 }, { signl: signal } as never)).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'signl' } });
      await expect(admin.resetOffsets({ group: 'g', topic: 't', to: 'earliest' }, { dryRun: true } as never)).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'dryRun' } });
      await expect(admin.replayDeadLetters({ deadLetterTopic: 'd' }, { singal: signal } as never)).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'singal' } });
      for (const call of [
        () => admin.addPartitions('t', 2, { x: 1 } as never),
        () => admin.deleteTopic('t', { x: 1 } as never),
        () => admin.clusterStatus({ x: 1 } as never),
        () => admin.listGroups({ x: 1 } as never),
        () => admin.describeGroup('g', { x: 1 } as never),
        () => admin.fetchOffset('g', 't', 0, { x: 1 } as never),
        () => admin.deleteGroup('g', { x: 1 } as never),
      ]) {
        await expect(call()).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'x', reason: 'unknown option' } });
      }
      // Not an object, or a signal that is not an AbortSignal.
      await expect(admin.listTopics(5 as never)).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'options' } });
      await expect(admin.deleteGroup('g', { signal: new AbortController() } as never)).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'signal', reason: 'must be an AbortSignal' } });
    } finally {
      await admin.close();
    }
  });

  it('Consumer start() and commit() refuse unknown names and a signal that is not an AbortSignal, before doing anything', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (r: unknown) => unhandled.push(r);
    process.on('unhandledRejection', onUnhandled);
    // Were a call to go ahead, it would fail against the unreachable broker within 200 ms instead.
    const c = new Consumer({ brokers, groupId: 'g', topic: 't', bootstrapTimeoutMs: 200, connectTimeoutMs: 100 });
    try {
      const signal = new AbortController().signal;
      // commit({ mesage: m }) would commit without m, silently
      await expect(c.commit({ mesage: {} } as never)).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'mesage', did_you_mean: 'message' } });
      const notASignal = { code: 'invalid_config', fields: { option: 'signal', reason: 'must be an AbortSignal' } };
      await expect(c.commit({ signal: 'soon' } as never)).rejects.toMatchObject(notASignal);
      await expect(c.commit(5 as never)).rejects.toMatchObject({ code: 'invalid_config', fields: { option: 'options' } });
      const typo = await rejection(c.start({ sigal: signal } as never));
      expect(typo).toMatchObject({ code: 'invalid_config', fields: { option: 'sigal', did_you_mean: 'signal' } });
      expect(typo.message).toBe('invalid start option sigal: unknown option (did you mean signal?)');
      await expect(c.start({ signal: 42 } as never)).rejects.toMatchObject(notASignal);
      expect(c.state).toBe('new'); // nothing started
    } finally {
      await c.close();
      await new Promise((r) => setTimeout(r, 20));
      process.off('unhandledRejection', onUnhandled);
    }
    expect(unhandled).toEqual([]);
  });

  it('a message with a misspelt field is refused, not sent to another partition', () => {
    const e = thrown(() => toBatchRecord({ value: 'v', parition: 2 } as never, 3));
    expect(e.code).toBe('invalid_parameter');
    expect(e.message).toBe('invalid message 3: unknown field parition (did you mean partition?)');
    expect(toBatchRecord({ key: 'k', value: 'v', headers: { a: 'b' }, partition: 1, timestamp: 5 }, 0).value.toString()).toBe('v');
  });
});
