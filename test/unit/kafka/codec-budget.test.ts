/**
 * The decode budget (docs/kafka.md, "Bad input"): one decode may declare at most MAX_DECODED_ENTRIES array
 * elements and tagged fields together, charged from the declared counts before anything is allocated, so a
 * request within the frame limit cannot make the decoder build tens of millions of objects. And the broker's
 * request decode skips unknown tagged fields instead of keeping a copy of each.
 */
import { describe, expect, it } from 'vitest';
import { apiByKey } from 'tributary-broker/kafka/protocol/apis.js';
import { decodeMessage, encodeMessage } from 'tributary-broker/kafka/protocol/codec.js';
import { decodeAssignment, encodeAssignment } from 'tributary-broker/kafka/protocol/consumer-protocol.js';
import { KafkaCodecError } from 'tributary-broker/kafka/protocol/errors.js';
import { decodeRequest, encodeRequest } from 'tributary-broker/kafka/protocol/headers.js';
import { decodeBudget, MAX_DECODED_ENTRIES } from 'tributary-broker/kafka/protocol/reader.js';
import { arr, message } from 'tributary-broker/kafka/protocol/schema.js';

function refusal(fn: () => unknown): KafkaCodecError {
  try {
    fn();
  } catch (e) {
    if (e instanceof KafkaCodecError) return e;
    throw e;
  }
  throw new Error('decoded: expected too_many_entries');
}

/** Metadata v1 (no size prefix) whose topic array declares `count` names, each empty (2 bytes). */
function metadataV1(count: number): Buffer {
  const b = Buffer.alloc(14 + count * 2);
  let at = b.writeInt16BE(3, 0);
  at = b.writeInt16BE(1, at);
  at = b.writeInt32BE(9, at);
  at = b.writeInt16BE(-1, at); // null client id
  b.writeInt32BE(count, at); // at 10; the names are zero bytes: int16 length 0 each
  return b;
}

function uvarint(n: number): Buffer {
  const out: number[] = [];
  for (; n >= 0x80; n = Math.floor(n / 128)) out.push((n & 0x7f) | 0x80);
  out.push(n);
  return Buffer.from(out);
}

/** A flexible request (header v2, null client id, no size prefix) with `count` empty unknown tagged fields in its header. */
function withHeaderTags(framed: Buffer, count: number): Buffer {
  const frame = framed.subarray(4);
  expect(frame.readInt16BE(8)).toBe(-1);
  expect(frame[10]).toBe(0); // the header's empty tagged-field section
  return Buffer.concat([frame.subarray(0, 10), uvarint(count), Buffer.alloc(count * 2), frame.subarray(11)]);
}

const apiVersionsV3 = (correlationId: number) =>
  encodeRequest(apiByKey(18)!, 3, correlationId, null, { clientSoftwareName: 'raw', clientSoftwareVersion: '1' });

describe('the decode budget', () => {
  it('a Metadata request may declare MAX_DECODED_ENTRIES topic names; one more is too_many_entries, refused at the count', () => {
    expect(MAX_DECODED_ENTRIES).toBe(1_000_000);
    expect((decodeRequest(metadataV1(MAX_DECODED_ENTRIES)).body.topics as unknown[]).length).toBe(MAX_DECODED_ENTRIES);
    const e = refusal(() => decodeRequest(metadataV1(MAX_DECODED_ENTRIES + 1)));
    expect(e.reason).toBe('too_many_entries');
    expect(e.fields).toMatchObject({ at: 10, field: 'MetadataRequest.topics' });
    // 30M names fit a 60 MB frame's bytes: refused as fast, from the count alone.
    expect(refusal(() => decodeRequest(metadataV1(30_000_000))).reason).toBe('too_many_entries');
  });

  it("the request header's tagged fields and the body's arrays share one budget", () => {
    const half = MAX_DECODED_ENTRIES / 2 + 1;
    const topics = Array.from({ length: half }, () => ({ name: '' }));
    const metadata = encodeRequest(apiByKey(3)!, 9, 1, null, { topics, allowAutoTopicCreation: false });
    expect((decodeRequest(metadata.subarray(4)).body.topics as unknown[]).length).toBe(half);
    expect(decodeRequest(withHeaderTags(apiVersionsV3(1), half)).header.correlationId).toBe(1);
    const e = refusal(() => decodeRequest(withHeaderTags(metadata, half)));
    expect(e.reason).toBe('too_many_entries');
    expect(e.fields.field).toBe('MetadataRequest.topics');
  });

  it("nested arrays and a known tagged field's value count against the same budget", () => {
    const half = MAX_DECODED_ENTRIES / 2 + 1;
    const schema = message({
      name: 'T',
      apiKey: -1,
      kind: 'data',
      versions: '0',
      flexible: '0+',
      fields: [arr('plain', 'int32'), arr('tagged', 'int32', '0+', { tag: 0 })],
    });
    const ints = Array.from({ length: half }, (_, i) => i);
    expect(decodeMessage(schema, 0, encodeMessage(schema, 0, { plain: ints })).plain).toHaveLength(half);
    expect(decodeMessage(schema, 0, encodeMessage(schema, 0, { tagged: ints })).tagged).toHaveLength(half);
    const e = refusal(() => decodeMessage(schema, 0, encodeMessage(schema, 0, { plain: ints, tagged: ints })));
    expect(e.reason).toBe('too_many_entries');
    expect(e.fields.field).toBe('T.tagged');
  });

  it("consumer-protocol assignments: one over the budget is refused, and a group's decodes can share one budget", () => {
    const partitions = (n: number) => Array.from({ length: n }, (_, i) => i);
    const over = encodeAssignment(0, { assignedPartitions: [{ topic: 't', partitions: partitions(MAX_DECODED_ENTRIES) }], userData: null });
    expect(refusal(() => decodeAssignment(over)).reason).toBe('too_many_entries');
    const half = encodeAssignment(0, { assignedPartitions: [{ topic: 't', partitions: partitions(MAX_DECODED_ENTRIES / 2) }], userData: null });
    const budget = decodeBudget();
    expect(decodeAssignment(half, budget).value.assignedPartitions).toHaveLength(1);
    expect(refusal(() => decodeAssignment(half, budget)).reason).toBe('too_many_entries');
    expect(decodeAssignment(half).value.assignedPartitions).toHaveLength(1);
  });
});

describe('unknown tagged fields in requests', () => {
  it("are skipped by the broker's decode (no object or copy each) and kept when asked for", () => {
    const frame = withHeaderTags(apiVersionsV3(5), 3);
    const skipped = decodeRequest(frame);
    expect(skipped.header).toEqual({ apiKey: 18, apiVersion: 3, correlationId: 5, clientId: null });
    expect(skipped.body).toEqual({ clientSoftwareName: 'raw', clientSoftwareVersion: '1' });
    expect(decodeRequest(frame, { unknownTags: 'keep' }).header.unknownTaggedFields).toEqual([
      { tag: 0, data: Buffer.alloc(0) },
      { tag: 0, data: Buffer.alloc(0) },
      { tag: 0, data: Buffer.alloc(0) },
    ]);
  });
});
