/**
 * The headless Chromium the web console tests drive (Debian's `chromium`, or TRIBUTARY_CHROMIUM), and
 * where their screenshots go.
 */
import fs from 'node:fs';
import path from 'node:path';
import puppeteer, { type Browser } from 'puppeteer-core';
import { ROOT } from './launcher.js';

export const SHOTS = path.join(ROOT, '.test-results', 'screenshots');

/** A new headless Chromium; the screenshot directory exists once it resolves. */
export function launchChromium(): Promise<Browser> {
  fs.mkdirSync(SHOTS, { recursive: true });
  return puppeteer.launch({
    executablePath: process.env.TRIBUTARY_CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
}
