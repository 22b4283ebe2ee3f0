import { html } from 'htm/preact';
import { useRef, useState } from 'preact/hooks';
import { type GroupDetail, type GroupSummary, api, get } from './api.js';
import { time } from './format.js';
import { usePoll } from './hooks.js';
import { LagChart } from './lag-chart.js';
import { ErrorBox, PollFailure, Stale, enc } from './widgets.js';

export function Groups() {
  const { data, error, updatedAt } = usePoll((signal) => get<{ groups: GroupSummary[] }>('/groups', signal), []);
  return html`
    <h1>Consumer groups</h1>
    <${PollFailure} error=${error} updatedAt=${updatedAt} />
    <table data-test="groups">
      <thead><tr><th>group</th><th>topic</th><th>state</th><th>generation</th><th>members</th><th>lag</th></tr></thead>
      <tbody>
        ${(data?.groups ?? []).map(
          (g) => html`<tr>
            <td><a href=${`#/groups/${enc(g.group)}`}>${g.group}</a></td><td>${g.topic}</td><td>${g.state}</td>
            <td>${g.generation}</td><td>${g.members}</td><td>${g.totalLag}</td>
          </tr>`,
        )}
      </tbody>
    </table>`;
}

type Preview = { offsets: Array<{ partition: number; offset: number; lag: number }>; dryRun: boolean };

function Reset({ group, topic, partitions, onDone }: { group: string; topic: string; partitions: number; onDone: () => void }) {
  const [partition, setPartition] = useState('');
  const [to, setTo] = useState('earliest');
  const [value, setValue] = useState('');
  const [preview, setPreview] = useState<Preview | undefined>(undefined);
  // What the preview shown was asked with: Apply sends exactly that, never a form changed since.
  const [previewed, setPreviewed] = useState<Record<string, unknown> | undefined>(undefined);
  const [error, setError] = useState<Error | undefined>(undefined);
  const body = () => ({
    topic,
    to,
    ...(partition === '' ? {} : { partition: Number(partition) }),
    ...(to === 'offset' ? { offset: Number(value) } : {}),
    ...(to === 'timestamp' ? { timestamp: Number.isNaN(Date.parse(value)) ? Number(value) : Date.parse(value) } : {}),
  });
  /** A change of the form: the preview on screen no longer says what Apply would do. */
  const edited = (set: (v: string) => void) => (e: Event) => {
    set((e.target as HTMLInputElement | HTMLSelectElement).value);
    setPreview(undefined);
    setPreviewed(undefined);
  };
  const run = async (request: Record<string, unknown>, dryRun: boolean) => {
    try {
      setPreview(await api<Preview>('POST', `/groups/${enc(group)}/reset-offsets`, { ...request, dryRun }));
      setPreviewed(dryRun ? request : undefined);
      setError(undefined);
      if (!dryRun) onDone();
    } catch (err) {
      setError(err as Error);
    }
  };
  return html`
    <h2>Reset offsets</h2>
    <p class="muted">Works on a running group: its members are fenced for these partitions, rejoin and resume at the new offsets.</p>
    <form class="inline" onSubmit=${(e: Event) => (e.preventDefault(), void run(body(), true))} data-test="reset">
      <label>partition <select name="partition" value=${partition} onChange=${edited(setPartition)}>
        <option value="">all</option>
        ${Array.from({ length: partitions }, (_, p) => html`<option value=${p}>${p}</option>`)}
      </select></label>
      <label>to <select name="to" value=${to} onChange=${edited(setTo)}>
        ${['earliest', 'latest', 'offset', 'timestamp'].map((t) => html`<option value=${t}>${t}</option>`)}
      </select></label>
      ${(to === 'offset' || to === 'timestamp') && html`<input name="reset-value" placeholder=${to === 'offset' ? 'offset' : 'ms or ISO time'} value=${value} onInput=${edited(setValue)} required />`}
      <button data-test="preview">Preview</button>
      <button type="button" data-test="apply" disabled=${!previewed} onClick=${() => previewed && void run(previewed, false)}>Apply</button>
    </form>
    ${error && html`<${ErrorBox} error=${error} />`}
    ${
      preview &&
      html`<table data-test="reset-preview">
        <thead><tr><th>partition</th><th>new offset</th><th>new lag</th></tr></thead>
        <tbody>${preview.offsets.map((o) => html`<tr><td>${o.partition}</td><td>${o.offset}</td><td>${o.lag}</td></tr>`)}</tbody>
        <caption>${preview.dryRun ? 'preview: nothing changed yet' : 'applied'}</caption>
      </table>`
    }`;
}

export function Group({ group }: { group: string }) {
  const samples = useRef<Array<{ at: number; lags: number[] }>>([]);
  const { data, error, updatedAt, reload } = usePoll(async (signal) => {
    const g = await get<GroupDetail>(`/groups/${enc(group)}`, signal);
    samples.current = [...samples.current, { at: Date.now(), lags: g.offsets.map((o) => o.lag ?? 0) }].slice(-300);
    return g;
  }, [group]);
  if (error && !data) return html`<h1>${group}</h1><${ErrorBox} error=${error} />`;
  if (!data) return html`<p class="muted">loading…</p>`;
  const g = data;
  // A failed poll keeps the last figures on screen, marked as stale.
  return html`
    <h1>${g.group}</h1>
    <${Stale} error=${error} updatedAt=${updatedAt} />
    <p class="muted">topic <a href=${`#/topics/${enc(g.topic)}`}>${g.topic}</a> · <span data-test="state">${g.state}</span> · generation <span data-test="generation">${g.generation}</span> · ${g.assignor} · total lag <span data-test="total-lag">${g.totalLag}</span></p>
    <h2>Lag by partition</h2>
    <table data-test="offsets">
      <thead><tr><th>partition</th><th>committed</th><th>log end</th><th>lag</th><th>owner</th></tr></thead>
      <tbody>
        ${g.offsets.map(
          (o) => html`<tr data-partition=${o.partition}>
            <td>${o.partition}</td><td class="committed">${o.committed ?? '-'}</td><td class="log-end">${o.logEnd}</td><td class="lag">${o.lag ?? '-'}</td><td>${o.owner ?? '-'}</td>
          </tr>`,
        )}
      </tbody>
    </table>
    <${LagChart} samples=${samples.current} partitions=${g.offsets.length} />
    <h2>Members</h2>
    <table data-test="members">
      <thead><tr><th>member</th><th>client</th><th>host</th><th>generation</th><th>partitions</th><th>pending</th><th>heartbeat</th></tr></thead>
      <tbody>
        ${g.members.map(
          (m) => html`<tr><td>${m.memberId}</td><td>${m.clientId}</td><td>${m.host}</td><td>${m.generation}</td><td>${m.assignments.join(',')}</td><td>${m.pending.join(',')}</td><td>${m.lastHeartbeatMsAgo} ms ago</td></tr>`,
        )}
      </tbody>
    </table>
    <h2>Rebalances</h2>
    <ol class="timeline" data-test="timeline">
      ${[...g.history].reverse().map(
        (h) => html`<li>
          <b>generation ${h.generation}</b> · ${time(h.at)} · ${h.rebalanceMs === null ? 'in progress' : `took ${h.rebalanceMs} ms`}
          ${h.moved && h.moved.length > 0 ? html` · moved ${h.moved.join(',')}` : ''}
          <ul>${h.reasons.map((r) => html`<li class=${`cause-${r.cause}`}>${r.cause} ${r.member}${r.missedByMs === undefined ? '' : ` (missed by ${r.missedByMs} ms)`}</li>`)}</ul>
        </li>`,
      )}
    </ol>
    <${Reset} group=${g.group} topic=${g.topic} partitions=${g.offsets.length} onDone=${reload} />`;
}
