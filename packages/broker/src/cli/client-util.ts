import { readFileSync } from 'node:fs';
import type tls from 'node:tls';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { type AuthOptions, Connection } from 'tributary-protocol/connection.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { BrokerUnreachableError, CliError, formatBrokerError, usageError } from './errors.js';

export const DEFAULT_BOOTSTRAP = '127.0.0.1:9000';

export interface Address {
  host: string;
  port: number;
}

export function formatAddress(a: Address): string {
  return a.host.includes(':') ? `[${a.host}]:${a.port}` : `${a.host}:${a.port}`;
}

/** `host:port` or `[v6]:port`; undefined when malformed. */
export function parseAddress(text: string): Address | undefined {
  const m = /^\[([^\]]+)\]:(\d{1,5})$/.exec(text) ?? /^([^:\s]+):(\d{1,5})$/.exec(text);
  const host = m?.[1];
  const port = Number(m?.[2]);
  if (host === undefined || !(port >= 1 && port <= 65535)) return undefined;
  return { host, port };
}

/** `--bootstrap host:port[,host:port...]` (what dev-cluster prints): every address, checked. */
export function parseBootstrapList(text: string): Address[] {
  const parts = text
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (parts.length === 0) throw usageError('--bootstrap must be host:port[,host:port...]');
  return parts.map((p) => {
    const a = parseAddress(p);
    if (!a) throw usageError(`--bootstrap must be host:port[,host:port...], got ${JSON.stringify(p)}`);
    return a;
  });
}

/** The first address of `--bootstrap` (all of them checked). */
export function parseBootstrap(text: string): Address {
  return parseBootstrapList(text)[0]!;
}

/**
 * A connection to the first `--bootstrap` address that answers, trying each in turn (failover);
 * when none does, the error says why for each of them.
 */
export async function connectAny(text: string, signal: AbortSignal | undefined, security: ClientSecurityOptions = {}): Promise<{ conn: Connection; addr: Address }> {
  const list = parseBootstrapList(text);
  const failures: BrokerUnreachableError[] = [];
  for (const addr of list) {
    try {
      return { conn: await connect(addr, signal, security), addr };
    } catch (err) {
      if (!(err instanceof BrokerUnreachableError) || signal?.aborted) throw err;
      failures.push(err);
    }
  }
  if (failures.length === 1) throw failures[0]!;
  throw new BrokerUnreachableError(`error: no broker of ${list.map(formatAddress).join(',')} answered: ${failures.map((f) => f.message.replace(/^error: /, '')).join('; ')}`);
}

/** TLS and authentication options of every client command (docs/security.md). */
export interface ClientSecurityOptions {
  tls?: boolean;
  ca?: string;
  cert?: string;
  certKey?: string;
  principal?: string;
  token?: string;
}

export interface ClientOptions extends ClientSecurityOptions {
  bootstrap: string;
}

/** Adds `--bootstrap` (env TRIBUTARY_BOOTSTRAP), TLS (`--tls --ca --cert --key`) and `--principal/--token` to a client command. */
export function withBootstrap(cmd: Command): Command {
  return cmd
    .addOption(new Option('--bootstrap <host:port,...>', 'brokers to connect to, tried in turn').env('TRIBUTARY_BOOTSTRAP').default(DEFAULT_BOOTSTRAP))
    // Not .env(): commander turns a flag on when its variable is set at all, so TRIBUTARY_TLS=false meant TLS.
    .addOption(new Option('--tls', 'connect with TLS (implied by --ca, --cert, --cert-key; env: TRIBUTARY_TLS=true|false)'))
    .addOption(new Option('--ca <file>', 'PEM CA bundle to verify the broker certificate').env('TRIBUTARY_CA'))
    .addOption(new Option('--cert <file>', 'PEM client certificate (mTLS)').env('TRIBUTARY_CERT'))
    // Not `--key`: produce uses that for the record key.
    .addOption(new Option('--cert-key <file>', 'PEM private key of --cert (mTLS)').env('TRIBUTARY_CERT_KEY'))
    .addOption(new Option('--principal <name>', 'principal to authenticate as').env('TRIBUTARY_PRINCIPAL'))
    .addOption(new Option('--token <token>', 'token of the principal (prefer the environment variable)').env('TRIBUTARY_TOKEN'));
}

function readPem(what: string, file: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new CliError(`error: cannot read ${what} ${file}: ${e.code === 'ENOENT' ? 'no such file' : e.message}`);
  }
}

/** The SDK's `tls` and `auth` options from the CLI flags. */
export function clientSecurity(opts: ClientSecurityOptions, env: NodeJS.ProcessEnv = process.env): { tls?: tls.ConnectionOptions; auth?: AuthOptions } {
  const out: { tls?: tls.ConnectionOptions; auth?: AuthOptions } = {};
  if (opts.tls || tlsFromEnv(env.TRIBUTARY_TLS) || opts.ca !== undefined || opts.cert !== undefined || opts.certKey !== undefined) {
    if ((opts.cert === undefined) !== (opts.certKey === undefined)) throw usageError('--cert and --cert-key must be given together');
    out.tls = {
      ...(opts.ca !== undefined ? { ca: readPem('CA file', opts.ca) } : {}),
      ...(opts.cert !== undefined ? { cert: readPem('certificate', opts.cert) } : {}),
      ...(opts.certKey !== undefined ? { key: readPem('key', opts.certKey) } : {}),
    };
  }
  if (opts.principal !== undefined || opts.token !== undefined) {
    if (opts.principal === undefined) throw usageError('--token needs --principal');
    out.auth = { principal: opts.principal, token: opts.token ?? '' };
  }
  return out;
}

/** TRIBUTARY_TLS: unset or empty is off; else `true` or `false`, as every TRIBUTARY_* boolean of the broker (config-loader.ts). */
function tlsFromEnv(value: string | undefined): boolean {
  if (value === undefined || value === '') return false;
  if (value === 'true') return true;
  if (value === 'false') return false;
  throw usageError(`TRIBUTARY_TLS must be true or false, got ${JSON.stringify(value)}`);
}

/** Commander argument parser for a decimal integer in [min, max]; rejects `1e3`, `0x10`, `12abc`. */
export function intArg(min: number, max = Number.MAX_SAFE_INTEGER): (value: string) => number {
  return (value: string) => {
    if (!/^-?\d+$/.test(value)) throw new InvalidArgumentError('must be an integer.');
    const n = Number(value);
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(max === Number.MAX_SAFE_INTEGER ? `must be an integer >= ${min}.` : `must be an integer ${min}..${max}.`);
    }
    return n;
  };
}

/**
 * Socket-level failures: the SDK raises connection_lost (refused, reset, closed), and request_timeout for a
 * connect timeout; a request_timeout parsed from a broker `ERROR:` reply is a broker error instead.
 */
function isConnectionLoss(err: unknown): boolean {
  if (!(err instanceof TributaryError)) return false;
  return err.code === 'connection_lost' || (err.code === 'request_timeout' && !err.message.startsWith('ERROR:'));
}

/**
 * A failed connect says why (refused, unknown host, TLS expected, ...; tributary-protocol's
 * connect-errors): the CLI prints that sentence as it is. Undefined for any other error.
 */
function connectFailureLine(err: unknown): string | undefined {
  return err instanceof TributaryError && (err.code === 'brokers_unreachable' || err.fields.cause !== undefined) ? `error: ${err.message}` : undefined;
}

/** Turn errors into the CLI's one line with exit 1: why a connect failed, a lost connection, `error: <code> <fields>`. */
export function toCliError(err: unknown, addr?: Address): unknown {
  const connectFailure = connectFailureLine(err);
  if (connectFailure) return new BrokerUnreachableError(connectFailure);
  if (addr && isConnectionLoss(err)) return new BrokerUnreachableError(`error: lost connection to broker at ${formatAddress(addr)}`);
  if (err instanceof TributaryError) return new CliError(formatBrokerError(err));
  return err;
}

/**
 * A broker that stops answering (SIGSTOPped, its host gone) must not hang a command: a connection silent
 * this long past its request's own wait is lost, unless a ping on a second connection is answered (a slow
 * reply, such as CREATE waiting for its leaders).
 */
const CLI_STALL_TIMEOUT_MS = 10_000;

export async function connect(addr: Address, signal?: AbortSignal, security: ClientSecurityOptions = {}): Promise<Connection> {
  const sec = clientSecurity(security);
  const probe = async () => {
    const c = await Connection.connect({ host: addr.host, port: addr.port, connectTimeoutMs: CLI_STALL_TIMEOUT_MS / 4, ...sec });
    try {
      await c.request('PROTOCOL_INFO');
    } finally {
      await c.close().catch(() => {});
    }
  };
  try {
    return await Connection.connect({ host: addr.host, port: addr.port, signal, stallTimeoutMs: CLI_STALL_TIMEOUT_MS, probe, ...sec });
  } catch (err) {
    if (signal?.aborted) throw err;
    if (connectFailureLine(err) || (err instanceof TributaryError && !isConnectionLoss(err))) throw toCliError(err);
    throw new BrokerUnreachableError(`error: cannot reach broker at ${formatAddress(addr)}: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** Connect to the bootstrap broker, run `fn`, always close. */
export async function withConnection<T>(target: string | ClientOptions, fn: (conn: Connection, addr: Address) => Promise<T>): Promise<T> {
  const opts = typeof target === 'string' ? { bootstrap: target } : target;
  const { conn, addr } = await connectAny(opts.bootstrap, undefined, opts);
  try {
    return await fn(conn, addr);
  } catch (err) {
    throw toCliError(err, addr);
  } finally {
    await conn.close();
  }
}
