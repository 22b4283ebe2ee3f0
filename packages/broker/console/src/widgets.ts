import { html } from 'htm/preact';
import { ApiError } from './api.js';

export function ErrorBox({ error }: { error: Error }) {
  const code = error instanceof ApiError ? `${error.status} ${error.code}: ` : '';
  return html`<div class="error" role="alert">${code}${error.message}</div>`;
}

export function link(href: string, text: string) {
  return html`<a href=${href}>${text}</a>`;
}

export const enc = encodeURIComponent;
