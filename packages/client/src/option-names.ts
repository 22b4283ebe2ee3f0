/**
 * Unknown options are refused at construction, with the nearest valid name (docs/sdk.md, "Options"):
 * `autoOffsetRest: 'earliest'` would otherwise be ignored and the consumer would start from `latest`.
 */
import { TributaryError } from 'tributary-protocol/errors.js';
import { nearestName } from 'tributary-protocol/names.js';
import type { RetryOptions } from './retry.js';

/**
 * `true` when `K` lists every key of `T`, else `never`: `const complete: Complete<Opts, typeof NAMES> =
 * true` fails to compile once the interface gains an option the runtime list lacks.
 */
export type Complete<T, K extends readonly unknown[]> = [Exclude<keyof T, K[number]>] extends [never] ? true : never;

export const RETRY_OPTION_NAMES = ['retries', 'initialDelayMs', 'maxDelayMs', 'factor', 'maxElapsedMs', 'signal', 'onRetry'] as const;
const retryComplete: Complete<RetryOptions, typeof RETRY_OPTION_NAMES> = true;
void retryComplete;
export const AUTH_OPTION_NAMES = ['principal', 'token'] as const;

/**
 * Throws invalid_config for the first own key of `given` that is not in `known` (`prefix` names the
 * nested object, e.g. `retry.`). Also checks the nested retry (its values too) and auth objects the
 * clients share.
 */
export function refuseUnknownOptions(kind: string, given: object, known: readonly string[], prefix = ''): void {
  for (const k of Object.keys(given)) {
    if (known.includes(k)) continue;
    const near = nearestName(k, known);
    const name = `${prefix}${k}`;
    const hint = near ? ` (did you mean ${prefix}${near}?)` : '';
    throw new TributaryError('invalid_config', { option: name, reason: 'unknown option', ...(near ? { did_you_mean: `${prefix}${near}` } : {}) }, `invalid ${kind} option ${name}: unknown option${hint}`);
  }
  if (prefix !== '') return;
  const o = given as { retry?: unknown; auth?: unknown };
  if (o.retry !== undefined && o.retry !== null && typeof o.retry === 'object') {
    refuseUnknownOptions(kind, o.retry, RETRY_OPTION_NAMES, 'retry.');
    checkRetryValues(kind, o.retry as Record<string, unknown>);
  }
  if (o.auth !== undefined && o.auth !== null && typeof o.auth === 'object') refuseUnknownOptions(kind, o.auth, AUTH_OPTION_NAMES, 'auth.');
}

/** Largest delay setTimeout takes: a longer one fires after 1 ms. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * The values of a client's `retry` option: each is used as given, so NaN retries never stop, a delay
 * past MAX_TIMER_MS fires at once, and a `signal` would be replaced by the client's own (each call's
 * `{ signal }` and close() end its retries).
 */
function checkRetryValues(kind: string, r: Record<string, unknown>): void {
  const refuse = (k: string, reason: string): never => {
    throw new TributaryError('invalid_config', { option: `retry.${k}`, reason }, `invalid ${kind} option retry.${k}: ${reason}`);
  };
  const int = (k: string, min: number, max: number) => {
    const v = r[k];
    if (v !== undefined && (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min || v > max)) refuse(k, `must be an integer ${min}..${max}`);
  };
  int('retries', 0, Number.MAX_SAFE_INTEGER);
  int('initialDelayMs', 0, MAX_TIMER_MS);
  int('maxDelayMs', 0, MAX_TIMER_MS);
  int('maxElapsedMs', 1, Number.MAX_SAFE_INTEGER);
  if (r.factor !== undefined && (typeof r.factor !== 'number' || !Number.isFinite(r.factor) || r.factor < 1)) refuse('factor', 'must be a finite number >= 1');
  if (r.onRetry !== undefined && typeof r.onRetry !== 'function') refuse('onRetry', 'must be a function');
  if (r.signal !== undefined) refuse('signal', "not a client option: pass { signal } to each call, or close() the client");
}

/**
 * A call's last argument (`{ signal }`, `{ includeInternal, signal }`, ...; the Admin's calls and the
 * Consumer's start() and commit()): undefined or an object naming only what `method` takes
 * (`admin.listTopics({ includeInternl: true })` would otherwise list without the internal topics), with
 * an AbortSignal as its signal. Returns it, `{}` for undefined.
 */
export function callOptions<T extends { signal?: AbortSignal }>(method: string, o: T | undefined, names: readonly string[] = ['signal']): T {
  if (o === undefined) return {} as T;
  if (o === null || typeof o !== 'object') {
    throw new TributaryError('invalid_config', { option: 'options', reason: 'must be an object' }, `invalid ${method} option options: must be an object`);
  }
  refuseUnknownOptions(method, o, names);
  if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) {
    throw new TributaryError('invalid_config', { option: 'signal', reason: 'must be an AbortSignal' }, `invalid ${method} option signal: must be an AbortSignal`);
  }
  return o;
}
