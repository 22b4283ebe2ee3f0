import http from 'node:http';
import net, { isIP } from 'node:net';
import type { BrokerMetrics } from '../common/metrics.js';
import type { AdminApi } from '../http/admin-api.js';
import { serveConsole } from '../http/console-static.js';
import { sendError, sendRouteError } from '../http/api-request.js';
import { invalidParam } from 'tributary-protocol/errors.js';

/**
 * /live (process up), /ready (recovery done, accepting requests; 503 with what it is waiting for
 * otherwise), /metrics (Prometheus), the JSON admin API under /api/v1/ and the web console under /ui/
 * (docs/http-api.md).
 */
export function createHealthServer(
  metrics: BrokerMetrics,
  readiness: () => { ready: boolean; reason?: string },
  api?: AdminApi,
  allowedHosts: ReadonlySet<string> = new Set(),
  timeouts: HttpTimeouts = { headersMs: 5_000, requestMs: 10_000, keepAliveMs: 5_000 },
): http.Server {
  // Node's defaults let a client take 60 s to send its headers and 300 s its request, checked only every
  // 30 s. Both bound receiving the request only (Node stops counting once it has arrived whole): a tail's
  // response may last, its request may not.
  const options = {
    headersTimeout: timeouts.headersMs,
    requestTimeout: timeouts.requestMs,
    connectionsCheckingInterval: Math.min(1000, timeouts.headersMs),
  };
  const server = http.createServer(options, (req, res) => {
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://broker');
    } catch {
      sendError(res, invalidParam('path', 'not a valid request target'));
      return;
    }
    const apiOrConsole = url.pathname === '/api/v1' || url.pathname.startsWith('/api/v1/') || url.pathname === '/ui' || url.pathname.startsWith('/ui/');
    if (apiOrConsole && !hostAllowed(req.headers.host, allowedHosts)) {
      // A page whose name was re-pointed at this address (DNS rebinding) would otherwise be same-origin.
      const error = { code: 'misdirected_request', message: 'this host name is not served here (httpAllowedHosts)', retriable: false, fields: {} };
      res.writeHead(421, { 'content-type': 'application/json' }).end(`${JSON.stringify({ error })}\n`);
      return;
    }
    if (api && (url.pathname === '/api/v1' || url.pathname.startsWith('/api/v1/'))) {
      void api.handle(req, res, url);
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      sendRouteError(res, url, req.method, 'GET, HEAD');
      return;
    }
    const health = url.pathname === '/live' || url.pathname === '/ready' || url.pathname === '/metrics';
    // They take no parameter: ignored, `/metrics?name[]=x` would look like a filter that works (docs/http-api.md).
    const unknown = health ? [...url.searchParams.keys()][0] : undefined;
    if (unknown !== undefined) {
      sendError(res, invalidParam(unknown.slice(0, 64), `unknown parameter; ${url.pathname} takes none`));
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
      sendRouteError(res, url, req.method);
    }
  });
  // Started once a response has ended; a response still being written (a tail) has no idle time.
  server.keepAliveTimeout = timeouts.keepAliveMs;
  return server;
}

/** The HTTP port's httpHeadersTimeoutMs, httpRequestTimeoutMs and httpKeepAliveTimeoutMs. */
export interface HttpTimeouts {
  headersMs: number;
  requestMs: number;
  keepAliveMs: number;
}

const TOO_MANY = 'HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: application/json\r\nRetry-After: 1\r\n';

/**
 * The listener of the HTTP port: hands `server` at most `max` connections at once (httpMaxConnections);
 * one past it is answered 503 (`too_many_connections`) and closed, as the main port answers an ERROR
 * line, rather than dropped without a word as `server.maxConnections` would. `onRefused` counts it.
 */
export function limitConnections(server: http.Server, max: number, onRefused: () => void = () => {}): net.Server {
  let open = 0;
  const listener = net.createServer((socket) => {
    if (open >= max) {
      onRefused();
      const body = `${JSON.stringify({ error: { code: 'too_many_connections', message: `too_many_connections max=${max}`, retriable: true, fields: { max } } })}\n`;
      socket.on('error', () => {});
      socket.end(`${TOO_MANY}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      return;
    }
    open++;
    socket.once('close', () => open--);
    server.emit('connection', socket);
  });
  // `server` never listens itself, and Node starts its request and header timeouts on its 'listening'.
  listener.on('listening', () => server.emit('listening'));
  return listener;
}

/**
 * The admin API and console answer to IP addresses, localhost and the names in `allowed` only: a name
 * an attacker controls could be re-pointed at the broker, and the operator's browser would then treat
 * the attacker's page as the console's origin. A request without Host (HTTP/1.0) is no browser's.
 */
export function hostAllowed(header: string | undefined, allowed: ReadonlySet<string>): boolean {
  if (header === undefined) return true;
  let name = header.trim().toLowerCase();
  if (name.startsWith('[')) name = name.slice(1, name.indexOf(']') < 0 ? undefined : name.indexOf(']'));
  else {
    const colon = name.lastIndexOf(':');
    if (colon >= 0) name = name.slice(0, colon);
  }
  if (name.endsWith('.')) name = name.slice(0, -1);
  return isIP(name) !== 0 || name === 'localhost' || allowed.has(name);
}

/** The names of httpAllowedHosts plus the broker's own host and advertised host. */
export function allowedHostNames(config: { host: string; advertisedHost?: string; httpAllowedHosts?: string }): Set<string> {
  const names = [config.host, config.advertisedHost ?? '', ...(config.httpAllowedHosts ?? '').split(',')];
  return new Set(names.map((n) => n.trim().toLowerCase()).filter((n) => n !== ''));
}
