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
 * nested object, e.g. `retry.`). Also checks the nested retry and auth objects the clients share.
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
  if (o.retry !== undefined && o.retry !== null && typeof o.retry === 'object') refuseUnknownOptions(kind, o.retry, RETRY_OPTION_NAMES, 'retry.');
  if (o.auth !== undefined && o.auth !== null && typeof o.auth === 'object') refuseUnknownOptions(kind, o.auth, AUTH_OPTION_NAMES, 'auth.');
}
