import { describe, expect, it } from 'vitest';
import { ERROR_CLASSES, ERROR_CODES, type ErrorSpec, TributaryError, invalidParam, isErrorCode } from 'tributary-protocol/errors.js';

const entries = Object.entries(ERROR_CODES) as Array<[string, ErrorSpec]>;

describe('ERROR_CLASSES', () => {
  it('is exactly the eight classes of docs/protocol.md section 3', () => {
    expect([...ERROR_CLASSES].sort()).toEqual(
      ['routing', 'availability', 'fencing', 'conflict', 'authorization', 'not_found', 'validation', 'internal'].sort(),
    );
    expect(new Set(ERROR_CLASSES).size).toBe(ERROR_CLASSES.length);
  });
});

describe('ERROR_CODES registry', () => {
  it('is not empty and holds the codes the protocol names', () => {
    for (const code of [
      'frame_too_large',
      'invalid_encoding',
      'unknown_command',
      'invalid_parameter',
      'invalid_batch',
      'UNSUPPORTED_FEATURE',
      'authentication_failed',
      'invalid_topic_name',
      'out_of_order_sequence',
      'stale_producer_epoch',
      'NOT_LEADER',
      'OFFSET_OUT_OF_RANGE',
      'NOT_COORDINATOR',
      'REBALANCE_IN_PROGRESS',
      'member_not_found',
      'offset_regression',
      'GEN_MISMATCH',
      'NOT_OWNER',
    ]) {
      expect(isErrorCode(code), code).toBe(true);
    }
  });

  it.each(entries)('%s has a valid class, a boolean retryable and a description', (_code, spec) => {
    expect(ERROR_CLASSES).toContain(spec.class);
    expect(typeof spec.retryable).toBe('boolean');
    expect(typeof spec.description).toBe('string');
    expect(spec.description.length).toBeGreaterThan(0);
  });

  it('no two codes differ only by case', () => {
    const lower = entries.map(([c]) => c.toLowerCase());
    expect(new Set(lower).size).toBe(lower.length);
  });

  it('routing errors (NOT_LEADER, NOT_COORDINATOR) are retryable', () => {
    expect(ERROR_CODES.NOT_LEADER).toMatchObject({ class: 'routing', retryable: true });
    expect(ERROR_CODES.NOT_COORDINATOR).toMatchObject({ class: 'routing', retryable: true });
    const routing = entries.filter(([, s]) => s.class === 'routing');
    expect(routing.length).toBeGreaterThanOrEqual(2);
    for (const [code, s] of routing) expect(s.retryable, code).toBe(true);
  });

  it('fencing errors are never retryable (rejoin or re-init, never repeat unchanged)', () => {
    const fencing = entries.filter(([, s]) => s.class === 'fencing');
    expect(fencing.map(([c]) => c)).toEqual(expect.arrayContaining(['GEN_MISMATCH', 'NOT_OWNER', 'member_not_found', 'stale_producer_epoch']));
    for (const [code, s] of fencing) expect(s.retryable, code).toBe(false);
  });

  it('validation, authorization and not_found errors are not retryable; availability errors are', () => {
    for (const [code, s] of entries) {
      if (s.class === 'validation' || s.class === 'authorization' || s.class === 'not_found') expect(s.retryable, code).toBe(false);
      if (s.class === 'availability') expect(s.retryable, code).toBe(true);
    }
  });
});

describe('isErrorCode', () => {
  it('matches own registry keys only (not Object.prototype names)', () => {
    expect(isErrorCode('NOT_LEADER')).toBe(true);
    expect(isErrorCode('not_leader')).toBe(false);
    for (const name of ['toString', 'constructor', '__proto__', 'hasOwnProperty', '']) expect(isErrorCode(name), name).toBe(false);
  });
});

describe('TributaryError', () => {
  it('takes class and retryability from the registry', () => {
    const e = new TributaryError('NOT_LEADER', { topic: 't' }, undefined, ['LEADER_IS', 'h:1']);
    expect(e).toBeInstanceOf(Error);
    expect(e.name).toBe('TributaryError');
    expect(e.code).toBe('NOT_LEADER');
    expect(e.errorClass).toBe('routing');
    expect(e.retriable).toBe(true);
    expect(e.fields).toEqual({ topic: 't' });
    expect(e.extra).toEqual(['LEADER_IS', 'h:1']);
  });

  it.each(entries)('%s: the error object agrees with its registry entry', (code, spec) => {
    const e = new TributaryError(code);
    expect(e.errorClass).toBe(spec.class);
    expect(e.retriable).toBe(spec.retryable);
  });

  it('an unknown code is class internal and not retriable', () => {
    for (const code of ['no_such_code', 'toString', '__proto__', 'not_leader']) {
      const e = new TributaryError(code);
      expect(e.code).toBe(code);
      expect(e.errorClass, code).toBe('internal');
      expect(e.retriable, code).toBe(false);
    }
  });

  it('builds a readable message from code and fields unless one is given', () => {
    expect(new TributaryError('GEN_MISMATCH', { current: 5, requested: 4 }).message).toBe('GEN_MISMATCH current=5 requested=4');
    expect(new TributaryError('not_ready').message).toBe('not_ready');
    expect(new TributaryError('not_ready', {}, 'custom text').message).toBe('custom text');
    expect(new TributaryError('x').extra).toEqual([]);
  });

  it('invalidParam builds invalid_parameter with param and reason', () => {
    const e = invalidParam('partition', 'must be between 0 and 3');
    expect(e.code).toBe('invalid_parameter');
    expect(e.errorClass).toBe('validation');
    expect(e.retriable).toBe(false);
    expect(e.fields).toEqual({ param: 'partition', reason: 'must be between 0 and 3' });
  });
});
