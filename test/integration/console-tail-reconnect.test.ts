/**
 * The console's live tail across a broken stream, in a real headless Chromium (as console.test.ts)
 * against a broker of its own that it restarts on the same ports and data directory: the status says
 * disconnected (not live) while the broker is away, the tail reconnects by itself and resumes after the
 * last message it showed of each partition, so that every message shows exactly once and in order.
 * Stopping the tail stops the reconnects; resuming it shows what was produced meanwhile. A topic deleted
 * under a tail stops it with the 404 shown. A partition added, or a position gone, is said in a notice.
 */
import path from 'node:path';
import type { Browser, Page } from 'puppeteer-core';
import { SHOTS, launchChromium } from '../helpers/browser.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrokerProcess } from '../helpers/launcher.js';
import { freePort, until } from '../helpers/util.js';


async function produce(port: number, topic: string, value: string, partition: number): Promise<void> {
  const res = await fetch(`http://127.0.0.1:${port}/api/v1/topics/${topic}/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ value, partition }),
  });
  expect(res.status, `producing ${value}`).toBe(201);
}

/** The tail's rows as the user sees them, top (newest) first: partition, offset and value. */
async function rows(page: Page): Promise<Array<{ partition: number; offset: number; value: string }>> {
  if ((await page.$('[data-test=messages]')) === null) return [];
  return page.$$eval('[data-test=messages] tbody tr', (trs) =>
    trs.map((tr) => {
      const td = tr.querySelectorAll('td');
      return { partition: Number(td[0]!.textContent), offset: Number(td[1]!.textContent), value: td[4]!.textContent ?? '' };
    }),
  );
}

const state = (page: Page) => page.$eval('[data-test=tail-state]', (el) => el.textContent ?? '');

describe('web console, live tail across a broker restart', () => {
  let browser: Browser;
  let broker: BrokerProcess;
  let healthPort: number;

  beforeAll(async () => {
    healthPort = await freePort();
    broker = await BrokerProcess.start({ args: ['--port', String(await freePort()), '--health-port', String(healthPort), '--offsets-topic-partitions', '1'] });
    browser = await launchChromium();
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await broker?.dispose();
  });

  it('says disconnected while the broker is away, reconnects and shows every message once, in order; stop and resume', async () => {
    const res = await fetch(`http://127.0.0.1:${healthPort}/api/v1/topics`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'restarted', partitions: 2 }),
    });
    expect(res.status).toBe(201);
    await produce(healthPort, 'restarted', 'before-the-tail', 0);
    const page = await browser.newPage();
    const problems: string[] = [];
    const tailRequests: string[] = [];
    page.on('console', (m) => {
      // Chromium logs each failed request as a console error: those of the tail are on purpose.
      if (m.type() === 'error' && !(m.location().url ?? '').includes('/tail')) problems.push(`console: ${m.text()} ${m.location().url ?? ''}`);
    });
    page.on('pageerror', (e) => problems.push(`exception: ${(e as Error).message}`));
    page.on('request', (r) => {
      if (r.url().includes('/tail')) tailRequests.push(r.url());
    });
    // The tail's requests fail on purpose while the broker is down; nothing else may.
    page.on('requestfailed', (r) => {
      if (!r.url().includes('/tail')) problems.push(`failed: ${r.url()} ${r.failure()?.errorText}`);
    });
    page.on('response', (r) => {
      if (r.status() >= 400) problems.push(`${r.status()}: ${r.url()}`);
    });
    try {
      await page.goto(`http://127.0.0.1:${healthPort}/ui/#/topics/restarted/tail`, { waitUntil: 'domcontentloaded' });
      await until(async () => (await page.$('[data-test=tail-state]')) !== null && (await state(page)) === 'live', 15_000, 'the tail to be live');
      // Every status the page shows from now on, however briefly.
      await page.$eval('[data-test=tail-state]', (el) => {
        const page = globalThis as unknown as { tailStates: string[]; MutationObserver: new (f: () => void) => { observe(el: unknown, o: object): void } };
        const seen: string[] = [];
        page.tailStates = seen;
        new page.MutationObserver(() => seen.push(el.textContent ?? '')).observe(el, { childList: true, characterData: true, subtree: true });
      });
      const states = () => page.evaluate(() => (globalThis as unknown as { tailStates: string[] }).tailStates.slice());

      const sent: string[] = [];
      const send = async (value: string, partition: number) => {
        await produce(healthPort, 'restarted', value, partition);
        sent.push(value);
      };
      for (let i = 0; i < 4; i++) await send(`a${i}`, i % 2);
      await until(async () => (await rows(page)).length >= 4, 10_000, 'the first messages in the tail');

      await broker.restart();
      expect(broker.healthPort).toBe(healthPort);
      // Produced while the page is still away: the reconnect must start before these, not at the end.
      for (let i = 0; i < 4; i++) await send(`b${i}`, i % 2);
      await until(async () => (await state(page)) === 'live', 30_000, 'the tail live again');
      for (let i = 0; i < 4; i++) await send(`c${i}`, i % 2);
      await until(async () => (await rows(page)).length >= sent.length, 10_000, 'the messages produced after the restart');

      expect((await states()).some((s) => s === 'disconnected')).toBe(true);
      expect(await state(page)).toBe('live');
      const shown = await rows(page);
      expect(shown.map((r) => r.value).sort()).toEqual([...sent].sort());
      for (const p of [0, 1]) {
        const mine = shown.filter((r) => r.partition === p).reverse();
        expect(mine.map((r) => r.value)).toEqual(sent.filter((v) => Number(v.slice(1)) % 2 === p));
        expect(mine.map((r) => r.offset)).toEqual(mine.map((_, i) => mine[0]!.offset + i));
      }
      expect(shown.map((r) => r.value)).not.toContain('before-the-tail');

      // Stopped by the user while disconnected: no request until resumed, then what was produced meanwhile.
      await broker.stop();
      await until(async () => (await state(page)) === 'disconnected', 30_000, 'the tail disconnected');
      await page.click('[data-test=tail-stop]');
      await until(async () => (await state(page)) === 'stopped', 5_000, 'the tail stopped');
      const asked = tailRequests.length;
      await broker.relaunch();
      for (let i = 0; i < 2; i++) await send(`d${i}`, i % 2);
      expect(tailRequests.length).toBe(asked);
      expect(await state(page)).toBe('stopped');
      await page.click('[data-test=tail-resume]');
      await until(async () => (await rows(page)).length >= sent.length, 15_000, 'the messages produced while stopped');
      expect(await state(page)).toBe('live');
      const after = await rows(page);
      expect(after.map((r) => r.value)).toEqual(['d1', 'd0', ...shown.map((r) => r.value)]);
    } finally {
      await page.screenshot({ path: path.join(SHOTS, 'tail-reconnect.png'), fullPage: true });
      await page.close();
    }
    expect(problems).toEqual([]);
  });

  it('the route it resumes with: from=partition:offset pairs start each partition there, one not named at its end', async () => {
    const res = await fetch(`http://127.0.0.1:${healthPort}/api/v1/topics`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'resumed', partitions: 3 }),
    });
    expect(res.status).toBe(201);
    for (const [p, n] of [
      [0, 3],
      [1, 2],
      [2, 1],
    ] as const)
      for (let i = 0; i < n; i++) await produce(healthPort, 'resumed', `p${p}-${i}`, p);
    const tail = (from: string, signal?: AbortSignal) =>
      fetch(`http://127.0.0.1:${healthPort}/api/v1/topics/resumed/tail?from=${encodeURIComponent(from)}`, { signal });
    const ac = new AbortController();
    const r = await tail('0:1,1:2', ac.signal);
    try {
      expect(r.status).toBe(200);
      const reader = r.body!.pipeThrough(new TextDecoderStream()).getReader();
      let text = '';
      const got = () => [...text.matchAll(/event: (\w+)\ndata: (.*)\n\n/g)].map((m) => [m[1], JSON.parse(m[2]!)] as const);
      const more = async (what: string, enough: () => boolean) => {
        while (!enough()) {
          const { value, done } = await reader.read();
          if (done) throw new Error(`the stream ended before ${what}`);
          text += value;
        }
      };
      await more('two messages', () => got().filter(([e]) => e === 'message').length >= 2);
      expect(got()[0]).toEqual(['ready', { topic: 'resumed', positions: { 0: 1, 1: 2, 2: 1 } }]);
      await produce(healthPort, 'resumed', 'p2-1', 2);
      await more('the new message', () => got().filter(([e]) => e === 'message').length >= 3);
      expect(
        got()
          .filter(([e]) => e === 'message')
          .map(([, m]) => `${m.partition}:${m.offset}:${m.value}`),
      ).toEqual(['0:1:p0-1', '0:2:p0-2', '2:1:p2-1']);
    } finally {
      ac.abort();
    }
    expect((await tail('0:1,0:2')).status).toBe(400);
    expect((await tail('0:1,7:0')).status).toBe(400);
    // Past the end is an offset the broker lost (a crash): not refused, the partition goes on at its end
    // with an event: reset (http-tail-follow.test.ts).
    const past = new AbortController();
    expect((await tail('0:1,1:3', past.signal)).status).toBe(200);
    past.abort();
  });

  it('a partition added under the tail and a resumed position the broker no longer has: shown with a notice, the tail goes on', async () => {
    const create = (partitions: number) =>
      fetch(`http://127.0.0.1:${healthPort}/api/v1/topics`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'widened', partitions }),
      });
    expect((await create(1)).status).toBe(201);
    const page = await browser.newPage();
    const notices = () => page.$$eval('[data-test=tail-notice]', (els) => els.map((el) => el.textContent ?? ''));
    try {
      await page.goto(`http://127.0.0.1:${healthPort}/ui/#/topics/widened/tail`, { waitUntil: 'domcontentloaded' });
      await until(async () => (await page.$('[data-test=tail-state]')) !== null && (await state(page)) === 'live', 15_000, 'the tail to be live');
      for (const v of ['a0', 'a1']) await produce(healthPort, 'widened', v, 0);
      const grown = await fetch(`http://127.0.0.1:${healthPort}/api/v1/topics/widened/partitions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ partitions: 2 }),
      });
      expect(grown.status).toBe(200);
      await produce(healthPort, 'widened', 'in-the-new-one', 1);
      await until(async () => (await rows(page)).some((r) => r.value === 'in-the-new-one'), 30_000, 'the message of the added partition');
      expect(await notices()).toEqual([expect.stringContaining('partition 1 was added')]);

      // The topic made again while the tail is stopped: what it showed of partition 0 is gone (as after a crash).
      await page.click('[data-test=tail-stop]');
      await until(async () => (await state(page)) === 'stopped', 5_000, 'the tail stopped');
      expect((await fetch(`http://127.0.0.1:${healthPort}/api/v1/topics/widened`, { method: 'DELETE' })).status).toBe(204);
      await until(async () => (await create(2)).status === 201, 15_000, 'the topic created again');
      await page.click('[data-test=tail-resume]');
      await until(async () => (await state(page)) === 'live', 15_000, 'the tail live again');
      await produce(healthPort, 'widened', 'after-the-loss', 0);
      await until(async () => (await rows(page)).some((r) => r.value === 'after-the-loss'), 10_000, 'the message at the offset reused');
      expect((await rows(page))[0]).toEqual({ partition: 0, offset: 0, value: 'after-the-loss' });
      expect(await notices()).toContainEqual(expect.stringMatching(/^partition 0: the broker no longer has offset 2 \(its log ends at 0/));
    } finally {
      await page.screenshot({ path: path.join(SHOTS, 'tail-notices.png'), fullPage: true });
      await page.close();
    }
  });

  it('a topic deleted under the tail: the reconnect is answered 404, which the page shows, and the tail stops', async () => {
    const res = await fetch(`http://127.0.0.1:${healthPort}/api/v1/topics`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'doomed', partitions: 1 }),
    });
    expect(res.status).toBe(201);
    const page = await browser.newPage();
    try {
      await page.goto(`http://127.0.0.1:${healthPort}/ui/#/topics/doomed/tail`, { waitUntil: 'domcontentloaded' });
      await until(async () => (await page.$('[data-test=tail-state]')) !== null && (await state(page)) === 'live', 15_000, 'the tail to be live');
      expect((await fetch(`http://127.0.0.1:${healthPort}/api/v1/topics/doomed`, { method: 'DELETE' })).status).toBe(204);
      await until(async () => (await state(page)) === 'stopped', 30_000, 'the tail stopped');
      await page.waitForSelector('.error', { timeout: 5_000 });
      expect(await page.$eval('.error', (el) => el.textContent)).toMatch(/404/);
      expect(await page.$('[data-test=tail-resume]')).not.toBeNull();
    } finally {
      await page.screenshot({ path: path.join(SHOTS, 'tail-topic-deleted.png'), fullPage: true });
      await page.close();
    }
  });
});
