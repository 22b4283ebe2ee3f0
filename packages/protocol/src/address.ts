import { TributaryError } from './errors.js';

/** A broker's `host:port`, as clients are given it and brokers advertise it. */
export interface BrokerAddress {
  host: string;
  port: number;
}

export function parseAddress(s: string): BrokerAddress {
  const i = s.lastIndexOf(':');
  const host = i > 0 ? s.slice(0, i).replace(/^\[|\]$/g, '') : '';
  const port = i > 0 ? Number(s.slice(i + 1)) : Number.NaN;
  if (!host || !Number.isInteger(port) || port < 1 || port > 65535) throw new TributaryError('invalid_config', { option: 'brokers', value: s }, `invalid broker address "${s}" (expected host:port)`);
  return { host, port };
}

export function formatAddress(a: BrokerAddress): string {
  return a.host.includes(':') ? `[${a.host}]:${a.port}` : `${a.host}:${a.port}`;
}
