import type { Etcd3, IKeyValue, IOptions } from 'etcd3';
import { TributaryError } from 'tributary-protocol/errors.js';
import { etcd3Lib } from '../common/optional-deps.js';

/** Where every cluster key lives unless configured otherwise. */
export const DEFAULT_PREFIX = '/tributary/';

export interface EtcdConnectionOptions {
  /** Client URLs, e.g. ['http://127.0.0.1:2379']. */
  endpoints: string[];
  /**
   * Deadline of one unary call (reads, transactions, lease grants) on one endpoint. It bounds how long a
   * metadata change waits before failing with metadata_unavailable while etcd is unreachable.
   */
  requestTimeoutMs?: number;
  /** TLS to etcd (https endpoints): the CA of etcd's certificate, and a client certificate when etcd asks for one. */
  credentials?: IOptions['credentials'];
}

/** Either a client shared with other cluster modules (not closed by them) or options to make a private one. */
export type EtcdSource = Etcd3 | EtcdConnectionOptions;

type FaultHandling = NonNullable<IOptions['faultHandling']>;
type Policy = NonNullable<FaultHandling['global']>;
type Backoff = NonNullable<FaultHandling['watchBackoff']>;

/**
 * The client's default fault handling retries three times and opens a 5 s circuit breaker per host, so a
 * call to a frozen etcd could hang for several deadlines and calls after its recovery could still fail
 * fast for seconds. Here: each endpoint is tried once per call (a recoverable failure moves to the next
 * one), no circuit breaker, and watch streams reconnect within 2 s once etcd is back.
 */
function onePassPolicy(attempts: number): Policy {
  const policy = {
    async execute<T>(fn: (context: { signal: AbortSignal }) => PromiseLike<T> | T): Promise<T> {
      const signal = new AbortController().signal;
      for (let attempt = 1; ; attempt++) {
        try {
          return await fn({ signal });
        } catch (err) {
          if (attempt >= attempts || !(err instanceof Error) || !etcd3Lib().isRecoverableError(err)) throw err;
        }
      }
    },
  };
  // Only execute() is called by the client; the cast stands in for the policy library's event plumbing.
  return policy as unknown as Policy;
}

function cappedBackoff(durationMs: number, maxMs: number): Backoff {
  const backoff = { duration: durationMs, next: () => cappedBackoff(Math.min(durationMs * 2, maxMs), maxMs) };
  return backoff as unknown as Backoff;
}

export function createEtcdClient(opts: EtcdConnectionOptions): Etcd3 {
  if (opts.endpoints.length === 0) throw new Error('at least one etcd endpoint is needed');
  const timeout = opts.requestTimeoutMs ?? 5_000;
  return new (etcd3Lib().Etcd3)({
    hosts: opts.endpoints,
    ...(opts.credentials ? { credentials: opts.credentials } : {}),
    // Streams (watches, lease keep-alives) live as long as they are used; unary calls get a deadline.
    defaultCallOptions: (ctx) => (ctx.isStream ? {} : { deadline: Date.now() + timeout }),
    faultHandling: {
      global: onePassPolicy(opts.endpoints.length),
      host: () => onePassPolicy(1),
      watchBackoff: cappedBackoff(50, 2_000),
    },
  });
}

/** Resolves an EtcdSource; `owned` tells the caller to close the client when it closes. */
export function resolveClient(source: EtcdSource): { client: Etcd3; owned: boolean } {
  if (source instanceof etcd3Lib().Etcd3) return { client: source, owned: false };
  return { client: createEtcdClient(source), owned: true };
}

/** '/tributary' and '/tributary/' name the same root. */
export function normalizePrefix(prefix = DEFAULT_PREFIX): string {
  return prefix.endsWith('/') ? prefix : `${prefix}/`;
}

/**
 * Any failure to talk to etcd becomes the retriable metadata_unavailable; our own typed errors pass
 * through. Note a timed-out write may still have been applied: callers' retries must be idempotent
 * (create-if-absent and compare-on-revision writes are).
 */
export function toMetadataError(err: unknown, operation: string): Error {
  if (err instanceof TributaryError) return err;
  const reason = err instanceof Error ? err.message : String(err);
  return new TributaryError('metadata_unavailable', { operation, reason: reason.slice(0, 200) });
}

export async function withMetadataErrors<T>(operation: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw toMetadataError(err, operation);
  }
}

/** Keys one compare-and-delete transaction takes (etcd's --max-txn-ops is 128 by default). */
const DELETE_CHUNK = 100;

/**
 * Deletes `kvs`, each only at the revision it was read at, in transactions of up to 100 keys, calling
 * `deleted` for each key gone. False when a key changed since it was read (that transaction deleted
 * nothing, later ones were not tried): the caller reads again.
 */
export async function deleteAsRead(client: Etcd3, operation: string, kvs: IKeyValue[], deleted: (key: string, revision: number) => void): Promise<boolean> {
  for (let start = 0; start < kvs.length; start += DELETE_CHUNK) {
    const chunk = kvs.slice(start, start + DELETE_CHUNK);
    const res = await withMetadataErrors(operation, () => {
      let txn = client.if(chunk[0]!.key.toString('utf8'), 'Mod', '==', Number(chunk[0]!.mod_revision));
      for (const kv of chunk.slice(1)) txn = txn.and(kv.key.toString('utf8'), 'Mod', '==', Number(kv.mod_revision));
      return txn.then(...chunk.map((kv) => ({ request_delete_range: { key: kv.key } }))).commit();
    });
    if (!res.succeeded) return false;
    for (const kv of chunk) deleted(kv.key.toString('utf8'), Number(res.header.revision));
  }
  return true;
}
