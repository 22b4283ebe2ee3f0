/** docs/kafka.md's version table says what apis.ts says, and its list of served APIs what the listener serves. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { KAFKA_APIS } from 'tributary-broker/kafka/protocol/apis.js';
import { kafkaHandlers } from 'tributary-broker/kafka/listener.js';

describe('docs/kafka.md', () => {
  const doc = readFileSync(new URL('../../../docs/kafka.md', import.meta.url), 'utf8');

  it('lists every API with the key, schema range, first flexible version and advertised range of the table', () => {
    const rows = [...doc.matchAll(/^\| (\w+) \| (\d+) \| (\d+-\d+) \| (\d+|-) \| (\d+-\d+) \|/gm)].map((m) => m.slice(1, 6).join(' '));
    const expected = KAFKA_APIS.map(
      (a) => `${a.name} ${a.key} ${a.schema.request.versions.min}-${a.schema.request.versions.max} ${a.flexibleFrom ?? '-'} ${a.minVersion}-${a.maxVersion}`,
    );
    expect(rows).toEqual(expected);
  });

  it('names exactly the APIs the listener serves, with their advertised ranges', () => {
    const line = /ApiVersions lists exactly the served APIs, each with its advertised range from the table below: ([^.]+)\./s.exec(doc)?.[1] ?? '';
    const listed = line
      .replace(/\s+/g, ' ')
      .split(', ')
      .map((e) => e.trim());
    const served = [...kafkaHandlers().values()].map((h) => `${h.api.name} ${h.api.minVersion}-${h.api.maxVersion}`);
    expect(listed.sort()).toEqual(served.sort());
  });
});
