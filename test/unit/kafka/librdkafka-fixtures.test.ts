/**
 * Byte fixtures from librdkafka (kcat), no server: every distinct request it sent in a metadata, produce,
 * transactional produce, consume and group-consume run (fixtures/librdkafka.json, made by
 * librdkafka-capture.test.ts) decodes with ours, re-encodes to the same bytes, and carries what kcat was
 * asked to do. Those runs finished against responses of these codecs, so librdkafka read them as well.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { splitRecordBatches } from 'tributary-protocol/record-batch/split.js';
import { decodeAssignment, decodeSubscription } from 'tributary-broker/kafka/protocol/consumer-protocol.js';
import { decodeRequest, encodeRequest } from 'tributary-broker/kafka/protocol/headers.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';

interface Fixture {
  client: string;
  requests: { api: string; apiKey: number; apiVersion: number; frame: string }[];
}
type S = KafkaStruct & Record<string, unknown>;

const fixture = JSON.parse(readFileSync(new URL('./fixtures/librdkafka.json', import.meta.url), 'utf8')) as Fixture;

/** What each request must say, beyond decoding cleanly. */
const CHECKS: Record<string, (b: S) => void> = {
  Produce: (b) => {
    const t = (b.topicData as S[])[0]!;
    expect(t.name).toBe('cap');
    const p = (t.partitionData as S[])[0]!;
    const split = splitRecordBatches(p.records as Buffer);
    expect(split.stop).toBeNull();
    expect(split.batches[0]!.decode().records.length).toBeGreaterThan(0);
  },
  Fetch: (b) => expect((b.topics as S[])[0]!.topic).toBe('cap'),
  ListOffsets: (b) => expect((b.topics as S[])[0]!.name).toBe('cap'),
  OffsetCommit: (b) => {
    expect(b.groupId).toBe('grp-cap');
    expect((b.topics as S[])[0]!.name).toBe('cap');
  },
  OffsetFetch: (b) => expect(b.groupId).toBe('grp-cap'),
  FindCoordinator: (b) => expect(b.key).toMatch(/grp-cap|tx-cap/),
  JoinGroup: (b) => {
    expect(b.groupId).toBe('grp-cap');
    expect(b.protocolType).toBe('consumer');
    for (const p of b.protocols as S[]) expect(decodeSubscription(p.metadata as Buffer).value.topics).toEqual(['cap']);
  },
  SyncGroup: (b) => {
    const [a] = b.assignments as S[];
    expect(decodeAssignment(a!.assignment as Buffer).value.assignedPartitions).toEqual([{ topic: 'cap', partitions: [0] }]);
  },
  Heartbeat: (b) => expect(b.groupId).toBe('grp-cap'),
  LeaveGroup: (b) => expect(b.groupId).toBe('grp-cap'),
  InitProducerId: (b) => expect(b.transactionalId).toBe('tx-cap'),
  AddPartitionsToTxn: (b) => expect(b).toMatchObject({ transactionalId: 'tx-cap', producerId: 1000n, topics: [{ name: 'cap', partitions: [0] }] }),
  EndTxn: (b) => expect(b).toMatchObject({ transactionalId: 'tx-cap', producerId: 1000n, committed: true }),
};

describe(`${fixture.client} (kcat) request fixtures`, () => {
  it('cover the APIs a kcat metadata, produce, transactional produce, consume and group run uses', () => {
    expect(new Set(fixture.requests.map((r) => r.api))).toEqual(new Set(['ApiVersions', 'Metadata', ...Object.keys(CHECKS)]));
  });

  for (const r of fixture.requests) {
    it(`${r.api} v${r.apiVersion} decodes, says what kcat did, and re-encodes to the same bytes`, () => {
      const frame = Buffer.from(r.frame, 'hex');
      const req = decodeRequest(frame);
      expect(req.header).toMatchObject({ apiKey: r.apiKey, apiVersion: r.apiVersion, clientId: 'rdkafka' });
      CHECKS[r.api]?.(req.body as S);
      const again = encodeRequest(req.api, r.apiVersion, req.header.correlationId, req.header.clientId, req.body);
      expect(again.subarray(4)).toEqual(frame);
    });
  }
});
