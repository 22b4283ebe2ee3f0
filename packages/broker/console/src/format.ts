/** How the message browser shows and exports messages. */
import type { Message } from './api.js';
import { isoTimestamp } from './csv.js';

export type View = 'json' | 'text' | 'hex';

function bytesOf(text: string, encoding: 'utf8' | 'base64'): Uint8Array {
  if (encoding === 'utf8') return new TextEncoder().encode(text);
  const bin = atob(text);
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

export function hex(text: string, encoding: 'utf8' | 'base64'): string {
  return [...bytesOf(text, encoding)].map((b) => b.toString(16).padStart(2, '0')).join(' ');
}

/** A value as the chosen view shows it: pretty JSON when it parses, the text, or hex bytes. */
export function show(text: string | null, encoding: 'utf8' | 'base64', view: View): string {
  if (text === null) return '(null)';
  if (view === 'hex' || encoding === 'base64') return view === 'text' && encoding === 'base64' ? `base64:${text}` : hex(text, encoding);
  if (view === 'json') {
    try {
      return JSON.stringify(JSON.parse(text), null, 2);
    } catch {
      return text;
    }
  }
  return text;
}

export function bytes(n: number | null): string {
  if (n === null) return '-';
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(1)} ${units[i]}`;
}

export function time(ms: number): string {
  const iso = isoTimestamp(ms);
  if (iso === null) return ms < 0 ? 'no timestamp' : String(ms);
  return iso.replace('T', ' ').replace('Z', '');
}

export function download(name: string, type: string, text: string): void {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  a.click();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
