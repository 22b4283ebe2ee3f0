import { html } from 'htm/preact';
import { useRef } from 'preact/hooks';
import { type Cluster, type TopicSummary, get } from './api.js';
import { usePoll } from './hooks.js';
import { ErrorBox, Stale } from './widgets.js';

/** Brokers, controller, partition health and message rates (from the topics' record counts between polls). */
export function Overview() {
  const last = useRef<{ at: number; records: number } | undefined>(undefined);
  const rate = useRef<number | undefined>(undefined);
  const { data, error, updatedAt } = usePoll(async (signal) => {
    const [cluster, topics] = await Promise.all([get<Cluster>('/cluster', signal), get<{ topics: TopicSummary[] }>('/topics', signal)]);
    const records = topics.topics.reduce((n, t) => n + t.records, 0);
    const now = Date.now();
    if (last.current && now > last.current.at) rate.current = ((records - last.current.records) * 1000) / (now - last.current.at);
    last.current = { at: now, records };
    return { cluster, topics: topics.topics, records };
  }, []);
  if (error && !data) return html`<${ErrorBox} error=${error} />`;
  if (!data) return html`<p class="muted">loading…</p>`;
  const { cluster, topics, records } = data;
  // A failed poll keeps the last figures on screen, marked as stale.
  return html`
    <h1>Overview</h1>
    <${Stale} error=${error} updatedAt=${updatedAt} />
    <div class="cards">
      <div class="card" data-test="brokers"><div class="big">${cluster.brokers.length}</div>broker${cluster.brokers.length === 1 ? '' : 's'} (${cluster.mode})</div>
      <div class="card"><div class="big">${cluster.controller ?? '-'}</div>controller</div>
      <div class="card"><div class="big">${cluster.partitions}</div>partitions</div>
      <div class=${`card ${cluster.underReplicated > 0 ? 'bad' : ''}`} data-test="under-replicated"><div class="big">${cluster.underReplicated}</div>under-replicated</div>
      <div class=${`card ${cluster.leaderless > 0 ? 'bad' : ''}`} data-test="leaderless"><div class="big">${cluster.leaderless}</div>leaderless</div>
      <div class="card"><div class="big">${topics.length}</div>topics</div>
      <div class="card" data-test="rate"><div class="big">${rate.current === undefined ? '…' : rate.current.toFixed(1)}</div>messages/s (${records} stored)</div>
    </div>
    <h2>Brokers</h2>
    <table>
      <thead><tr><th>id</th><th>address</th><th>role</th></tr></thead>
      <tbody>
        ${cluster.brokers.map((b) => html`<tr><td>${b.id}</td><td>${b.address ?? `${b.host}:${b.port}`}</td><td>${b.id === cluster.controller ? 'controller' : ''}</td></tr>`)}
      </tbody>
    </table>
  `;
}
