/**
 * Unknown names are refused with the nearest valid one (packages/protocol/src/names.ts), and commands
 * refuse parameters and positional tokens they do not take (checkParams, docs/protocol.md section 2).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Params, checkParams, parseLine } from 'tributary-protocol/command.js';
import { editDistance, nearestName } from 'tributary-protocol/names.js';
import { thrown } from '../../helpers/util.js';


describe('editDistance', () => {
  it('counts insertions, deletions, substitutions and neighbour swaps', () => {
    expect(editDistance('partitions', 'partitions')).toBe(0);
    expect(editDistance('partitons', 'partitions')).toBe(1);
    expect(editDistance('autoOffsetRest', 'autoOffsetReset')).toBe(1);
    expect(editDistance('parittion', 'partition')).toBe(1); // swap
    expect(editDistance('abc', '')).toBe(3);
    expect(editDistance('Topic', 'topic')).toBe(0);
  });

  it('is symmetric and never more than the longer length', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 12 }), fc.string({ maxLength: 12 }), (a, b) => {
        const d = editDistance(a, b);
        expect(editDistance(b, a)).toBe(d);
        expect(d).toBeLessThanOrEqual(Math.max(a.length, b.length));
        expect(d === 0).toBe(a.toLowerCase() === b.toLowerCase());
      }),
    );
  });
});

describe('nearestName', () => {
  const names = ['partitions', 'partition', 'topic', 'replication_factor', 'retention_hours'];
  it('suggests a close name, and nothing for a name far from all of them', () => {
    expect(nearestName('partitons', names)).toBe('partitions');
    expect(nearestName('topc', names)).toBe('topic');
    expect(nearestName('replicationFactor', names)).toBe('replication_factor');
    expect(nearestName('zzzzzz', names)).toBeUndefined();
    expect(nearestName('x', names)).toBeUndefined();
    expect(nearestName('anything', [])).toBeUndefined();
  });
});

describe('checkParams', () => {
  const allowed = new Set(['topic', 'partitions']);

  it('passes a line of declared parameters', () => {
    expect(() => checkParams(parseLine('CREATE topic=a partitions=3'), allowed)).not.toThrow();
    expect(() => checkParams(parseLine('CREATE'), allowed)).not.toThrow();
  });

  it('refuses an unknown parameter, naming it and the nearest valid one', () => {
    const e = thrown(() => checkParams(parseLine('CREATE topic=typo partitons=3'), allowed));
    expect(e.code).toBe('invalid_parameter');
    expect(e.fields).toMatchObject({ param: 'partitons', reason: 'unknown parameter', did_you_mean: 'partitions' });
    const far = thrown(() => checkParams(parseLine('CREATE topic=a qqqqqqq=1'), allowed));
    expect(far.fields).not.toHaveProperty('did_you_mean');
  });

  it('refuses positional tokens unless the command takes them', () => {
    const e = thrown(() => checkParams(parseLine('CREATE topic=sp ace'), allowed));
    expect(e.fields).toMatchObject({ param: 'ace' });
    expect(() => checkParams(parseLine('BATCH_COMMIT topic=a P0:1 P1:2'), allowed, { positional: true })).not.toThrow();
  });

  it('bounds the echo of a huge unknown name', () => {
    const e = thrown(() => checkParams(parseLine(`CREATE ${'k'.repeat(10_000)}=1`), allowed));
    expect(String(e.fields.param).length).toBeLessThan(100);
  });

  it('Params with a declaration reports a handler reading an undeclared name as internal_error', () => {
    const p = new Params(parseLine('CREATE topic=a'), allowed);
    expect(p.str('topic')).toBe('a');
    expect(p.int('partitions')).toBeUndefined();
    expect(thrown(() => p.str('retention_hours')).code).toBe('internal_error');
    expect(thrown(() => p.has('retention_hours')).code).toBe('internal_error');
  });
});
