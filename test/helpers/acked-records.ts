/**
 * The check of the fault tests that write with acks and then read everything back: every acknowledged
 * value is stored at the (partition, offset) it was acknowledged at, and no value is stored twice.
 */
import { expect } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';

export interface StoredAt {
  partition: number;
  offset: number;
}

/** Every record of `topic`[`partition`] from offset 0, by value; a value met twice fails the test. */
export async function readValues(conn: Connection, topic: string, partition: number, into = new Map<string, StoredAt>()): Promise<Map<string, StoredAt>> {
  for (let offset = 0; ; ) {
    const { records } = await conn.consume({ topic, partition, offset, batch: 1000 });
    if (records.length === 0) return into;
    for (const r of records) {
      const v = r.value.toString();
      expect(into.has(v), `${v} stored twice`).toBe(false);
      into.set(v, { partition, offset: r.offset });
    }
    offset = records[records.length - 1]!.offset + 1;
  }
}

/** Each acknowledged value where its acknowledgement said. */
export function expectAcknowledgedStored(acked: ReadonlyMap<string, StoredAt>, stored: ReadonlyMap<string, StoredAt>): void {
  for (const [value, at] of acked) expect(stored.get(value), `acknowledged ${value}`).toEqual(at);
}
