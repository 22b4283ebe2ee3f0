import client from 'prom-client';
import { BoundHistogram } from './bound-histogram.js';

/** From 100 µs (an fsync on a fast disk, a cached read) to 5 s. */
const FAST_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/** One registry per broker, so several brokers in one process (tests) do not share counters. */
export class BrokerMetrics {
  readonly registry = new client.Registry();
  readonly recordsIn = new client.Counter({ name: 'tributary_records_in_total', help: 'Records appended', labelNames: ['topic'], registers: [this.registry] });
  readonly recordsOut = new client.Counter({ name: 'tributary_records_out_total', help: 'Records sent to consumers', labelNames: ['topic'], registers: [this.registry] });
  readonly bytesIn = new client.Counter({ name: 'tributary_bytes_in_total', help: 'Record payload bytes appended', labelNames: ['topic'], registers: [this.registry] });
  readonly bytesOut = new client.Counter({ name: 'tributary_bytes_out_total', help: 'Record payload bytes sent to consumers', labelNames: ['topic'], registers: [this.registry] });
  readonly passwordChecks = new client.Counter({
    name: 'tributary_password_checks_total',
    help: 'Password checks run (a scrypt each: AUTH, SASL/PLAIN, a failed SCRAM exchange), by result',
    labelNames: ['result'],
    registers: [this.registry],
  });
  readonly requestDuration = new BoundHistogram('tributary_request_duration_seconds', 'Request latency by command', {
    labelName: 'command',
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registry: this.registry,
  });
  /** The code as the port sends it: the main port's (docs/protocol.md) or the Kafka error's name (docs/operations.md). */
  readonly errors = new client.Counter({ name: 'tributary_request_errors_total', help: 'Error replies by command and code', labelNames: ['command', 'code'], registers: [this.registry] });
  readonly connections = new client.Gauge({ name: 'tributary_connections', help: 'Open client connections', registers: [this.registry] });
  /** docs/protocol.md, "Connection limits": each main-port connection stops being read past MAX_PENDING_REQUEST_BYTES of them. */
  readonly pendingRequestBytes = new client.Gauge({
    name: 'tributary_pending_request_bytes',
    help: 'Bytes of main-port requests read from open connections and not yet answered, every connection together',
    registers: [this.registry],
  });
  /** docs/kafka.md, "Requests in flight": each Kafka connection stops being read past MAX_PENDING_REQUEST_BYTES of them. */
  readonly kafkaPendingRequestBytes = new client.Gauge({
    name: 'tributary_kafka_pending_request_bytes',
    help: 'Bytes of Kafka requests read from open connections and not yet answered, every connection together',
    registers: [this.registry],
  });
  readonly connectionsRejected = new client.Counter({ name: 'tributary_connections_rejected_total', help: 'Connections refused or closed by a limit', labelNames: ['reason'], registers: [this.registry] });
  /** Set by the topic manager: partitions this broker holds a replica of, counted at each scrape. */
  hostedPartitions: () => number = () => 0;
  readonly partitions: client.Gauge = new client.Gauge({
    name: 'tributary_partitions',
    help: 'Partitions this broker holds a replica of',
    registers: [this.registry],
    collect: (): void => this.partitions.set(this.hostedPartitions()),
  });
  readonly topics = new client.Gauge({ name: 'tributary_topics', help: 'Topics known to this broker', registers: [this.registry] });
  readonly fsyncDuration = new BoundHistogram(
    'tributary_fsync_duration_seconds',
    'One fsync pass of a partition log (group commit: one pass covers every append written before it)',
    { buckets: FAST_BUCKETS, registry: this.registry },
  ).child();
  readonly journalWriteDuration = new BoundHistogram(
    'tributary_journal_write_seconds',
    'One write of the journal (--journal true; O_DSYNC: written and durable), covering every append queued before it',
    { buckets: FAST_BUCKETS, registry: this.registry },
  ).child();
  /** docs/operations.md, "Metrics": queue, append (write), fsync, replication (acks=all in a cluster). */
  readonly producePhase = this.phases(
    'tributary_produce_phase_seconds',
    'Produce latency by phase: queue (received to handled), append (written to the log file), fsync (durable), replication (in-sync replicas have it)',
  );
  readonly fetchPhase = this.phases('tributary_fetch_phase_seconds', 'CONSUME latency by phase: queue (received to handled), wait (long poll until records were readable), read (from the log or its cache)');
  readonly retentionPass = new client.Histogram({
    name: 'tributary_retention_pass_seconds',
    help: 'One pass of the retention timer: retention (delete topics) or compaction (compact topics) over every partition',
    buckets: [0.001, 0.01, 0.1, 1, 10, 60],
    registers: [this.registry],
  });
  readonly isrShrinks = new client.Counter({ name: 'tributary_isr_shrinks_total', help: 'In-sync replica sets this broker shrank, as leader or as controller (a dead broker removed)', labelNames: ['topic'], registers: [this.registry] });
  readonly isrExpands = new client.Counter({ name: 'tributary_isr_expands_total', help: 'In-sync replica sets this broker expanded as leader', labelNames: ['topic'], registers: [this.registry] });

  /**
   * Records appended to a user topic and their value bytes, from every port (main-port produce, TXN publish
   * and batches, Kafka Produce): counted once appended, a duplicate retry adding nothing.
   */
  countIn(topic: string, records: number, bytes: number): void {
    this.recordsIn.inc({ topic }, records);
    this.bytesIn.inc({ topic }, bytes);
  }

  /** A deleted topic's series go: topic names are the clients' to choose, and the registry keeps each series forever. */
  forgetTopic(topic: string): void {
    for (const c of [this.recordsIn, this.recordsOut, this.bytesIn, this.bytesOut, this.isrShrinks, this.isrExpands]) c.remove({ topic });
  }

  private phases(name: string, help: string): BoundHistogram {
    return new BoundHistogram(name, help, { labelName: 'phase', buckets: FAST_BUCKETS, registry: this.registry });
  }

  constructor() {
    // prom-client's default names already start with process_/nodejs_: prefix 'tributary_' gives
    // tributary_process_resident_memory_bytes (not tributary_process_process_...).
    client.collectDefaultMetrics({ register: this.registry, prefix: 'tributary_' });
  }
}
