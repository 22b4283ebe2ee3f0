/**
 * The consumer-protocol payloads as the clients write and read them: kafkajs's MemberMetadata and
 * MemberAssignment, and the subscription @platformatic/kafka's consumer sends (v1 with topics and user data
 * only, which the broker must still read).
 */
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { decodeAssignment, decodeSubscription, encodeAssignment, encodeSubscription } from 'tributary-broker/kafka/protocol/consumer-protocol.js';
import { KafkaCodecError } from 'tributary-broker/kafka/protocol/errors.js';
import { platformaticWriter } from './platformatic.js';

const require = createRequire(import.meta.url);
const { MemberMetadata, MemberAssignment } = require('kafkajs/src/consumer/assignerProtocol') as {
  MemberMetadata: { encode(o: { version: number; topics: string[]; userData?: Buffer }): Buffer; decode(b: Buffer): unknown };
  MemberAssignment: { encode(o: { version: number; assignment: Record<string, number[]>; userData?: Buffer }): Buffer; decode(b: Buffer): unknown };
};

describe('consumer protocol payloads', () => {
  it("kafkajs's subscription and assignment decode with ours, and ours with its", () => {
    const sub = MemberMetadata.encode({ version: 0, topics: ['a', 'b'], userData: Buffer.from('u') });
    expect(decodeSubscription(sub)).toEqual({ version: 0, value: { topics: ['a', 'b'], userData: Buffer.from('u') } });
    const asg = MemberAssignment.encode({ version: 0, assignment: { a: [0, 2], b: [1] }, userData: Buffer.alloc(0) });
    expect(decodeAssignment(asg)).toEqual({
      version: 0,
      value: {
        assignedPartitions: [
          { topic: 'a', partitions: [0, 2] },
          { topic: 'b', partitions: [1] },
        ],
        userData: Buffer.alloc(0),
      },
    });
    expect(MemberMetadata.decode(encodeSubscription(0, { topics: ['a'], userData: Buffer.from('x') }))).toEqual({
      version: 0,
      topics: ['a'],
      userData: Buffer.from('x'),
    });
    expect(MemberAssignment.decode(encodeAssignment(0, { assignedPartitions: [{ topic: 'a', partitions: [3] }], userData: Buffer.alloc(0) }))).toEqual({
      version: 0,
      assignment: { a: [3] },
      userData: Buffer.alloc(0),
    });
  });

  it("@platformatic/kafka's v1 subscription without owned partitions still yields the topics", () => {
    // What its consumer's #encodeProtocolSubscriptionMetadata writes for the default protocol (version 1).
    const bytes = platformaticWriter()
      .appendInt16(1)
      .appendArray(['orders', 'audit'], (w, t) => w.appendString(t as string, false), false, false)
      .appendBytes(Buffer.from('m'), false).buffer;
    expect(decodeSubscription(bytes)).toEqual({ version: 1, value: { topics: ['orders', 'audit'], userData: Buffer.from('m') } });
  });

  it('a payload cut inside a field is still an error; an empty assignment is no partitions', () => {
    const sub = encodeSubscription(1, { topics: ['orders'], userData: null, ownedPartitions: [{ topic: 'orders', partitions: [0] }] });
    expect(() => decodeSubscription(sub.subarray(0, sub.length - 2))).toThrow(KafkaCodecError);
    expect(decodeAssignment(Buffer.alloc(0))).toEqual({ version: 0, value: { assignedPartitions: [], userData: null } });
  });
});
