/**
 * The API table: every Kafka API the codecs describe, the version range the broker will advertise in
 * ApiVersions, and where the flexible versions start. The schema may cover more versions than are
 * advertised (the codec is free for them; the listener's semantics are what the advertised range promises).
 */
import { AlterConfigs, IncrementalAlterConfigs } from './messages/alter-configs.js';
import { ApiVersions } from './messages/api-versions.js';
import { DescribeGroups, FindCoordinator, ListGroups } from './messages/coordinator.js';
import { Fetch } from './messages/fetch.js';
import { Heartbeat, JoinGroup, LeaveGroup, SyncGroup } from './messages/group-membership.js';
import { ListOffsets } from './messages/list-offsets.js';
import { Metadata } from './messages/metadata.js';
import { OffsetCommit, OffsetFetch, TxnOffsetCommit } from './messages/offsets.js';
import { Produce } from './messages/produce.js';
import { SaslAuthenticate, SaslHandshake } from './messages/sasl.js';
import { CreatePartitions, CreateTopics, DeleteRecords, DeleteTopics, DescribeConfigs } from './messages/topics-admin.js';
import { AddOffsetsToTxn, AddPartitionsToTxn, EndTxn, InitProducerId } from './messages/transactions.js';
import type { ApiSchema } from './schema.js';

export interface KafkaApi {
  readonly key: number;
  readonly name: string;
  readonly schema: ApiSchema;
  /** The range ApiVersions advertises. */
  readonly minVersion: number;
  readonly maxVersion: number;
  /** First flexible version (compact types, tagged fields, request header v2), or null when none is. */
  readonly flexibleFrom: number | null;
}

function entry(schema: ApiSchema, minVersion: number, maxVersion: number): KafkaApi {
  const { versions, flexible } = schema.request;
  if (minVersion < versions.min || maxVersion > versions.max) throw new Error(`${schema.name}: advertised ${minVersion}-${maxVersion} outside the schema`);
  return { key: schema.apiKey, name: schema.name, schema, minVersion, maxVersion, flexibleFrom: flexible.min <= flexible.max ? flexible.min : null };
}

/**
 * Advertised ranges: RecordBatch v2 needs Produce >= 3 and Fetch >= 4; each maximum is the highest version
 * whose semantics the listener can honour without topic ids or the KIP-848 group protocol.
 */
export const KAFKA_APIS: readonly KafkaApi[] = [
  entry(Produce, 3, 9),
  entry(Fetch, 4, 12),
  entry(ListOffsets, 1, 5),
  entry(Metadata, 0, 9),
  entry(OffsetCommit, 2, 8),
  entry(OffsetFetch, 1, 8),
  entry(FindCoordinator, 0, 4),
  entry(JoinGroup, 0, 6),
  entry(Heartbeat, 0, 4),
  entry(LeaveGroup, 0, 4),
  entry(SyncGroup, 0, 4),
  entry(DescribeGroups, 0, 5),
  entry(ListGroups, 0, 4),
  entry(SaslHandshake, 0, 1),
  entry(ApiVersions, 0, 3),
  entry(CreateTopics, 0, 7),
  entry(DeleteTopics, 0, 6),
  entry(DeleteRecords, 0, 2),
  entry(InitProducerId, 0, 4),
  entry(AddPartitionsToTxn, 0, 3),
  entry(AddOffsetsToTxn, 0, 3),
  entry(EndTxn, 0, 3),
  entry(TxnOffsetCommit, 0, 3),
  entry(DescribeConfigs, 0, 4),
  entry(SaslAuthenticate, 0, 2),
  entry(CreatePartitions, 0, 3),
  entry(AlterConfigs, 0, 2),
  entry(IncrementalAlterConfigs, 0, 1),
];

const BY_KEY = new Map(KAFKA_APIS.map((a) => [a.key, a]));

export function apiByKey(key: number): KafkaApi | undefined {
  return BY_KEY.get(key);
}

export function isFlexible(api: KafkaApi, version: number): boolean {
  return api.flexibleFrom !== null && version >= api.flexibleFrom;
}

export const API_VERSIONS_KEY = ApiVersions.apiKey;

/** The api_keys list of an ApiVersions response. */
export function advertisedVersions(): { apiKey: number; minVersion: number; maxVersion: number }[] {
  return KAFKA_APIS.map((a) => ({ apiKey: a.key, minVersion: a.minVersion, maxVersion: a.maxVersion }));
}
