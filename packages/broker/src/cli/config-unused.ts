import type { BrokerConfig } from '../common/config.js';

/**
 * Settings given (by flag, env or config file) that the broker they configure would not use: each is
 * refused at start, never ignored, so a setting that looks in force always is. A default is never
 * refused: only what someone wrote.
 */

type Key = keyof BrokerConfig;

/** What a standalone broker never reads: etcd, replication and the inter-broker identity and TLS. */
export const CLUSTER_ONLY_SETTINGS: readonly Key[] = [
  'etcd',
  'etcdPrefix',
  'etcdRequestTimeoutMs',
  'brokerLeaseTtlSeconds',
  'replicaLagMaxMs',
  'replicaFetchWaitMs',
  'replicationTimeoutMs',
  'minInsyncReplicas',
  'defaultReplicationFactor',
  'internalReplicationFactor',
  'interBrokerPrincipal',
  'interBrokerToken',
  'uncleanLeaderElection',
  'autoLeaderRebalance',
  'leaderRebalanceDelayMs',
  'deletedTopicRetentionMs',
  'interBrokerTlsCa',
  'interBrokerTlsCert',
  'interBrokerTlsKey',
  'etcdTlsCa',
  'etcdTlsCert',
  'etcdTlsKey',
];

const KAFKA_LISTENER_SETTINGS: readonly Key[] = ['kafkaHost', 'kafkaAdvertisedHost', 'kafkaAdvertisedPort'];

/** Each given setting `c` would not use, with why. */
export function unusedSettings(c: BrokerConfig, given: (key: Key) => boolean): Array<{ key: Key; why: string }> {
  const out: Array<{ key: Key; why: string }> = [];
  if (!c.cluster) {
    // Before: --min-insync-replicas 5 on a standalone broker started, and DescribeConfigs reported min.insync.replicas=5.
    for (const key of CLUSTER_ONLY_SETTINGS) if (given(key)) out.push({ key, why: 'is for cluster mode (--cluster); a standalone broker would not use it' });
  }
  if (c.kafkaPort === undefined && c.kafkaPortIfFree === undefined) {
    for (const key of KAFKA_LISTENER_SETTINGS) if (given(key)) out.push({ key, why: 'is for the Kafka listener, which is off without kafkaPort (or kafkaPortIfFree)' });
  }
  // Users, topic and group ACLs are checked only with authentication on (docs/security.md): without it an ACL
  // that looks in force protected nothing. So is the time a connection has to authenticate.
  if (!c.authentication) {
    for (const key of ['users', 'topicAcls', 'groupAcls', 'authTimeoutMs'] as const) if (given(key)) out.push({ key, why: 'is for authentication (--authentication), which is off: nothing would check it' });
  }
  // The fsync period of flush interval and of journaled segments; in a cluster also the HWM checkpoint period.
  if (c.flush !== 'interval' && !c.journal && !c.cluster && given('flushIntervalMs')) {
    out.push({ key: 'flushIntervalMs', why: `given, but flush is ${c.flush} without the journal, which does not use it on a standalone broker (it is the fsync period of flush interval and of journaled segments, and in a cluster the HWM checkpoint period too)` });
  }
  return out;
}
