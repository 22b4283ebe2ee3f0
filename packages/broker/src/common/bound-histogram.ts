/**
 * A histogram with at most one label whose values are bound once (`child(value)`), for the metrics observed
 * on every request (docs/operations.md, "Metrics"). prom-client's `observe` hashes and validates its label
 * object on every call, about 0.8 µs; a produce or a poll observed four to five of them, about 5 % of the
 * broker's main thread in a W2 profile (bench latency). A child's observe is a bucket search and two adds.
 * The registry renders it exactly as it renders prom-client's own histograms (bound-histogram.test.ts).
 */
import type client from 'prom-client';

export interface HistogramChild {
  observe(value: number): void;
}

class Child implements HistogramChild {
  /** Per bucket (not cumulative), the last one for values above every bound. */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(private readonly bounds: readonly number[]) {
    this.counts = new Float64Array(bounds.length + 1);
  }

  observe(value: number): void {
    // Our own timings: a non-finite one (a clock gone wrong) is left out rather than poisoning the sum.
    if (!Number.isFinite(value)) return;
    const b = this.bounds;
    let i = 0;
    while (i < b.length && value > b[i]!) i++;
    this.counts[i]!++;
    this.sum += value;
    this.count++;
  }
}

export class BoundHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private readonly bounds: number[];
  private readonly labelName: string | undefined;
  private readonly children = new Map<string, Child>();

  constructor(
    readonly name: string,
    readonly help: string,
    opts: { buckets: number[]; labelName?: string; registry: client.Registry },
  ) {
    this.bounds = [...opts.buckets].sort((a, b) => a - b);
    this.labelName = opts.labelName;
    // The registry needs only name, type and get(); prom-client types its argument as one of its own classes.
    opts.registry.registerMetric(this as unknown as client.Metric);
  }

  /** The child for a label value (created on first use; '' for a histogram without a label). */
  child(value = ''): HistogramChild {
    let c = this.children.get(value);
    if (!c) {
      c = new Child(this.bounds);
      this.children.set(value, c);
    }
    return c;
  }

  reset(): void {
    this.children.clear();
  }

  /** prom-client's metric shape (`Histogram.get()`): per child, cumulative buckets, then _sum and _count. */
  async get(): Promise<{ name: string; help: string; type: 'histogram'; values: client.MetricValueWithName<string>[]; aggregator: 'sum' }> {
    const values: client.MetricValueWithName<string>[] = [];
    for (const [labelValue, c] of this.children) {
      const labels: Record<string, string | number> = this.labelName === undefined ? {} : { [this.labelName]: labelValue };
      let cumulative = 0;
      for (let i = 0; i <= this.bounds.length; i++) {
        cumulative += c.counts[i]!;
        values.push({ value: cumulative, metricName: `${this.name}_bucket`, labels: { le: i < this.bounds.length ? this.bounds[i]! : '+Inf', ...labels } });
      }
      values.push({ value: c.sum, metricName: `${this.name}_sum`, labels: { ...labels } });
      values.push({ value: c.count, metricName: `${this.name}_count`, labels: { ...labels } });
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }
}
