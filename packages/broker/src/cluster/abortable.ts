import { TributaryError } from 'tributary-protocol/errors.js';

/** `p`, or a rejection as soon as `signal` aborts (what `p` answers later is dropped). */
export function abortable<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(new TributaryError('shutting_down'));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new TributaryError('shutting_down'));
    signal.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(e);
      },
    );
  });
}
