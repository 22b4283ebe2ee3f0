import client from 'prom-client';

/** One registry per broker, so several brokers in one process (tests) do not share counters. */
export class BrokerMetrics {
  readonly registry = new client.Registry();
  readonly recordsIn = new client.Counter({ name: 'tributary_records_in_total', help: 'Records appended', labelNames: ['topic'], registers: [this.registry] });
  readonly recordsOut = new client.Counter({ name: 'tributary_records_out_total', help: 'Records sent to consumers', labelNames: ['topic'], registers: [this.registry] });
  readonly bytesIn = new client.Counter({ name: 'tributary_bytes_in_total', help: 'Record payload bytes appended', labelNames: ['topic'], registers: [this.registry] });
  readonly bytesOut = new client.Counter({ name: 'tributary_bytes_out_total', help: 'Record payload bytes sent to consumers', labelNames: ['topic'], registers: [this.registry] });
  readonly requestDuration = new client.Histogram({
    name: 'tributary_request_duration_seconds',
    help: 'Request latency by command',
    labelNames: ['command'],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });
  readonly errors = new client.Counter({ name: 'tributary_request_errors_total', help: 'Error replies by code', labelNames: ['code'], registers: [this.registry] });
  readonly connections = new client.Gauge({ name: 'tributary_connections', help: 'Open client connections', registers: [this.registry] });
  readonly connectionsRejected = new client.Counter({ name: 'tributary_connections_rejected_total', help: 'Connections refused or closed by a limit', labelNames: ['reason'], registers: [this.registry] });
  readonly partitions = new client.Gauge({ name: 'tributary_partitions', help: 'Partitions hosted by this broker', registers: [this.registry] });
  readonly topics = new client.Gauge({ name: 'tributary_topics', help: 'Topics known to this broker', registers: [this.registry] });

  constructor() {
    // prom-client's default names already start with process_/nodejs_: prefix 'tributary_' gives
    // tributary_process_resident_memory_bytes (not tributary_process_process_...).
    client.collectDefaultMetrics({ register: this.registry, prefix: 'tributary_' });
  }
}
