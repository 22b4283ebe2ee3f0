/**
 * The web console in a real headless Chromium (as console.test.ts) while its broker is really stopped
 * and started again on the same ports and data directory, rather than one request failed by
 * interception: a topic page keeps what was typed and the messages it loaded, a group page its last lag,
 * both under the stale notice, which goes once the broker answers again (and the group page then shows
 * new figures); a sign-in sent while the broker is down says it could not sign in and keeps the form.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Browser, Page } from 'puppeteer-core';
import { SHOTS, launchChromium } from '../helpers/browser.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Consumer } from 'tributary-client/consumer.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { freePort, removeDir, tempDir, until } from '../helpers/util.js';
import { addUser } from './security/pki.js';


let browser: Browser;

beforeAll(async () => {
  browser = await launchChromium();
}, 60_000);

afterAll(async () => {
  await browser?.close();
});

/** A broker on fixed ports, so that the page's address stays good across a stop and a start. */
async function startBroker(...args: string[]): Promise<BrokerProcess> {
  return BrokerProcess.start({ args: ['--port', String(await freePort()), '--health-port', String(await freePort()), '--offsets-topic-partitions', '1', ...args] });
}

/**
 * A page that records uncaught exceptions and error answers, and requests that failed other than the
 * API's while the broker is down (Chromium also logs each of those as a console error: not counted).
 */
async function open(url: string): Promise<{ page: Page; problems: string[] }> {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  const problems: string[] = [];
  page.on('pageerror', (e) => problems.push(`exception: ${(e as Error).message}`));
  page.on('requestfailed', (r) => {
    if (!new URL(r.url()).pathname.startsWith('/api/v1/')) problems.push(`failed: ${r.url()} ${r.failure()?.errorText}`);
  });
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`${r.status()}: ${r.url()}`);
  });
  await page.goto(url, { waitUntil: 'domcontentloaded' });
  return { page, problems };
}

async function text(page: Page, selector: string): Promise<string> {
  // biome-ignore lint/performance/useDomNodeTextContent: the rendered text is what the test checks
  return page.$eval(selector, (el) => (el as unknown as { innerText: string }).innerText);
}

const inputValue = (page: Page, selector: string) => page.$eval(selector, (i) => (i as unknown as { value: string }).value);

async function api(port: number, method: string, p: string, body?: unknown): Promise<{ status: number; json: unknown }> {
  const headers: Record<string, string> = body === undefined ? {} : { 'content-type': 'application/json' };
  const res = await fetch(`http://127.0.0.1:${port}/api/v1${p}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, json: await res.json() };
}

describe('web console pages while the broker is stopped', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await startBroker();
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('a topic page and a group page keep what they show under the stale notice, which goes once the broker is back', async () => {
    const port = broker.healthPort;
    expect((await api(port, 'POST', '/topics', { name: 'down', partitions: 1 })).status).toBe(201);
    expect((await api(port, 'POST', '/topics/down/messages', { key: 'k-down', value: 'loaded-before' })).status).toBe(201);
    const consumer = new Consumer({ brokers: [broker.address], groupId: 'down-group', topic: 'down', autoOffsetReset: 'earliest', heartbeatIntervalMs: 100, maxWaitMs: 100, autoCommitIntervalMs: 50 });
    const run = consumer.run({ eachMessage: async () => {} });
    const committed = async () => ((await api(port, 'GET', '/groups/down-group')).json as { offsets?: Array<{ committed: number | null }> }).offsets?.[0]?.committed;
    await until(async () => (await committed()) === 1, 15_000, 'the group to commit');
    await consumer.close();
    await run.catch(() => {});
    for (const v of ['late-1', 'late-2']) await api(port, 'POST', '/topics/down/messages', { value: v });

    const base = `http://127.0.0.1:${port}/ui/`;
    const topic = await open(`${base}#/topics/down`);
    const group = await open(`${base}#/groups/down-group`);
    const lag = () => text(group.page, '[data-test=offsets] tr[data-partition="0"] td.lag');
    try {
      await topic.page.waitForSelector('[data-test=messages] tr[data-offset="0"]', { timeout: 15_000 });
      await topic.page.type('[data-test=produce] input[name=value]', 'typed-not-sent');
      await group.page.waitForSelector('[data-test=offsets] tr[data-partition="0"]', { timeout: 15_000 });
      await until(async () => (await lag()) === '2', 10_000, 'the lag of 2');

      await broker.stop();
      // Two pages: one is in the background, where Chromium runs no animation frames, and puppeteer's
      // waitForSelector with `hidden` polls on them: both are looked at by query instead.
      const stale = async (page: Page) => (await page.$('[data-test=stale]')) !== null;
      for (const [name, { page }] of [['topic', topic], ['group', group]] as const) {
        // The topic page polls every 5 s, the group page every 2 s.
        await until(() => stale(page), 20_000, `the stale notice on the ${name} page`);
        expect(await text(page, '[data-test=stale]')).toMatch(/^stale: could not refresh: the broker did not answer/);
        expect(await page.$('main .error')).toBeNull();
      }
      expect(await inputValue(topic.page, '[data-test=produce] input[name=value]')).toBe('typed-not-sent');
      expect(await text(topic.page, '[data-test=messages] tr[data-offset="0"]')).toContain('loaded-before');
      expect(await text(topic.page, '[data-test=partitions]')).toMatch(/^partition\tleader/);
      expect(await lag()).toBe('2');

      await broker.relaunch();
      expect(broker.healthPort).toBe(port);
      for (const [name, { page }] of [['topic', topic], ['group', group]] as const) await until(async () => !(await stale(page)), 30_000, `the stale notice gone from the ${name} page`);
      expect(await inputValue(topic.page, '[data-test=produce] input[name=value]')).toBe('typed-not-sent');
      // Refreshed again: a message produced now shows in the lag.
      await api(port, 'POST', '/topics/down/messages', { value: 'late-3' });
      await until(async () => (await lag()) === '3', 10_000, 'the lag of 3 after the restart');
    } finally {
      // A background page may never give Chromium a frame to capture.
      for (const [name, { page }] of [['topic', topic], ['group', group]] as const) {
        await page.bringToFront();
        await page.screenshot({ path: path.join(SHOTS, `${name}-broker-stopped.png`), fullPage: true });
        await page.close();
      }
    }
    expect([...topic.problems, ...group.problems]).toEqual([]);
  });
});

describe('web console sign-in while the broker is stopped', () => {
  let dir: string;
  let broker: BrokerProcess;
  let token: string;

  beforeAll(async () => {
    dir = await tempDir('tributary-console-stop-');
    const config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, 'authentication: true\n');
    token = addUser(config, 'operator', ['admin']);
    broker = await startBroker('--config', config);
  });

  afterAll(async () => {
    await broker?.dispose();
    if (dir) await removeDir(dir);
  });

  it('says it could not sign in and keeps the form filled in; signs in once the broker is back', async () => {
    const { page, problems } = await open(`http://127.0.0.1:${broker.healthPort}/ui/`);
    try {
      await page.waitForSelector('[data-test=signin]', { timeout: 15_000 });
      await page.type('input[name=principal]', 'operator');
      await page.type('input[name=token]', token);
      await broker.stop();
      await page.click('[data-test=signin] button');
      await page.waitForSelector('[data-test=signin-failed]', { timeout: 15_000 });
      expect(await text(page, '[data-test=signin-failed]')).toMatch(/^could not sign in: the broker did not answer/);
      expect(await page.$('[data-test=signin-refused]')).toBeNull();
      expect([await inputValue(page, 'input[name=principal]'), await inputValue(page, 'input[name=token]')]).toEqual(['operator', token]);
      await broker.relaunch();
      await page.click('[data-test=signin] button');
      await page.waitForSelector('[data-test=brokers]', { timeout: 15_000 });
      expect(await text(page, 'header .user')).toContain('operator');
    } finally {
      await page.screenshot({ path: path.join(SHOTS, 'signin-broker-stopped.png'), fullPage: true });
      await page.close();
    }
    expect(problems).toEqual([]);
  });
});
