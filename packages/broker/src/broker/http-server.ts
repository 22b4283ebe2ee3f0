import http from 'node:http';
import type { BrokerMetrics } from '../common/metrics.js';

/**
 * /live (process up), /ready (recovery done, accepting requests; 503 with what it is waiting for
 * otherwise) and /metrics (Prometheus).
 */
export function createHealthServer(metrics: BrokerMetrics, readiness: () => { ready: boolean; reason?: string }): http.Server {
  return http.createServer((req, res) => {
    const url = req.url?.split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405).end();
      return;
    }
    if (url === '/live') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
    } else if (url === '/ready') {
      const { ready, reason } = readiness();
      res.writeHead(ready ? 200 : 503, { 'content-type': 'text/plain' }).end(ready ? 'ready\n' : `not ready: ${reason ?? 'starting'}\n`);
    } else if (url === '/metrics') {
      metrics.registry.metrics().then(
        (body) => res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(body),
        (err: Error) => res.writeHead(500).end(err.message),
      );
    } else {
      res.writeHead(404).end();
    }
  });
}
