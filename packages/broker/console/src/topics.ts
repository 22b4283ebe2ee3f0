import { html } from 'htm/preact';
import { useEffect, useState } from 'preact/hooks';
import { type Message, type TopicDetail, type TopicSummary, api, get } from './api.js';
import { toCsv } from './csv.js';
import { type View, bytes, download, show, time } from './format.js';
import { usePoll } from './hooks.js';
import { ErrorBox, PollFailure, Stale, enc } from './widgets.js';

export function Topics() {
  const { data, error, updatedAt, reload } = usePoll((signal) => get<{ topics: TopicSummary[] }>('/topics', signal), []);
  const [name, setName] = useState('');
  const [partitions, setPartitions] = useState('3');
  const [createError, setCreateError] = useState<Error | undefined>(undefined);
  const create = async (e: Event) => {
    e.preventDefault();
    try {
      await api('POST', '/topics', { name, partitions: Number(partitions) });
      setName('');
      setCreateError(undefined);
      reload();
    } catch (err) {
      setCreateError(err as Error);
    }
  };
  return html`
    <h1>Topics</h1>
    <${PollFailure} error=${error} updatedAt=${updatedAt} />
    <table data-test="topics">
      <thead><tr><th>topic</th><th>partitions</th><th>replication</th><th>under-replicated</th><th>messages</th><th>size</th></tr></thead>
      <tbody>
        ${(data?.topics ?? []).map(
          (t) => html`<tr>
            <td><a href=${`#/topics/${enc(t.name)}`}>${t.name}</a></td>
            <td>${t.partitions}</td><td>${t.replicationFactor}</td>
            <td class=${t.underReplicated > 0 ? 'bad' : ''}>${t.underReplicated}</td>
            <td>${t.records}</td><td>${bytes(t.sizeBytes)}</td>
          </tr>`,
        )}
      </tbody>
    </table>
    <form class="inline" onSubmit=${create}>
      <input placeholder="new topic" value=${name} onInput=${(e: Event) => setName((e.target as HTMLInputElement).value)} required />
      <input type="number" min="1" value=${partitions} onInput=${(e: Event) => setPartitions((e.target as HTMLInputElement).value)} />
      <button>Create</button>
    </form>
    ${createError && html`<${ErrorBox} error=${createError} />`}
  `;
}

export function Messages({ messages, view }: { messages: Message[]; view: View }) {
  if (messages.length === 0) return html`<p class="muted" data-test="no-messages">no messages</p>`;
  return html`
    <table class="messages" data-test="messages">
      <thead><tr><th>partition</th><th>offset</th><th>time</th><th>key</th><th>value</th><th>headers</th></tr></thead>
      <tbody>
        ${messages.map(
          (m) => html`<tr data-offset=${m.offset}>
            <td>${m.partition}</td><td>${m.offset}</td><td>${time(m.timestamp)}</td>
            <td><pre>${m.key === null ? '' : show(m.key, m.keyEncoding, view === 'json' ? 'text' : view)}</pre></td>
            <td><pre>${show(m.value, m.valueEncoding, view)}</pre></td>
            <td>
              ${m.headers.map((h) => html`<div>${h.key}=${show(h.value, h.encoding, view === 'json' ? 'text' : view)}</div>`)}
              ${m.headersOmitted ? html`<div class="muted">and ${m.headersOmitted} more headers, not shown</div>` : null}
            </td>
          </tr>`,
        )}
      </tbody>
    </table>`;
}

function Browser({ topic, detail }: { topic: string; detail: TopicDetail }) {
  const [partition, setPartition] = useState(0);
  const [offset, setOffset] = useState('');
  const [limit, setLimit] = useState('50');
  const [view, setView] = useState<View>('json');
  const [messages, setMessages] = useState<Message[]>([]);
  const [error, setError] = useState<Error | undefined>(undefined);
  const [search, setSearch] = useState({ key: '', value: '', header: '' });
  const [searchInfo, setSearchInfo] = useState<string>('');
  const load = async () => {
    try {
      const p = detail.partitions.find((x) => x.partition === partition);
      // Default: the newest `limit` messages of the partition.
      const from = offset === '' ? Math.max(p?.earliest ?? 0, (p?.lastStable ?? 0) - Number(limit)) : Number(offset);
      const r = await get<{ messages: Message[] }>(`/topics/${enc(topic)}/messages?partition=${partition}&offset=${from}&limit=${Number(limit)}`);
      setMessages(r.messages);
      setSearchInfo('');
      setError(undefined);
    } catch (err) {
      setError(err as Error);
    }
  };
  const runSearch = async (e: Event) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(search)) if (v !== '') q.set(k, v);
    try {
      const r = await get<{ messages: Message[]; scanned: number; complete: boolean }>(`/topics/${enc(topic)}/search?${q}`);
      setMessages(r.messages);
      setSearchInfo(`${r.messages.length} found in ${r.scanned} scanned${r.complete ? '' : ' (scan limit reached)'}`);
      setError(undefined);
    } catch (err) {
      setError(err as Error);
    }
  };
  useEffect(() => {
    void load();
  }, [topic, partition]);
  const set = (f: (v: string) => void) => (e: Event) => f((e.target as HTMLInputElement).value);
  return html`
    <h2>Messages</h2>
    <form class="inline" onSubmit=${(e: Event) => (e.preventDefault(), void load())}>
      <label>partition <select value=${partition} onChange=${(e: Event) => setPartition(Number((e.target as HTMLSelectElement).value))}>
        ${detail.partitions.map((p) => html`<option value=${p.partition}>${p.partition}</option>`)}
      </select></label>
      <label>from offset <input name="offset" type="number" min="0" placeholder="newest" value=${offset} onInput=${set(setOffset)} /></label>
      <label>limit <input type="number" min="1" max="1000" value=${limit} onInput=${set(setLimit)} /></label>
      <button data-test="load">Load</button>
      <span class="views">${(['json', 'text', 'hex'] as const).map((v) => html`<button type="button" class=${view === v ? 'on' : ''} onClick=${() => setView(v)}>${v}</button>`)}</span>
      <button type="button" onClick=${() => download(`${topic}.json`, 'application/json', JSON.stringify(messages, null, 2))}>Export JSON</button>
      <button type="button" onClick=${() => download(`${topic}.csv`, 'text/csv;charset=utf-8', toCsv(messages))}>Export CSV</button>
    </form>
    <form class="inline" onSubmit=${runSearch}>
      <input placeholder="key equals" value=${search.key} onInput=${set((v) => setSearch({ ...search, key: v }))} />
      <input placeholder="value contains" name="search-value" value=${search.value} onInput=${set((v) => setSearch({ ...search, value: v }))} />
      <input placeholder="header name[=value]" value=${search.header} onInput=${set((v) => setSearch({ ...search, header: v }))} />
      <button>Search</button> <span class="muted" data-test="search-info">${searchInfo}</span>
    </form>
    ${error && html`<${ErrorBox} error=${error} />`}
    <${Messages} messages=${messages} view=${view} />
  `;
}

function Produce({ topic, onSent }: { topic: string; onSent: () => void }) {
  const [key, setKey] = useState('');
  const [value, setValue] = useState('');
  const [partition, setPartition] = useState('');
  const [result, setResult] = useState<string>('');
  const [error, setError] = useState<Error | undefined>(undefined);
  const send = async (e: Event) => {
    e.preventDefault();
    try {
      const r = await api<{ partition: number; offset: number }>('POST', `/topics/${enc(topic)}/messages`, {
        value,
        ...(key === '' ? {} : { key }),
        ...(partition === '' ? {} : { partition: Number(partition) }),
      });
      setResult(`written to partition ${r.partition} at offset ${r.offset}`);
      setError(undefined);
      onSent();
    } catch (err) {
      setError(err as Error);
    }
  };
  const set = (f: (v: string) => void) => (e: Event) => f((e.target as HTMLInputElement).value);
  return html`
    <h2>Produce</h2>
    <form class="inline" onSubmit=${send} data-test="produce">
      <input placeholder="key (optional)" value=${key} onInput=${set(setKey)} />
      <input placeholder="value" name="value" value=${value} onInput=${set(setValue)} required />
      <input type="number" min="0" placeholder="partition (optional)" value=${partition} onInput=${set(setPartition)} />
      <button>Send</button> <span class="muted" data-test="produce-result">${result}</span>
    </form>
    ${error && html`<${ErrorBox} error=${error} />`}`;
}

function AddPartitions({ topic, current, onDone }: { topic: string; current: number; onDone: () => void }) {
  const [count, setCount] = useState(String(current + 1));
  const [error, setError] = useState<Error | undefined>(undefined);
  const submit = async (e: Event) => {
    e.preventDefault();
    try {
      await api('POST', `/topics/${enc(topic)}/partitions`, { partitions: Number(count) });
      setError(undefined);
      onDone();
    } catch (err) {
      setError(err as Error);
    }
  };
  return html`
    <form class="inline" onSubmit=${submit} data-test="add-partitions">
      <label>partitions <input type="number" min=${current + 1} value=${count} onInput=${(e: Event) => setCount((e.target as HTMLInputElement).value)} /></label>
      <button>Add partitions</button> <span class="muted">keys may map to other partitions afterwards</span>
    </form>
    ${error && html`<${ErrorBox} error=${error} />`}`;
}

export function Topic({ topic }: { topic: string }) {
  const { data, error, updatedAt, reload } = usePoll((signal) => get<TopicDetail>(`/topics/${enc(topic)}`, signal), [topic], 5000);
  if (error && !data) return html`<h1>${topic}</h1><${ErrorBox} error=${error} />`;
  if (!data) return html`<p class="muted">loading…</p>`;
  // A failed poll keeps the page (typed input, loaded messages) and says that it may be out of date.
  return html`
    <h1>${topic}</h1>
    <${Stale} error=${error} updatedAt=${updatedAt} />
    <p class="muted">replication ${data.replicationFactor} · retention ${data.retentionHours < 0 ? 'unlimited' : `${data.retentionHours} h`} · ${data.cleanupPolicy}${data.cleanupPolicy === 'compact' && data.deleteRetentionMs !== null ? ` (tombstones ${data.deleteRetentionMs} ms)` : ''} · <a href=${`#/topics/${enc(topic)}/tail`}>live tail</a></p>
    <table data-test="partitions">
      <thead><tr><th>partition</th><th>leader</th><th>epoch</th><th>replicas</th><th>ISR</th><th>earliest</th><th>high watermark</th><th>last stable</th><th>size</th></tr></thead>
      <tbody>
        ${data.partitions.map(
          (p) => html`<tr>
            <td>${p.partition}</td><td>${p.leader ?? 'none'}</td><td>${p.leaderEpoch}</td><td>${p.replicas.join(',')}</td>
            <td class=${p.isr.length < p.replicas.length ? 'bad' : ''}>${p.isr.join(',')}</td>
            <td>${p.earliest}</td><td>${p.highWatermark}</td><td>${p.lastStable}</td><td>${bytes(p.sizeBytes)}</td>
          </tr>`,
        )}
      </tbody>
    </table>
    <${AddPartitions} topic=${topic} current=${data.partitions.length} onDone=${reload} />
    <${Produce} topic=${topic} onSent=${reload} />
    <${Browser} topic=${topic} detail=${data} />`;
}
