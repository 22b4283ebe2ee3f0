import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from 'tributary-protocol/errors.js';

describe('docs/protocol.md', () => {
  const doc = readFileSync(new URL('../../../docs/protocol.md', import.meta.url), 'utf8');

  it('lists every error code with the class and retryability of the registry', () => {
    for (const [code, spec] of Object.entries(ERROR_CODES)) {
      expect(doc, code).toContain(`| \`${code}\` | ${spec.class} | ${spec.retryable} |`);
    }
  });
});
