import { html } from 'htm/preact';
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';

/** Total lag and the lag of each partition over the time the page has been open (one point per poll). */
export function LagChart({ samples, partitions }: { samples: Array<{ at: number; lags: number[] }>; partitions: number }) {
  const el = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | undefined>(undefined);
  useEffect(() => {
    if (!el.current) return;
    const series: uPlot.Series[] = [{}, { label: 'total', stroke: '#1f6feb', width: 2 }];
    for (let p = 0; p < partitions; p++) series.push({ label: `p${p}`, stroke: `hsl(${(p * 67) % 360} 60% 50%)`, width: 1 });
    plot.current = new uPlot({ width: Math.max(320, el.current.clientWidth), height: 220, series, axes: [{}, { label: 'records' }], scales: { x: { time: true } } }, [[], ...series.slice(1).map(() => [])], el.current);
    return () => plot.current?.destroy();
  }, [partitions]);
  useEffect(() => {
    if (!plot.current) return;
    const xs = samples.map((s) => s.at / 1000);
    const total = samples.map((s) => s.lags.reduce((a, b) => a + b, 0));
    const per = Array.from({ length: partitions }, (_, p) => samples.map((s) => s.lags[p] ?? 0));
    plot.current.setData([xs, total, ...per]);
  }, [samples, partitions]);
  return html`<div class="chart" ref=${el} data-test="lag-chart"></div>`;
}
