/**
 * The HTTP API's search (docs/http-api.md, "Messages") against a real broker: `limit` stops the scan at
 * the first match it cannot return (`complete: false`, `next` there), and following `next` as
 * `from=partition:offset` pairs, page after page, returns every match exactly once, over partitions.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrokerProcess } from '../helpers/launcher.js';

interface SearchAnswer {
  scanned: number;
  complete: boolean;
  next: Record<string, number>;
  messages: Array<{ partition: number; offset: number; value: string }>;
}

describe('HTTP search paging', () => {
  let broker: BrokerProcess;
  let base: string;

  const search = async (query: string): Promise<{ status: number; body: SearchAnswer & { error?: { code: string } } }> => {
    const r = await fetch(`${base}/api/v1/topics/pages/search?${query}`);
    return { status: r.status, body: (await r.json()) as SearchAnswer & { error?: { code: string } } };
  };
  const at = (b: SearchAnswer) => b.messages.map((m) => `${m.partition}:${m.offset}`);
  const fromOf = (next: Record<string, number>) => Object.entries(next).map(([p, o]) => `${p}:${o}`).join(',');

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1'] });
    base = `http://127.0.0.1:${broker.healthPort}`;
    const post = (path: string, body: unknown) => fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    expect((await post('/api/v1/topics', { name: 'pages', partitions: 2 })).status).toBe(201);
    // partition 0: hit hit hit miss; partition 1: hit miss hit
    for (const [partition, value] of [[0, 'hit-a'], [0, 'hit-b'], [0, 'hit-c'], [0, 'miss'], [1, 'hit-d'], [1, 'miss'], [1, 'hit-e']] as const) {
      expect((await post('/api/v1/topics/pages/messages', { partition, value })).status).toBe(201);
    }
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('limit reached inside a read: the scan stops at the next match, complete false, and next resumes there', async () => {
    const first = await search('value=hit&partition=0&limit=1');
    expect(first.status).toBe(200);
    expect([at(first.body), first.body.complete, first.body.next]).toEqual([['0:0'], false, { 0: 1 }]);
    const second = await search(`value=hit&partition=0&limit=1&from=${fromOf(first.body.next)}`);
    expect([at(second.body), second.body.complete, second.body.next]).toEqual([['0:1'], false, { 0: 2 }]);
    // The last match: the rest of the partition holds none, so the scan went to its end.
    const third = await search(`value=hit&partition=0&limit=1&from=${fromOf(second.body.next)}`);
    expect([at(third.body), third.body.complete, third.body.next]).toEqual([['0:2'], true, { 0: 4 }]);
  });

  it('following next over partitions returns every match once; next names every partition', async () => {
    const seen: string[] = [];
    let query = 'value=hit&limit=2';
    for (let page = 0; ; page++) {
      expect(page).toBeLessThan(10);
      const r = await search(query);
      expect(r.status).toBe(200);
      expect(Object.keys(r.body.next).sort()).toEqual(['0', '1']);
      seen.push(...at(r.body));
      if (r.body.complete) break;
      query = `value=hit&limit=2&from=${fromOf(r.body.next)}`;
    }
    expect(seen).toEqual(['0:0', '0:1', '0:2', '1:0', '1:2']);
  });

  it('from: one offset for every partition still works; a partition the search does not read, or a malformed from, is 400', async () => {
    const r = await search('value=hit&from=2');
    expect([at(r.body), r.body.complete, r.body.next]).toEqual([['0:2', '1:2'], true, { 0: 4, 1: 3 }]);
    const other = await search('value=hit&partition=0&from=1:0');
    expect([other.status, other.body.error?.code]).toEqual([400, 'invalid_parameter']);
    const bad = await search('value=hit&from=0:1,x');
    expect([bad.status, bad.body.error?.code]).toEqual([400, 'invalid_parameter']);
  });
});
