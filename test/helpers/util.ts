/**
 * Helpers every test tier shares: waiting for a condition with a deadline, pacing, error assertions,
 * temporary directories and record factories. Tests import these instead of keeping their own copies.
 */
import net from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'vitest';
import type { BatchRecord } from 'tributary-protocol/batch.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { RecordInput } from 'tributary-protocol/record.js';

// ---- waiting ----

/**
 * Resolves after `ms`. For pacing only (a client that sends slowly, a load that runs for a while): a test
 * that needs something to have happened waits for it with `until`/`eventually`, and one that needs
 * something not to have happened waits for an event that would come after it.
 */
export const sleep = (ms: number): Promise<void> => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Polls `fn` every `stepMs` until it returns a value other than undefined, null or false, and returns
 * that value; fails with `what` once `timeoutMs` passed.
 */
export async function eventually<T>(
  what: string,
  fn: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  timeoutMs = 10_000,
  stepMs = 25,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== null && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(stepMs);
  }
}

/** Polls `cond` every `stepMs` until it holds; fails with `what` once `timeoutMs` passed. */
export async function until(cond: () => boolean | Promise<boolean>, timeoutMs = 10_000, what = 'condition', stepMs = 10): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`${what} not met within ${timeoutMs} ms`);
    await sleep(stepMs);
  }
}

/**
 * `eventually` for conditions read from processes that may not answer yet: an error thrown by `fn` counts
 * as "not yet" (the last one is reported), and `context()` (e.g. broker stderr) is added to the failure.
 */
export async function eventuallyTolerant<T>(
  what: string,
  fn: () => Promise<T | false | undefined>,
  opts: { timeoutMs: number; stepMs: number; context?: () => string },
): Promise<T> {
  const deadline = Date.now() + opts.timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== false && v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${opts.timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ''}${opts.context ? `\n${opts.context()}` : ''}`);
    }
    await sleep(opts.stepMs);
  }
}

/** Like `until`, but answers whether `cond` held before the deadline instead of failing. */
export async function holdsWithin(cond: () => boolean | Promise<boolean>, timeoutMs: number, stepMs = 25): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return true;
    if (Date.now() > deadline) return false;
    await sleep(stepMs);
  }
}

// ---- errors ----

/** The TributaryError `p` rejected with; fails the test when it resolved or rejected with something else. */
export async function rejection(p: Promise<unknown>): Promise<TributaryError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(TributaryError);
    return err as TributaryError;
  }
  throw new Error('expected the promise to reject');
}

/** The code of the TributaryError `p` rejected with. */
export async function errorCode(p: Promise<unknown>): Promise<string> {
  return (await rejection(p)).code;
}

/** The TributaryError `fn` throws; fails the test when it returned or threw something else. */
export function thrown(fn: () => unknown): TributaryError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(TributaryError);
    return err as TributaryError;
  }
  throw new Error('expected a TributaryError to be thrown');
}

/** The code of the TributaryError `fn` throws; fails the test when it returned or threw something else. */
export function thrownCode(fn: () => unknown): string {
  return thrown(fn).code;
}

/**
 * Asserts `p` rejects with a TributaryError of `code` whose fields include `fields` (compared as
 * strings, as they travel on the wire); returns the error.
 */
export async function expectError(p: Promise<unknown>, code: string, fields: Record<string, string> = {}): Promise<TributaryError> {
  const err = await rejection(p);
  const got: Record<string, string> = {};
  for (const k of Object.keys(fields)) got[k] = String(err.fields[k]);
  expect({ code: err.code, ...got }, err.message).toEqual({ code, ...fields });
  return err;
}

// ---- temporary directories ----

/** A new empty directory under `parent` (the OS temp directory by default), named `<prefix><random>`. */
export function tempDir(prefix = 'tributary-test-', parent = os.tmpdir()): Promise<string> {
  return fs.mkdtemp(path.join(parent, prefix));
}

/** `tempDir`, synchronously (for module-level setup). */
export function tempDirSync(prefix = 'tributary-test-', parent = os.tmpdir()): string {
  return mkdtempSync(path.join(parent, prefix));
}

/** Removes a directory and everything in it; a missing one is fine. */
export function removeDir(dir: string): Promise<void> {
  return fs.rm(dir, { recursive: true, force: true });
}

/** `removeDir`, synchronously. */
export function removeDirSync(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

// ---- records ----

/** A record to append: no key unless `over` gives one. */
export function rec(value: string | Buffer, over: Partial<RecordInput> = {}): RecordInput {
  return { key: null, value: typeof value === 'string' ? Buffer.from(value) : value, ...over };
}

/** A record of a binary batch frame, as a client sends it: no key, no producer, no timestamp, unless `over` gives them. */
export function batchRec(value: string | Buffer = 'v', over: Partial<BatchRecord> = {}): BatchRecord {
  return {
    offset: 0,
    sequence: 0,
    producerId: '',
    key: null,
    epoch: -1,
    value: typeof value === 'string' ? Buffer.from(value) : value,
    timestamp: 0,
    attributes: 0,
    headers: [],
    ...over,
  };
}

/** Relays a client socket to `upstream` both ways; either side closing or failing closes both. */
export function relay(client: net.Socket, upstream: net.Socket): void {
  client.pipe(upstream).pipe(client);
  const done = () => {
    client.destroy();
    upstream.destroy();
  };
  client.on('error', done).on('close', done);
  upstream.on('error', done).on('close', done);
}

/** A TCP port free on 127.0.0.1 just now: for a broker restarted on the same ports. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
  });
}
