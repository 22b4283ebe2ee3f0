import http from 'node:http';
import type { BrokerMetrics } from '../common/metrics.js';
import type { AdminApi } from '../http/admin-api.js';
import { serveConsole } from '../http/console-static.js';

/**
 * /live (process up), /ready (recovery done, accepting requests; 503 with what it is waiting for
 * otherwise), /metrics (Prometheus), the JSON admin API under /api/v1/ and the web console under /ui/
 * (docs/http-api.md).
 */
export function createHealthServer(metrics: BrokerMetrics, readiness: () => { ready: boolean; reason?: string }, api?: AdminApi): http.Server {
  return http.createServer((req, res) => {
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://broker');
    } catch {
      res.writeHead(400).end();
      return;
    }
    if (api && (url.pathname === '/api/v1' || url.pathname.startsWith('/api/v1/'))) {
      void api.handle(req, res, url);
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405).end();
      return;
    }
    if (url.pathname === '/ui' || url.pathname.startsWith('/ui/')) {
      void serveConsole(req, res, url.pathname);
    } else if (url.pathname === '/live') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
    } else if (url.pathname === '/ready') {
      const { ready, reason } = readiness();
      res.writeHead(ready ? 200 : 503, { 'content-type': 'text/plain' }).end(ready ? 'ready\n' : `not ready: ${reason ?? 'starting'}\n`);
    } else if (url.pathname === '/metrics') {
      metrics.registry.metrics().then(
        (body) => res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(body),
        (err: Error) => res.writeHead(500).end(err.message),
      );
    } else {
      res.writeHead(404).end();
    }
  });
}
