import { html } from 'htm/preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, type Message, events } from './api.js';
import { Messages } from './topics.js';
import { ErrorBox, enc } from './widgets.js';

/** Back-off between reconnects: doubles from the first to the last, back to the first once connected. */
export const FIRST_RETRY_MS = 1000;
export const MAX_RETRY_MS = 30_000;

export type TailStatus =
  | { state: 'connecting' }
  | { state: 'live' }
  | { state: 'disconnected'; reason: Error; retryInMs: number }
  | { state: 'stopped'; reason?: Error };

/** An answer worth asking again (the broker restarting, a proxy, too many tails); any other 4xx stops the tail. */
const retriable = (status: number) => status === 408 || status === 429 || status >= 500;

/** Resolves true after `ms`, false as soon as `signal` aborts. */
function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    const done = (ok: boolean) => {
      clearTimeout(timer);
      signal.removeEventListener('abort', gone);
      resolve(ok);
    };
    const gone = () => done(false);
    const timer = setTimeout(() => done(true), ms);
    signal.addEventListener('abort', gone);
  });
}

/** The broker's `event: reset` (docs/http-api.md, "Live tail"): `requested` is gone, the tail reads from `position`. */
interface Reset {
  partition: number;
  requested: number;
  position: number;
  earliest: number;
  latest: number;
}

/** What the page says of a reset: messages skipped (retention) or shown but gone (records lost). */
export function resetNotice(r: Reset): string {
  if (r.requested < r.earliest) return `partition ${r.partition}: offsets ${r.requested} to ${r.earliest - 1} were deleted (retention) before the tail showed them; it goes on from offset ${r.position}`;
  return `partition ${r.partition}: the broker no longer has offset ${r.requested} (its log ends at ${r.latest}: records were lost); it goes on from offset ${r.position}, and messages shown from there on may be gone`;
}

/**
 * Follows the topic's tail until `signal` aborts: a stream that breaks (or that could not be opened) is
 * opened again after a back-off, resuming after the last message shown of each partition (`next`: the
 * next offset of each partition, kept by the caller across runs), so that none is shown twice or
 * skipped. A 4xx answer but 408 and 429 (the topic deleted, a permission taken away) stops it. A
 * partition moved on by the broker (a reset) or added to the topic is followed from where it says.
 */
export async function follow(
  topic: string,
  next: Map<number, number>,
  on: { status: (s: TailStatus) => void; message: (m: Message) => void; notice: (text: string) => void },
  signal: AbortSignal,
): Promise<void> {
  let delay = FIRST_RETRY_MS;
  let reason: Error | undefined;
  while (!signal.aborted) {
    on.status(reason ? { state: 'disconnected', reason, retryInMs: 0 } : { state: 'connecting' });
    const from = [...next].map(([p, offset]) => `${p}:${offset}`).join(',');
    let streamError: Error | undefined;
    try {
      await events(
        `/topics/${enc(topic)}/tail${from === '' ? '' : `?${new URLSearchParams({ from })}`}`,
        (event, data) => {
          if (event === 'ready') {
            // Where the broker starts each partition: past what was shown, or further if retention removed it.
            for (const [p, offset] of Object.entries((data as { positions: Record<string, number> }).positions)) next.set(Number(p), Math.max(next.get(Number(p)) ?? 0, offset));
            delay = FIRST_RETRY_MS;
            on.status({ state: 'live' });
          } else if (event === 'message') {
            const m = data as Message;
            if (m.offset < (next.get(m.partition) ?? 0)) return;
            next.set(m.partition, m.offset + 1);
            on.message(m);
          } else if (event === 'reset') {
            // Below what was shown when the broker lost records: those offsets now hold new messages.
            const r = data as Reset;
            next.set(r.partition, r.position);
            on.notice(resetNotice(r));
          } else if (event === 'partitions') {
            for (const [p, offset] of Object.entries((data as { added: Record<string, number> }).added)) {
              if (!next.has(Number(p))) next.set(Number(p), offset);
              on.notice(`partition ${p} was added to the topic: shown from its start`);
            }
          } else if (event === 'error') {
            const e = data as { code: string; message: string };
            streamError = new ApiError(503, e.code, e.message);
          }
        },
        signal,
      );
      reason = streamError ?? new Error('the broker closed the stream');
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof ApiError && !retriable(err.status)) return on.status({ state: 'stopped', reason: err });
      reason = err as Error;
    }
    if (signal.aborted) return;
    on.status({ state: 'disconnected', reason, retryInMs: delay });
    if (!(await pause(delay, signal))) return;
    delay = Math.min(delay * 2, MAX_RETRY_MS);
  }
}

const describe = (e: Error) => `${e instanceof ApiError ? `${e.status} ${e.code}: ` : ''}${e.message}`;

export function Tail({ topic }: { topic: string }) {
  const [messages, setMessages] = useState<Message[]>([]);
  const [status, setStatus] = useState<TailStatus>({ state: 'connecting' });
  const [paused, setPaused] = useState(false);
  const [runs, setRuns] = useState(0);
  const [notices, setNotices] = useState<string[]>([]);
  // The next offset of each partition, past the last message shown: where a reconnect or a resume starts.
  const next = useRef(new Map<number, number>()).current;
  useEffect(() => {
    if (paused) return setStatus({ state: 'stopped' });
    const ac = new AbortController();
    const notice = (text: string) => setNotices((ns) => [...ns, text].slice(-5));
    void follow(topic, next, { status: setStatus, message: (m) => setMessages((ms) => [m, ...ms].slice(0, 500)), notice }, ac.signal);
    return () => ac.abort();
  }, [topic, paused, runs]);
  const button =
    status.state === 'stopped'
      ? html`<button type="button" data-test="tail-resume" onClick=${() => (setPaused(false), setRuns((r) => r + 1))}>Resume</button>`
      : html`<button type="button" data-test="tail-stop" onClick=${() => setPaused(true)}>Stop</button>`;
  return html`
    <h1>Live tail: ${topic}</h1>
    <p><a href=${`#/topics/${enc(topic)}`}>back to the topic</a> · <span data-test="tail-state">${status.state}</span> · newest first · ${button}</p>
    ${
      status.state === 'disconnected' &&
      html`<div class="stale" role="status" data-test="tail-disconnected">
        disconnected: ${describe(status.reason)} · ${status.retryInMs > 0 ? `reconnecting in ${status.retryInMs / 1000} s` : 'reconnecting…'} · the tail resumes after the messages shown
      </div>`
    }
    ${notices.map((n) => html`<div class="stale" role="status" data-test="tail-notice">${n}</div>`)}
    ${status.state === 'stopped' && status.reason && html`<${ErrorBox} error=${status.reason} prefix="the tail stopped: " />`}
    <${Messages} messages=${messages} view="text" />`;
}
