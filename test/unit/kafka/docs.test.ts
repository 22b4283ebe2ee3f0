/** docs/kafka.md's version table says what apis.ts says: key, schema range, flexible-from, advertised range. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { KAFKA_APIS } from 'tributary-broker/kafka/protocol/apis.js';

describe('docs/kafka.md', () => {
  const doc = readFileSync(new URL('../../../docs/kafka.md', import.meta.url), 'utf8');

  it('lists every API with the key, schema range, first flexible version and advertised range of the table', () => {
    const rows = [...doc.matchAll(/^\| (\w+) \| (\d+) \| (\d+-\d+) \| (\d+|-) \| (\d+-\d+) \|/gm)].map((m) => m.slice(1, 6).join(' '));
    const expected = KAFKA_APIS.map(
      (a) => `${a.name} ${a.key} ${a.schema.request.versions.min}-${a.schema.request.versions.max} ${a.flexibleFrom ?? '-'} ${a.minVersion}-${a.maxVersion}`,
    );
    expect(rows).toEqual(expected);
  });

  it('says the listener is not built yet', () => {
    expect(doc).toMatch(/listener is not built yet/);
  });
});
