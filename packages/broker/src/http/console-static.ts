/**
 * The web console's static files at /ui/ (built by `npm run build` into dist/console; see
 * docs/http-api.md, "Console"). Only the files of that folder, by name: no directory listing, no path
 * outside it. The console loads nothing from elsewhere (no CDN), so it works offline.
 */
import { readFile } from 'node:fs/promises';
import type http from 'node:http';
import { fileURLToPath } from 'node:url';

const DIR = fileURLToPath(new URL('../console/', import.meta.url));
const TYPES: Record<string, string> = { html: 'text/html; charset=utf-8', js: 'text/javascript; charset=utf-8', css: 'text/css; charset=utf-8' };
/** Scripts and styles only from this origin, API calls only to it; no frames. */
const CSP = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

export async function serveConsole(req: http.IncomingMessage, res: http.ServerResponse, pathname: string): Promise<void> {
  if (pathname === '/ui') {
    res.writeHead(308, { location: '/ui/' }).end();
    return;
  }
  const name = pathname === '/ui/' ? 'index.html' : pathname.slice('/ui/'.length);
  const ext = /^[A-Za-z0-9._-]+\.(html|js|css)$/.exec(name)?.[1];
  if (!ext || name.includes('..')) {
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
    return;
  }
  let body: Buffer;
  try {
    body = await readFile(DIR + name);
  } catch {
    const missing = name === 'index.html' ? 'the console is not built (npm run build)\n' : 'not found\n';
    res.writeHead(404, { 'content-type': 'text/plain' }).end(missing);
    return;
  }
  res.writeHead(200, {
    'content-type': TYPES[ext]!,
    'content-length': body.length,
    'cache-control': name === 'index.html' ? 'no-cache' : 'public, max-age=300',
    'content-security-policy': CSP,
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
  });
  res.end(req.method === 'HEAD' ? undefined : body);
}
