/**
 * Several principals of one broker with authentication on: their tokens (from `addUser`), main-port
 * connections closed together at the end, a text request that shows a binary reply as `(batch)`, and
 * HTTP requests with their Basic credentials.
 */
import { Connection } from 'tributary-protocol/connection.js';
import type { BrokerProcess } from '../../helpers/launcher.js';

export class Principals {
  readonly tokens: Record<string, string> = {};
  private readonly open: Connection[] = [];

  constructor(private readonly broker: () => BrokerProcess) {}

  async connect(principal: string): Promise<Connection> {
    const c = await Connection.connect({ host: '127.0.0.1', port: this.broker().port, auth: { principal, token: this.tokens[principal]! } });
    this.open.push(c);
    return c;
  }

  async text(c: Connection, line: string): Promise<string> {
    const r = await c.request(line);
    return r.kind === 'text' ? r.text : '(batch)';
  }

  async http(path: string, user: string): Promise<{ status: number; body: string }> {
    const auth = `Basic ${Buffer.from(`${user}:${this.tokens[user]}`).toString('base64')}`;
    const res = await fetch(`http://127.0.0.1:${this.broker().healthPort}${path}`, { headers: { authorization: auth } });
    return { status: res.status, body: await res.text() };
  }

  async closeAll(): Promise<void> {
    await Promise.all(this.open.map((c) => c.close().catch(() => {})));
  }
}
