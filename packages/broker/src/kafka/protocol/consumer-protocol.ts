/**
 * Reading and writing the consumer-protocol payloads. A member may speak a newer version than ours: as
 * Kafka's own consumer does, the payload is read as min(its version, ours) and the newer tail is ignored.
 * A payload that stops at a field boundary short of its version (some clients send v1 without the owned
 * partitions) reads with the missing fields absent; the broker only needs the topics.
 */
import { readMessagePrefix, writeMessage } from './codec.js';
import { type DecodeBudget, decodeBudget, KafkaReader } from './reader.js';
import type { KafkaStruct, MessageSchema } from './schema.js';
import { ConsumerProtocolAssignment, ConsumerProtocolSubscription } from './messages/consumer-protocol.js';
import { KafkaCodecError } from './errors.js';
import { KafkaWriter } from './writer.js';

export { ConsumerProtocolAssignment, ConsumerProtocolSubscription };

export interface VersionedPayload {
  version: number;
  value: KafkaStruct;
}

function decodePayload(schema: MessageSchema, buf: Buffer, budget: DecodeBudget): VersionedPayload {
  const r = new KafkaReader(buf, 0, buf.length, budget);
  r.field = `${schema.name}.version`;
  const version = r.int16();
  if (version < schema.versions.min)
    throw new KafkaCodecError('unsupported_version', `${schema.name} version ${version}`, { message: schema.name, version, at: 0 });
  const readAs = Math.min(version, schema.versions.max);
  return { version, value: readMessagePrefix(schema, readAs, r) };
}

function encodePayload(schema: MessageSchema, version: number, value: KafkaStruct): Buffer {
  const w = new KafkaWriter(64);
  w.int16(version);
  writeMessage(schema, version, value, w);
  return w.finish();
}

export const decodeSubscription = (buf: Buffer, budget = decodeBudget()) => decodePayload(ConsumerProtocolSubscription, buf, budget);
export const encodeSubscription = (version: number, value: KafkaStruct) => encodePayload(ConsumerProtocolSubscription, version, value);
/**
 * An empty buffer is the assignment of a member the leader gave nothing (the coordinator fills those in).
 * `budget`: shared by the decodes of one group's assignments, which a group leader wrote (GROUP_STATUS).
 */
export const decodeAssignment = (buf: Buffer, budget = decodeBudget()): VersionedPayload =>
  buf.length === 0 ? { version: 0, value: { assignedPartitions: [], userData: null } } : decodePayload(ConsumerProtocolAssignment, buf, budget);
export const encodeAssignment = (version: number, value: KafkaStruct) => encodePayload(ConsumerProtocolAssignment, version, value);
