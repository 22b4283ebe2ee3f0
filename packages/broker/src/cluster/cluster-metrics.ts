import client from 'prom-client';
import type { BrokerMetrics } from '../common/metrics.js';
import type { ClusterNode } from './cluster-node.js';

/**
 * The replication gauges operators chart (docs/operations.md, "Metrics"), read when scraped. Each
 * partition is counted by its leader, offline partitions by the controller, so a sum over brokers counts
 * each partition once.
 */
export function registerClusterMetrics(metrics: BrokerMetrics, node: ClusterNode): void {
  const registers = [metrics.registry];
  const led = () => (node.replicas ? node.replicas.led() : []);
  new client.Gauge({
    name: 'tributary_under_replicated_partitions',
    help: 'Partitions this broker leads whose in-sync replicas are fewer than their replicas',
    registers,
    collect() {
      this.set(led().filter((p) => p.isr.length < p.replicas.length).length);
    },
  });
  new client.Gauge({
    name: 'tributary_offline_partitions',
    help: 'Partitions without a live leader (reported by the controller; 0 on other brokers)',
    registers,
    collect() {
      this.set(node.offlinePartitions());
    },
  });
  new client.Gauge({
    name: 'tributary_replica_lag_records',
    help: "Records a follower is behind this leader's log end, per partition and follower",
    labelNames: ['topic', 'partition', 'replica'],
    registers,
    collect() {
      this.reset();
      for (const p of led()) for (const f of p.followers) this.set({ topic: p.topic, partition: String(p.partition), replica: String(f.id) }, Math.max(0, p.logEnd - f.offset));
    },
  });
  new client.Gauge({
    name: 'tributary_replica_lag_seconds',
    help: "How long a follower has not reached this leader's log end (0 when caught up)",
    labelNames: ['topic', 'partition', 'replica'],
    registers,
    collect() {
      this.reset();
      const now = performance.now();
      for (const p of led()) {
        for (const f of p.followers) this.set({ topic: p.topic, partition: String(p.partition), replica: String(f.id) }, f.offset >= p.logEnd ? 0 : Math.max(0, now - f.caughtUpMs) / 1000);
      }
    },
  });
}
