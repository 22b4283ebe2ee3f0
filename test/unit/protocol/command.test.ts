import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Params, formatError, formatLine, formatOk, formatValue, isErrorReply, parseError, parseIntStrict, parseLine } from 'tributary-protocol/command.js';
import { ERROR_CODES, type ErrorCode, TributaryError } from 'tributary-protocol/errors.js';

function catchErr(fn: () => unknown): TributaryError {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(TributaryError);
  return caught as TributaryError;
}

function expectInvalidParam(fn: () => unknown, param: string): TributaryError {
  const err = catchErr(fn);
  expect(err.code).toBe('invalid_parameter');
  expect(err.errorClass).toBe('validation');
  expect(err.fields.param).toBe(param);
  expect(typeof err.fields.reason).toBe('string');
  return err;
}

const keyArb = fc.stringMatching(/^[a-z_][a-z0-9_]*$/).filter((k) => k.length <= 40);

/** Values that stress quoting: spaces, quotes, backslashes, '=', empty strings, full unicode. */
const valueArb = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 30 }),
  fc.string({ unit: fc.constantFrom(' ', '"', '\\', '=', 'a', '\t', '\n', '\r', 'é', '😀', ':', ','), maxLength: 20 }),
  fc.constantFrom('', ' ', '"', '\\', '\\"', '""', '="', 'a b', ' lead', 'trail ', '\\\\'),
);

describe('parseLine basics', () => {
  it('splits head, key=value params and positional tokens', () => {
    const p = parseLine('BATCH_COMMIT topic=t group=g member=m-1 generation=3 P0:5,P3:7');
    expect(p.head).toBe('BATCH_COMMIT');
    expect(Object.fromEntries(p.params)).toEqual({ topic: 't', group: 'g', member: 'm-1', generation: '3' });
    expect(p.positional).toEqual(['P0:5,P3:7']);
  });

  it('keeps positional tokens in order wherever they appear', () => {
    const p = parseLine('ERROR: NOT_LEADER LEADER_IS 10.0.0.2:9000 class=routing');
    expect(p.head).toBe('ERROR:');
    expect(p.positional).toEqual(['NOT_LEADER', 'LEADER_IS', '10.0.0.2:9000']);
    expect(p.params.get('class')).toBe('routing');
    const q = parseLine('X a b=1 c d=2 e');
    expect(q.positional).toEqual(['a', 'c', 'e']);
    expect(Object.fromEntries(q.params)).toEqual({ b: '1', d: '2' });
  });

  it('preserves the case of the command head (callers upper-case it)', () => {
    expect(parseLine('publish topic=t').head).toBe('publish');
    expect(parseLine('PuBlIsH topic=t').head).toBe('PuBlIsH');
    expect(parseLine('publish Topic=t').params.get('Topic')).toBe('t');
  });

  it('accepts a head alone and any whitespace between tokens', () => {
    const p = parseLine('  LIST  ');
    expect(p.head).toBe('LIST');
    expect(p.params.size).toBe(0);
    expect(p.positional).toEqual([]);
    const q = parseLine('CONSUME\ttopic=t\r\npartition=0 \n offset=5');
    expect(Object.fromEntries(q.params)).toEqual({ topic: 't', partition: '0', offset: '5' });
  });

  it('unquoted values may contain = and other punctuation, and may be empty', () => {
    const p = parseLine('X a=b=c plan=m1:0,1;m2:2 empty=');
    expect(p.params.get('a')).toBe('b=c');
    expect(p.params.get('plan')).toBe('m1:0,1;m2:2');
    expect(p.params.get('empty')).toBe('');
  });

  it('decodes quoted values with \\" and \\\\ escapes', () => {
    const p = parseLine('X reason="bad \\"thing\\" at C:\\\\dir" other=1');
    expect(p.params.get('reason')).toBe('bad "thing" at C:\\dir');
    expect(p.params.get('other')).toBe('1');
    expect(parseLine('X e=""').params.get('e')).toBe('');
  });
});

describe('parseLine bounds', () => {
  it('reads a long quoted value with escapes anywhere in it', () => {
    const body = `${'a'.repeat(1 << 20)}\\"${'b'.repeat(1 << 20)}\\\\`;
    const v = parseLine(`CREATE topic="${body}" partitions=1`).params.get('topic')!;
    expect(v.length).toBe((2 << 20) + 2);
    expect(v.slice((1 << 20) - 1, (1 << 20) + 2)).toBe('a"b');
    expect(v.endsWith('b\\')).toBe(true);
    expect(() => parseLine(`CREATE topic="${'a'.repeat(1 << 20)}`)).toThrow(/unterminated quoted value/);
    expect(() => parseLine('CREATE topic="a\\x"')).toThrow(/bad escape/);
  });

  it('refuses more than 10,000 parameters and positional tokens', () => {
    const tokens = (n: number) => Array.from({ length: n }, (_, i) => (i % 2 ? `k${i}=1` : `p${i}`)).join(' ');
    expect(parseLine(`X ${tokens(10_000)}`).params.size).toBe(5_000);
    expect(() => parseLine(`X ${tokens(10_001)}`)).toThrow(/more than 10000 parameters/);
  });
});

describe('message=', () => {
  it('is the verbatim rest of the body: spaces, =, quotes, backslashes, newlines', () => {
    const payload = ' hello  "world" a=b \\n\n\r\ttrailing  ';
    const p = parseLine(`PUBLISH topic=t acks=1 message=${payload}`);
    expect(p.params.get('message')).toBe(payload);
    expect(p.params.get('topic')).toBe('t');
    expect(p.params.get('acks')).toBe('1');
  });

  it('must be last: anything after it belongs to the payload', () => {
    const p = parseLine('PUBLISH message=hi topic=other key=k');
    expect(p.params.get('message')).toBe('hi topic=other key=k');
    expect(p.params.has('topic')).toBe(false);
    expect(p.params.has('key')).toBe(false);
  });

  it('may be empty', () => {
    expect(parseLine('PUBLISH topic=t message=').params.get('message')).toBe('');
  });

  it('a quoted-looking message is not unquoted', () => {
    expect(parseLine('PUBLISH message="x"').params.get('message')).toBe('"x"');
  });

  it('formatLine writes message last and verbatim, whatever the field order', () => {
    const line = formatLine('PUBLISH', { message: 'a "b" c=d', topic: 't', acks: 1 });
    expect(line).toBe('PUBLISH topic=t acks=1 message=a "b" c=d');
    const p = parseLine(line);
    expect(p.params.get('message')).toBe('a "b" c=d');
    expect(p.params.get('topic')).toBe('t');
  });

  it('property: any payload survives formatLine → parseLine', () => {
    fc.assert(
      fc.property(
        fc.string({ unit: 'binary', maxLength: 200 }),
        fc.string({ unit: fc.constantFrom(' ', '"', '=', '\n', 'x', '\\'), maxLength: 50 }),
        (a, b) => {
          const payload = a + b;
          const p = parseLine(formatLine('PUBLISH', { topic: 'orders', message: payload }));
          expect(p.params.get('message')).toBe(payload);
          expect(p.params.get('topic')).toBe('orders');
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('formatLine / formatValue', () => {
  it('quotes only when needed', () => {
    expect(formatValue('plain')).toBe('plain');
    expect(formatValue('')).toBe('""');
    expect(formatValue('a b')).toBe('"a b"');
    expect(formatValue('say "hi"')).toBe('"say \\"hi\\""');
    expect(formatValue('c:\\x')).toBe('"c:\\\\x"');
    expect(formatValue(42)).toBe('42');
    expect(formatValue(true)).toBe('true');
    expect(formatValue(12345678901234567890n)).toBe('12345678901234567890');
  });

  it('skips undefined fields and writes positional tokens after the head', () => {
    expect(formatLine('OK', { a: 1, b: undefined, c: 'x' })).toBe('OK a=1 c=x');
    expect(formatLine('BATCH_COMMIT', { topic: 't' }, ['P0:5,P3:7'])).toBe('BATCH_COMMIT P0:5,P3:7 topic=t');
    expect(formatOk()).toBe('OK');
    expect(formatOk({ batched: 2 })).toBe('OK batched=2');
  });

  it('property: formatLine(head, fields) → parseLine gives back the head and every field value', () => {
    const fieldsArb = fc.uniqueArray(fc.tuple(keyArb, valueArb), { selector: ([k]) => k, maxLength: 8 });
    const headArb = fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_:]*$/).filter((h) => h.length > 0 && h.length < 30);
    fc.assert(
      fc.property(headArb, fieldsArb, (head, entries) => {
        const fields = Object.fromEntries(entries);
        const line = formatLine(head, fields);
        const p = parseLine(line);
        expect(p.head).toBe(head);
        expect(p.positional).toEqual([]);
        expect(p.params.size).toBe(entries.length);
        for (const [k, v] of entries) expect(p.params.get(k)).toBe(v);
      }),
      { numRuns: 500 },
    );
  });

  it('property: positional tokens survive the round trip too', () => {
    const tokArb = fc.stringMatching(/^[A-Za-z0-9_:,.;-]+$/).filter((t) => t.length > 0 && t.length < 20);
    fc.assert(
      fc.property(fc.array(tokArb, { maxLength: 4 }), fc.uniqueArray(fc.tuple(keyArb, valueArb), { selector: ([k]) => k, maxLength: 4 }), (pos, entries) => {
        const p = parseLine(formatLine('CMD', Object.fromEntries(entries), pos));
        expect(p.positional).toEqual(pos);
        for (const [k, v] of entries) expect(p.params.get(k)).toBe(v);
      }),
      { numRuns: 200 },
    );
  });
});

describe('parseLine errors are invalid_parameter with a param field', () => {
  it('empty command', () => {
    expectInvalidParam(() => parseLine(''), 'command');
    expectInvalidParam(() => parseLine('   \t\n '), 'command');
  });

  it('unterminated quote', () => {
    expectInvalidParam(() => parseLine('X reason="never closed'), 'reason');
    expectInvalidParam(() => parseLine('X reason="ends with escaped quote\\"'), 'reason');
    expectInvalidParam(() => parseLine('X a=1 b="'), 'b');
  });

  it('bad escape', () => {
    expectInvalidParam(() => parseLine('X v="a\\nb"'), 'v');
    expectInvalidParam(() => parseLine('X v="a\\'), 'v');
  });

  it('duplicate key', () => {
    const err = expectInvalidParam(() => parseLine('X topic=a topic=b'), 'topic');
    expect(String(err.fields.reason)).toMatch(/more than once/);
    expectInvalidParam(() => parseLine('X topic=a other=1 topic=a'), 'topic');
  });

  it('text after the closing quote', () => {
    expectInvalidParam(() => parseLine('X v="abc"def'), 'v');
    expectInvalidParam(() => parseLine('X v="abc""'), 'v');
  });

  it('stray quotes in unquoted values and positional tokens', () => {
    expectInvalidParam(() => parseLine('X v=ab"c'), 'v');
    expectInvalidParam(() => parseLine('X ab"c'), 'command');
  });

  it('malformed parameter names', () => {
    expect(catchErr(() => parseLine('X =v')).code).toBe('invalid_parameter');
    expect(catchErr(() => parseLine('X 1a=v')).code).toBe('invalid_parameter');
  });

  it('property: parseLine only ever throws invalid_parameter (never another error type)', () => {
    fc.assert(
      fc.property(fc.string({ unit: fc.constantFrom('a', 'B', '=', '"', '\\', ' ', '\n', '1', '_', ':', 'é'), maxLength: 40 }), (s) => {
        try {
          parseLine(s);
        } catch (e) {
          expect(e).toBeInstanceOf(TributaryError);
          expect((e as TributaryError).code).toBe('invalid_parameter');
          expect(typeof (e as TributaryError).fields.param).toBe('string');
        }
      }),
      { numRuns: 1000 },
    );
  });
});

describe('parseIntStrict', () => {
  const lo = Number.MIN_SAFE_INTEGER;
  const hi = Number.MAX_SAFE_INTEGER;

  it.each([
    '1e12',
    '1.5',
    '0x10',
    'NaN',
    '',
    '99999999999999999999',
    ' 1',
    '1 ',
    '+1',
    '--1',
    '1_000',
    'Infinity',
    '-',
    '9007199254740992',
    '9999999999999999',
  ])('rejects %j', (v) => {
    expectInvalidParam(() => parseIntStrict('offset', v, lo, hi), 'offset');
  });

  it('accepts -1, 0 and 9007199254740991 when in range', () => {
    expect(parseIntStrict('n', '-1', -1, hi)).toBe(-1);
    expect(parseIntStrict('n', '0', 0, 0)).toBe(0);
    expect(parseIntStrict('n', '9007199254740991', 0, hi)).toBe(9007199254740991);
    expect(parseIntStrict('n', '-9007199254740991', lo, 0)).toBe(-9007199254740991);
  });

  it('rejects values outside the given range, at both ends', () => {
    expectInvalidParam(() => parseIntStrict('partition', '-1', 0, 10), 'partition');
    expectInvalidParam(() => parseIntStrict('partition', '11', 0, 10), 'partition');
    expect(parseIntStrict('partition', '10', 0, 10)).toBe(10);
    expectInvalidParam(() => parseIntStrict('n', '9007199254740991', 0, 9007199254740990), 'n');
  });

  it('property: every safe integer in range round-trips through its decimal string', () => {
    fc.assert(
      fc.property(fc.maxSafeInteger(), (n) => {
        expect(parseIntStrict('n', String(n), lo, hi)).toBe(n);
      }),
    );
  });
});

describe('Params typed getters', () => {
  const P = (line: string) => new Params(parseLine(line));

  it('str: required, empty, maxLength', () => {
    const p = P('X topic=orders empty="" long=abcdef');
    expect(p.str('topic')).toBe('orders');
    expect(p.str('missing')).toBeUndefined();
    expectInvalidParam(() => p.str('missing', { required: true }), 'missing');
    expectInvalidParam(() => p.str('empty'), 'empty');
    expect(p.str('empty', { allowEmpty: true })).toBe('');
    expect(p.str('long', { maxLength: 6 })).toBe('abcdef');
    expectInvalidParam(() => p.str('long', { maxLength: 5 }), 'long');
    expect(p.reqStr('topic', { maxLength: 249 })).toBe('orders');
    expectInvalidParam(() => p.reqStr('nope'), 'nope');
  });

  it('has', () => {
    const p = P('X a=1');
    expect(p.has('a')).toBe(true);
    expect(p.has('b')).toBe(false);
  });

  it('int / reqInt with ranges', () => {
    const p = P('X partition=3 offset=-1 bad=1.5');
    expect(p.reqInt('partition', { min: 0, max: 3 })).toBe(3);
    expectInvalidParam(() => p.reqInt('partition', { min: 0, max: 2 }), 'partition');
    expect(p.int('offset')).toBe(-1);
    expectInvalidParam(() => p.int('offset', { min: 0 }), 'offset');
    expect(p.int('absent')).toBeUndefined();
    expectInvalidParam(() => p.reqInt('absent'), 'absent');
    expectInvalidParam(() => p.int('bad'), 'bad');
  });

  it('bool accepts true/false/1/0 in any case and nothing else', () => {
    const p = P('X a=true b=FALSE c=1 d=0 e=yes f=True');
    expect(p.bool('a')).toBe(true);
    expect(p.bool('b')).toBe(false);
    expect(p.bool('c')).toBe(true);
    expect(p.bool('d')).toBe(false);
    expect(p.bool('f')).toBe(true);
    expect(p.bool('z')).toBeUndefined();
    expectInvalidParam(() => p.bool('e'), 'e');
  });

  it('oneOf matches case-insensitively and returns the canonical spelling', () => {
    const p = P('X isolation=READ_COMMITTED acks=All reset=middle');
    expect(p.oneOf('isolation', ['read_committed', 'read_uncommitted'] as const)).toBe('read_committed');
    expect(p.oneOf('acks', ['0', '1', 'all'] as const)).toBe('all');
    expect(p.oneOf('absent', ['a'] as const)).toBeUndefined();
    expectInvalidParam(() => p.oneOf('reset', ['earliest', 'latest', 'error'] as const), 'reset');
  });
});

describe('formatError / parseError', () => {
  it('NOT_LEADER keeps the positional LEADER_IS host:port and is class routing, retryable', () => {
    const err = new TributaryError('NOT_LEADER', { topic: 'orders', partition: 2 }, undefined, ['LEADER_IS', 'broker-2:9000']);
    const line = formatError(err);
    expect(line.startsWith('ERROR: NOT_LEADER LEADER_IS broker-2:9000 ')).toBe(true);
    expect(line).toContain(' class=routing retryable=true');
    expect(isErrorReply(line)).toBe(true);
    const back = parseError(line);
    expect(back).toBeInstanceOf(TributaryError);
    expect(back.code).toBe('NOT_LEADER');
    expect(back.extra).toEqual(['LEADER_IS', 'broker-2:9000']);
    expect(back.fields).toEqual({ topic: 'orders', partition: '2' });
    expect(back.errorClass).toBe('routing');
    expect(back.retriable).toBe(true);
  });

  it('class= and retryable= come right after the code (and any positional tokens)', () => {
    expect(formatError(new TributaryError('frame_too_large', { max: 67108864 }))).toBe('ERROR: frame_too_large class=validation retryable=false max=67108864');
    expect(formatError(new TributaryError('GEN_MISMATCH', { current: 5, requested: 4 }))).toBe(
      'ERROR: GEN_MISMATCH class=fencing retryable=false current=5 requested=4',
    );
  });

  it('quotes field values that need it and parses them back', () => {
    const err = new TributaryError('invalid_parameter', { param: 'topic', reason: 'has "bad" chars\\ here' });
    const back = parseError(formatError(err));
    expect(back.fields).toEqual({ param: 'topic', reason: 'has "bad" chars\\ here' });
  });

  it('an unknown code is written as class=internal retryable=false', () => {
    const line = formatError(new TributaryError('brand_new_code', { x: 1 }));
    expect(line).toBe('ERROR: brand_new_code class=internal retryable=false x=1');
    const back = parseError(line);
    expect(back.code).toBe('brand_new_code');
    expect(back.errorClass).toBe('internal');
    expect(back.retriable).toBe(false);
  });

  it('always writes class= and retryable= from the registry, even if fields try to override them', () => {
    const err = new TributaryError('NOT_LEADER', { class: 'fencing', retryable: false, topic: 't' });
    const line = formatError(err);
    const p = parseLine(line.replace(/^ERROR:\s*/, ''));
    expect(p.params.get('class')).toBe('routing');
    expect(p.params.get('retryable')).toBe('true');
    expect(p.params.get('topic')).toBe('t');
    expect(line.indexOf('class=')).toBeLessThan(line.indexOf('topic='));
  });

  it('parseError drops class/retryable from fields and trusts the registry', () => {
    const back = parseError('ERROR: NOT_COORDINATOR class=internal retryable=false host=h port=9001');
    expect(back.code).toBe('NOT_COORDINATOR');
    expect(back.fields).toEqual({ host: 'h', port: '9001' });
    expect(back.errorClass).toBe('routing');
    expect(back.retriable).toBe(true);
  });

  it('parseError accepts replies without class/retryable and keeps the original text as message', () => {
    const text = 'ERROR: OFFSET_OUT_OF_RANGE requested=10 earliest=0 latest=5';
    const back = parseError(text);
    expect(back.code).toBe('OFFSET_OUT_OF_RANGE');
    expect(back.fields).toEqual({ requested: '10', earliest: '0', latest: '5' });
    expect(back.message).toBe(text);
  });

  it('an unparseable reply becomes internal_error carrying the reply', () => {
    const back = parseError('ERROR: x reason="oops');
    expect(back.code).toBe('internal_error');
    expect(back.fields.reply).toBe('ERROR: x reason="oops');
    expect(back.errorClass).toBe('internal');
  });

  it('property: formatError → parseError keeps code, class, retryable, positional and fields', () => {
    const codes = Object.keys(ERROR_CODES) as ErrorCode[];
    const fieldKeyArb = keyArb.filter((k) => k !== 'class' && k !== 'retryable');
    const fieldValArb = fc.oneof(valueArb, fc.integer(), fc.boolean());
    const tokArb = fc.stringMatching(/^[A-Za-z0-9_:.-]+$/).filter((t) => t.length > 0 && t.length < 20);
    fc.assert(
      fc.property(
        fc.oneof(fc.constantFrom(...codes), fc.stringMatching(/^[a-z_]{1,20}$/)),
        fc.uniqueArray(fc.tuple(fieldKeyArb, fieldValArb), { selector: ([k]) => k, maxLength: 6 }),
        fc.array(tokArb, { maxLength: 3 }),
        (code, entries, extra) => {
          const err = new TributaryError(code, Object.fromEntries(entries), undefined, extra);
          const line = formatError(err);
          const p = parseLine(line.replace(/^ERROR:\s*/, ''));
          expect(p.params.get('class')).toBe(err.errorClass);
          expect(p.params.get('retryable')).toBe(String(err.retriable));
          const back = parseError(line);
          expect(back.code).toBe(code);
          expect(back.errorClass).toBe(err.errorClass);
          expect(back.retriable).toBe(err.retriable);
          expect(back.extra).toEqual(extra);
          expect(back.fields).toEqual(Object.fromEntries(entries.map(([k, v]) => [k, String(v)])));
        },
      ),
      { numRuns: 400 },
    );
  });
});
