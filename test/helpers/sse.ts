/** Server-sent events for tests of the HTTP API's streams (docs/http-api.md). */

/** One event of a stream: its `event:` name and its `data:` line parsed as JSON. */
// biome-ignore lint/suspicious/noExplicitAny: event data of many shapes, each asserted field by field
export type SseEvent = { event: string; data: any };

/** A `data` listener for a stream read as UTF-8: each complete event (ends with a blank line) goes to `got`. */
export function sseReader(got: SseEvent[]): (chunk: string) => void {
  let buf = '';
  return (chunk) => {
    buf += chunk;
    for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const ev = /^event: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (ev && data) got.push({ event: ev, data: JSON.parse(data) });
    }
  };
}
