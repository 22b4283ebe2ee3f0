/**
 * BoundHistogram (common/bound-histogram.ts), the per-request histograms: for any observations, the
 * registry renders it exactly as prom-client's own Histogram with the same name, label and buckets.
 */
import fc from 'fast-check';
import client from 'prom-client';
import { describe, expect, it } from 'vitest';
import { BoundHistogram } from 'tributary-broker/common/bound-histogram.js';

const BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

async function render(observations: Array<[string, number]>, labelName: string | undefined): Promise<[string, string]> {
  const ours = new client.Registry();
  const theirs = new client.Registry();
  const h = new BoundHistogram('t_seconds', 'help text', { buckets: BUCKETS, labelName, registry: ours });
  const p = new client.Histogram({ name: 't_seconds', help: 'help text', buckets: BUCKETS, labelNames: labelName ? [labelName] : [], registers: [theirs] });
  for (const [label, v] of observations) {
    if (labelName) {
      h.child(label).observe(v);
      p.observe({ [labelName]: label }, v);
    } else {
      h.child().observe(v);
      p.observe(v);
    }
  }
  return [await ours.metrics(), await theirs.metrics()];
}

describe('BoundHistogram', () => {
  it('renders as prom-client renders its Histogram, with a label and without', async () => {
    // Values on bucket bounds (le is inclusive), between them, above the last and zero.
    const obs: Array<[string, number]> = [
      ['queue', 0.0001],
      ['queue', 0.00011],
      ['append', 5],
      ['append', 7.5],
      ['queue', 0],
      ['fsync', 0.003],
    ];
    const [ours, theirs] = await render(obs, 'phase');
    expect(ours).toBe(theirs);
    expect(ours).toContain('t_seconds_bucket{le="0.0001",phase="queue"} 2');
    const [plain, plainTheirs] = await render(obs, undefined);
    expect(plain).toBe(plainTheirs);
    expect(plain).toContain('t_seconds_count 6');
  });

  it('matches prom-client for any observations (fast-check)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(fc.constantFrom('a', 'b', 'c'), fc.oneof(fc.constantFrom(...BUCKETS), fc.double({ min: 0, max: 10, noNaN: true }))), { maxLength: 200 }),
        async (obs) => {
          const [ours, theirs] = await render(obs, 'command');
          expect(ours).toBe(theirs);
        },
      ),
      { numRuns: 100 },
    );
  });

  it('shows no series for a label value never observed, and leaves out a non-finite value', async () => {
    const r = new client.Registry();
    const h = new BoundHistogram('u_seconds', 'h', { buckets: [1], labelName: 'phase', registry: r });
    h.child('queue').observe(0.5);
    h.child('queue').observe(Number.NaN);
    const text = await r.metrics();
    expect(text).toContain('u_seconds_count{phase="queue"} 1');
    expect(text).toContain('u_seconds_sum{phase="queue"} 0.5');
    expect(text).not.toContain('replication');
  });
});
