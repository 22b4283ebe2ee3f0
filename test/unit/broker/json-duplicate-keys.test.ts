import { describe, expect, it } from 'vitest';
import { duplicateJsonKey } from 'tributary-broker/http/api-request.js';

describe('duplicateJsonKey', () => {
  it('finds a key given twice in one object, at any depth, escapes decoded; keys of different objects do not clash', () => {
    const cases: Array<[string, string | undefined]> = [
      ['{"a":1,"a":2}', 'a'],
      ['{"a":1,"b":{"a":2}}', undefined],
      ['{"a":{"x":1,"x":2}}', 'x'],
      ['{"a":[{"k":1},{"k":2}]}', undefined],
      ['{"a\\"b":1,"a\\"b":2}', 'a"b'],
      ['{"a":"a","b":"a"}', undefined],
      ['{"\\u0061":1,"a":2}', 'a'],
      ['{"x":[1,"y",{"y":1}],"y":2}', undefined],
      ['{"x":{"y":[]},"z":{"x":1},"x":0}', 'x'],
    ];
    for (const [text, dup] of cases) {
      JSON.parse(text);
      expect(duplicateJsonKey(text), text).toBe(dup);
    }
  });
});
