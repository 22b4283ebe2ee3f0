import { html } from 'htm/preact';
import { ApiError } from './api.js';

export function ErrorBox({ error, prefix = '' }: { error: Error; prefix?: string }) {
  const code = error instanceof ApiError ? `${error.status} ${error.code}: ` : '';
  return html`<div class="error" role="alert">${prefix}${code}${error.message}</div>`;
}

export function link(href: string, text: string) {
  return html`<a href=${href}>${text}</a>`;
}

export const enc = encodeURIComponent;

/**
 * The notice of a page whose last poll failed: what it shows is kept (forms, loaded messages) and may
 * be out of date. Gone once a poll succeeds again.
 */
export function Stale({ error, updatedAt }: { error: Error | undefined; updatedAt: number | undefined }) {
  if (!error) return null;
  const code = error instanceof ApiError ? `${error.status} ${error.code}: ` : '';
  const since = updatedAt === undefined ? '' : ` · showing what was read at ${new Date(updatedAt).toLocaleTimeString()}`;
  return html`<div class="stale" role="status" data-test="stale">stale: could not refresh: ${code}${error.message}${since}</div>`;
}

/**
 * Why a page's last poll failed, for a page that shows its frame (tables, forms) before any answer: the
 * error while nothing has been read yet, then the stale notice above what is kept.
 */
export function PollFailure({ error, updatedAt }: { error: Error | undefined; updatedAt: number | undefined }) {
  if (!error) return null;
  if (updatedAt === undefined) return html`<${ErrorBox} error=${error} />`;
  return html`<${Stale} error=${error} updatedAt=${updatedAt} />`;
}
