import { createHash, createHmac, pbkdf2Sync, randomBytes, scrypt, scryptSync, timingSafeEqual, type X509Certificate } from 'node:crypto';
import type tls from 'node:tls';
import { formatOk, type ParsedLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { BrokerConfig, Permission } from '../common/config.js';
import { groupAllowed } from '../common/group-acls.js';
import type { Logger } from '../common/logger.js';
import { ALL_TOPICS, type TopicScope } from '../common/topic-scope.js';
import type { ClassicGroups } from '../coordinator/classic-groups.js';
import { groupTopics } from '../kafka/group-visibility.js';
import { failedLoginLog, Limiter } from './auth-queue.js';
import type { ConnectionContext, Reply } from './command-context.js';

export { Limiter } from './auth-queue.js';

/**
 * Authentication, authorization and per-connection request limits (docs/security.md).
 *
 * The broker calls `gate()` once per request, after the command is known and before it runs: the single
 * place where a request is refused for lack of authentication, permission, topic or group ACL or rate budget.
 * Secrets: tokens are only ever compared (scrypt, then timingSafeEqual); neither tokens nor hashes go to
 * logs, metrics or replies.
 */

// ---- token hashing ----

/** scrypt parameters (stored hashes depend on them). N=2^14, r=8: ~16 MiB and a few tens of ms per check. */
const SCRYPT_PARAMS = { N: 16384, r: 8, p: 1, maxmem: 64 * 1024 * 1024 };
const KEY_LEN = 32;

export interface UserEntry {
  hash: string;
  salt: string;
  permissions: Permission[];
  /** SCRAM-SHA-256 keys of the same token (Kafka port, docs/kafka.md); users added before they existed have none. */
  scram?: ScramEntry;
}

/** SCRAM-SHA-256 (RFC 5802, 7677) keys as stored: base64, never the token or the salted password. */
export interface ScramEntry {
  salt: string;
  iterations: number;
  storedKey: string;
  serverKey: string;
}

/** SCRAM's salted-password iterations: twice the minimum RFC 7677 and Kafka ask for; the client pays them per connection. */
export const SCRAM_ITERATIONS = 8192;

/** The SCRAM-SHA-256 keys of `token` for the config file (`tributary user add`, next to its scrypt hash). */
export function scramEntry(token: string, salt: Buffer = randomBytes(16), iterations = SCRAM_ITERATIONS): ScramEntry {
  const salted = pbkdf2Sync(token, salt, iterations, 32, 'sha256');
  const clientKey = createHmac('sha256', salted).update('Client Key').digest();
  return {
    salt: salt.toString('base64'),
    iterations,
    storedKey: createHash('sha256').update(clientKey).digest('base64'),
    serverKey: createHmac('sha256', salted).update('Server Key').digest('base64'),
  };
}

/** SCRAM keys as the exchange uses them. */
export interface ScramKeys {
  salt: Buffer;
  iterations: number;
  storedKey: Buffer;
  serverKey: Buffer;
}

/** Stand-in keys, so an unknown user (or one without SCRAM keys) gets a plausible, stable salt and never matches. */
function standInScramKeys(key: Buffer, principal: string): ScramKeys {
  const salt = createHmac('sha256', key).update(`salt\0${principal}`).digest().subarray(0, 16);
  return { salt, iterations: SCRAM_ITERATIONS, storedKey: randomBytes(32), serverKey: randomBytes(32) };
}

/** A new salted hash of `token` for the config file (`tributary user add`). */
export function hashToken(token: string, salt: Buffer = randomBytes(16)): { hash: string; salt: string } {
  const hash = scryptSync(token, salt, KEY_LEN, SCRYPT_PARAMS);
  return { hash: hash.toString('base64'), salt: salt.toString('base64') };
}

function scryptAsync(token: string, salt: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => scrypt(token, salt, KEY_LEN, SCRYPT_PARAMS, (err, key) => (err ? reject(err) : resolve(key))));
}

/** A salt and hash to check unknown principals against, so that "no such user" takes as long as "wrong token". */
let dummy: UserEntry | undefined;
function dummyUser(): UserEntry {
  dummy ??= { ...hashToken(randomBytes(16).toString('hex')), permissions: [] };
  return dummy;
}

export async function verifyToken(token: string, user: UserEntry | undefined): Promise<boolean> {
  const entry = user ?? dummyUser();
  const expected = Buffer.from(entry.hash, 'base64');
  const actual = await scryptAsync(token, Buffer.from(entry.salt, 'base64'));
  const same = expected.length === actual.length && timingSafeEqual(expected, actual);
  return same && user !== undefined;
}

// ---- what each command needs ----

type TopicAccess = 'read' | 'write' | 'describe';

interface Requirement {
  permissions: Permission[];
  /** Which access to the request's topic (if it names one) the topic ACL must grant. */
  topic?: TopicAccess;
}

/**
 * Commands only brokers send each other. With inter-broker TLS they need a connection whose client
 * certificate the inter-broker CA issued, whatever the principal (docs/operations.md "Securing a cluster").
 */
export const BROKER_COMMANDS = new Set([
  'REPLICA_FETCH',
  'REPLICA_WAIT',
  'LEADER_EPOCHS',
  'PARTITIONS_READY',
  'TXN_APPEND',
  'TXN_MARKER',
  'TXN_GROUP_OFFSETS',
  'TXN_VERIFY',
  'TXN_OFFSETS',
  'MEMBER_LEASE',
  'REPLICA_POSITIONS',
]);

/** Commands anyone may send, authenticated or not. */
const OPEN = new Set(['PROTOCOL_INFO', 'NEGOTIATE', 'AUTH', 'HELP']);

const GROUP_TOPIC_COMMANDS = ['JOIN_GROUP', 'SYNC_GROUP', 'HEARTBEAT', 'LEAVE_GROUP', 'FETCH_OFFSET', 'COMMIT_OFFSET', 'BATCH_COMMIT'];

/**
 * command → required permissions. A command that crosses boundaries needs every permission it touches.
 * `admin` implies every permission. A command missing here needs `admin` (deny by default).
 */
export function requirementOf(command: string, params: ReadonlyMap<string, string>): Requirement {
  switch (command) {
    case 'LIST': // filtered to the topics the principal may describe
      return { permissions: [] };
    case 'DESCRIBE':
    case 'METADATA':
    case 'LIST_OFFSETS':
      return { permissions: [], topic: 'describe' };
    case 'PUBLISH':
    case 'BATCH':
      return { permissions: ['topic.write'], topic: 'write' };
    case 'CONSUME':
    case 'STREAM':
      return { permissions: params.has('group') ? ['topic.read', 'group'] : ['topic.read'], topic: 'read' };
    case 'GROUP_STATUS':
    case 'LIST_GROUPS':
      return { permissions: ['group'] };
    case 'FIND_COORDINATOR':
      return { permissions: params.has('transactional_id') ? ['transaction'] : ['group'] };
    case 'INIT_PRODUCER_ID':
      // Without a transactional id: an idempotent producer's id, for whoever may write topics.
      return { permissions: params.has('transactional_id') ? ['transaction'] : ['topic.write'] };
    case 'BEGIN_TXN':
    case 'END_TXN':
      return { permissions: ['transaction'] };
    case 'SEND_OFFSETS_TO_TXN':
      // Moves a group's offsets, as a commit does.
      return { permissions: ['transaction', 'group', 'topic.read'], topic: 'read' };
    case 'CREATE':
    case 'DELETE':
    case 'DELETE_GROUP':
    case 'RESET_OFFSETS':
    case 'CLUSTER_STATUS':
      return { permissions: ['admin'] };
    default:
      if (GROUP_TOPIC_COMMANDS.includes(command)) return { permissions: ['group', 'topic.read'], topic: 'read' };
      if (command === 'TXN_PUBLISH' || command === 'TXN_STATUS') {
        // TXN_PUBLISH writes to a topic inside a transaction.
        return params.has('topic') ? { permissions: ['transaction', 'topic.write'], topic: 'write' } : { permissions: ['transaction'] };
      }
      // TXN_APPEND, TXN_MARKER, TXN_GROUP_OFFSETS, TXN_VERIFY, TXN_OFFSETS, REPLICA_FETCH, REPLICA_WAIT, LEADER_EPOCHS, MEMBER_LEASE, REPLICA_POSITIONS: brokers only (admin); the reassignment commands, ADD_PARTITIONS and ALTER_TOPIC: admin.
      return { permissions: ['admin'] };
  }
}

/** The topic of a binary batch frame, read from its header only (magic u16, topic length u16, topic). */
export function batchTopic(body: Buffer): string | undefined {
  if (body.length < 4) return undefined;
  const len = body.readUInt16BE(2);
  if (body.length < 4 + len) return undefined;
  return body.toString('utf8', 4, 4 + len);
}

// ---- per connection ----

interface Session {
  principal: string | undefined;
  authenticated: boolean;
  /** The user's token hash it logged in with (undefined for a certificate): a rotated token ends it. */
  credential: string | undefined;
  failures: number;
  /** Its verified client certificate was issued by the inter-broker CA: a peer broker. */
  peer: boolean;
  /** Token bucket for maxRequestsPerSecondPerConnection. */
  tokens: number;
  refilledAt: number;
  /** The rules (Security's reload count) its latest request was admitted under (gate, recheck). */
  admittedUnder?: number;
  close: (reason: string) => void;
}

/** A connection as the security layer sees it. */
export interface SecuredConnection extends ConnectionContext {
  destroy(reason: string, graceMs?: number): void;
}

const MAX_AUTH_FAILURES = 3;

/** The address part of `remote` ("1.2.3.4:5678", "::1:5678"): the source whose turn a login waits for. */
export function addressOf(remote: string): string {
  const i = remote.lastIndexOf(':');
  return i > 0 ? remote.slice(0, i) : remote;
}

export class Security {
  private users: Record<string, UserEntry>;
  /**
   * The key of SCRAM's stand-in salts: kept in the data directory or etcd, set before the Kafka port serves
   * (useScramStandInKey, scram-stand-in.ts); never derived from the users, so a reload leaves it as it is.
   */
  private scramStandInKey: Buffer = randomBytes(32);
  private acls: BrokerConfig['topicAcls'];
  private groupAcls: BrokerConfig['groupAcls'];
  /** Counts reloads: a request admitted under older rules is held to the new ones when it runs (recheck). */
  private reloads = 0;
  private readonly sessions = new WeakMap<ConnectionContext, Session>();
  /** One check per connection waits at most, so the queue is bounded by the connections (docs/security.md). */
  private readonly verifier: Limiter;
  private readonly failedLogin: (fields: Record<string, unknown>) => void;
  /** Each password check run (a scrypt: AUTH, SASL/PLAIN, a failed SCRAM exchange), with its outcome: the metric's feed. */
  onPasswordCheck: (ok: boolean) => void = () => {};

  constructor(
    private readonly config: BrokerConfig,
    private readonly logger: Logger,
    /** Inter-broker TLS: recognises peers' certificates; broker-to-broker commands then need one. */
    private readonly peers?: { isPeer(cert: X509Certificate | undefined): boolean },
  ) {
    this.users = config.users;
    this.acls = config.topicAcls;
    this.groupAcls = config.groupAcls;
    this.verifier = new Limiter(2, Math.max(256, config.maxConnections));
    this.failedLogin = failedLoginLog(logger);
  }

  get enabled(): boolean {
    return this.config.authentication;
  }

  /**
   * Replace users and ACLs (SIGHUP). Connections of a removed user are refused from their next request;
   * the broker then ends the open STREAMs that the new rules refuse (Broker.reloadSecurity). A group's
   * members are not removed: each is refused from its next request (its heartbeat), so its session runs
   * out and the group rebalances without it, as when a topic ACL is withdrawn.
   */
  reload(users: Record<string, UserEntry>, acls: BrokerConfig['topicAcls'], groupAcls: BrokerConfig['groupAcls']): void {
    this.users = users;
    this.acls = acls;
    this.groupAcls = groupAcls;
    this.reloads++;
    // The message predates group ACLs; operators' and tests' log watches look for it.
    this.logger.info({ users: Object.keys(users).length, topicAcls: Object.keys(acls).length, groupAcls: Object.keys(groupAcls).length }, 'users and topic ACLs reloaded');
  }

  /** Called for each accepted connection: auth timeout and the mTLS principal. */
  attach(conn: SecuredConnection, socket: tls.TLSSocket | import('node:net').Socket): void {
    const rate = this.config.maxRequestsPerSecondPerConnection;
    const session: Session = {
      principal: undefined,
      authenticated: false,
      credential: undefined,
      failures: 0,
      peer: false,
      tokens: rate,
      refilledAt: performance.now(),
      close: (reason) => conn.destroy(reason, 200),
    };
    this.sessions.set(conn, session);
    const tlsSocket = socket as tls.TLSSocket;
    if (this.peers && tlsSocket.encrypted && tlsSocket.authorized) session.peer = this.peers.isPeer(tlsSocket.getPeerX509Certificate());
    if (!this.enabled) return;
    // mTLS: a verified client certificate whose CN names a known user authenticates the connection.
    if (tlsSocket.encrypted && tlsSocket.authorized) {
      const cn = tlsSocket.getPeerCertificate()?.subject?.CN;
      const name = Array.isArray(cn) ? cn[0] : cn;
      if (name && Object.hasOwn(this.users, name)) {
        session.principal = name;
        session.authenticated = true;
        conn.principal = name;
      }
    }
    if (!session.authenticated) {
      const timer = setTimeout(() => {
        if (!session.authenticated) session.close('authentication timeout');
      }, this.config.authTimeoutMs);
      timer.unref();
      socket.once('close', () => clearTimeout(timer));
    }
  }

  /** Authentication is on and `conn` has not authenticated (or its login was revoked or failed since). */
  beforeAuthentication(conn: ConnectionContext): boolean {
    return this.enabled && !this.session(conn).authenticated;
  }

  private session(conn: ConnectionContext): Session {
    let s = this.sessions.get(conn);
    if (!s) {
      s = {
        principal: undefined,
        authenticated: false,
        credential: undefined,
        failures: 0,
        peer: false,
        tokens: this.config.maxRequestsPerSecondPerConnection,
        refilledAt: performance.now(),
        close: () => {},
      };
      this.sessions.set(conn, s);
    }
    return s;
  }

  /** The AUTH command when authentication is on (and SASL/PLAIN on the Kafka port). The token is never echoed, logged or kept. */
  async authenticate(conn: ConnectionContext, principal: string, token: string): Promise<Reply> {
    const s = this.session(conn);
    s.authenticated = false;
    s.principal = undefined;
    const user = Object.hasOwn(this.users, principal) ? this.users[principal] : undefined;
    const ok = await this.verifier.run(() => verifyToken(token, user), conn.closedSignal, { source: addressOf(conn.remote), key: conn, retry: s.failures > 0 });
    this.onPasswordCheck(ok);
    this.settle(conn, principal, ok ? user!.hash : false);
    return formatOk({ principal, authenticated: true });
  }

  /**
   * The outcome of a token check, AUTH's or one made elsewhere with this store's keys (SCRAM on the Kafka
   * port): the same session state, failure counting (closed after three) and logs. `verified` is the
   * credential (the user's hash) the check passed against, or false. A user rotated or removed while the
   * check ran (a SIGHUP between a SCRAM exchange's two messages, or during a queued scrypt) fails it: the
   * session must not take the new entry's rights with the old token. Throws authentication_failed.
   */
  settle(conn: ConnectionContext, principal: string, verified: string | false, reason?: string): void {
    const s = this.session(conn);
    s.authenticated = false;
    s.principal = undefined;
    const current = Object.hasOwn(this.users, principal) ? this.users[principal]!.hash : undefined;
    if (verified !== false && verified !== current) {
      verified = false;
      reason = 'the user was changed or removed during the login';
    }
    if (verified === false) {
      s.failures++;
      this.failedLogin({ principal, remote: conn.remote, failures: s.failures, ...(reason ? { reason } : {}) });
      if (s.failures >= MAX_AUTH_FAILURES) setImmediate(() => s.close('too many authentication failures'));
      throw new TributaryError('authentication_failed', { principal });
    }
    s.authenticated = true;
    s.principal = principal;
    s.credential = verified;
    conn.principal = principal;
    this.logger.debug({ principal, remote: conn.remote }, 'authenticated');
  }

  /**
   * A failed check made elsewhere (a SCRAM proof, an HMAC): it first waits for and takes a slot of the
   * password-check queue for one scrypt, as a failed AUTH does, so guessing over SCRAM is no faster than
   * over AUTH and is queued as fairly (docs/kafka.md). Then `settle` as a failure; always throws.
   */
  async settleFailed(conn: ConnectionContext, principal: string, reason?: string): Promise<never> {
    const s = this.session(conn);
    await this.verifier.run(() => verifyToken('', undefined), conn.closedSignal, { source: addressOf(conn.remote), key: conn, retry: s.failures > 0 });
    this.onPasswordCheck(false);
    this.settle(conn, principal, false, reason);
    throw new TributaryError('authentication_failed', { principal });
  }

  /** The kept key of SCRAM's stand-in salts (docs/kafka.md "SCRAM-SHA-256"), once the broker has read it. */
  useScramStandInKey(key: Buffer): void {
    this.scramStandInKey = key;
  }

  /**
   * A user's SCRAM-SHA-256 keys; for an unknown user, or one added before SCRAM keys were stored, stand-ins
   * with a stable salt that never verify (so the exchange does not tell whether the user exists).
   */
  scramKeys(principal: string): { keys: ScramKeys; known: boolean; credential?: string } {
    const user = Object.hasOwn(this.users, principal) ? this.users[principal]! : undefined;
    const entry = user?.scram;
    if (!entry) return { keys: standInScramKeys(this.scramStandInKey, principal), known: false };
    const b = (x: string) => Buffer.from(x, 'base64');
    return {
      keys: { salt: b(entry.salt), iterations: entry.iterations, storedKey: b(entry.storedKey), serverKey: b(entry.serverKey) },
      known: true,
      credential: user.hash,
    };
  }

  /**
   * The current permissions of the connection's principal; undefined when not (or no longer) authenticated:
   * the user was removed, or its token changed since this connection logged in with the old one.
   */
  private permissionsOf(s: Session): Permission[] | undefined {
    if (!s.authenticated || s.principal === undefined || !Object.hasOwn(this.users, s.principal)) return undefined;
    const user = this.users[s.principal]!;
    if (s.credential !== undefined && user.hash !== s.credential) return undefined;
    return user.permissions;
  }

  /** Users (principal and permissions, never a secret), topic and group ACLs as in force now (SIGHUP reloads them). */
  snapshot(): { users: Array<{ principal: string; permissions: Permission[] }>; acls: BrokerConfig['topicAcls']; groupAcls: BrokerConfig['groupAcls'] } {
    return { users: Object.entries(this.users).map(([principal, u]) => ({ principal, permissions: u.permissions })), acls: this.acls, groupAcls: this.groupAcls };
  }

  private listed(list: string[] | undefined, principal: string): boolean {
    return list === undefined || list.includes(principal) || list.includes('*');
  }

  /** Whether `principal` with `perms` has `access` to `topic` (permission and topic ACL). */
  private topicAllowed(principal: string, perms: Permission[], topic: string, access: TopicAccess): boolean {
    if (perms.includes('admin')) return true;
    if (topic.startsWith('__')) return false; // internal topics: admin only
    const acl = Object.hasOwn(this.acls, topic) ? this.acls[topic] : undefined;
    const read = perms.includes('topic.read') && this.listed(acl?.read, principal);
    const write = perms.includes('topic.write') && this.listed(acl?.write, principal);
    if (access === 'read') return read;
    if (access === 'write') return write;
    return read || write;
  }

  /**
   * Who names a transactional id, for the owner check (docs/security.md, "Transactional ids"): undefined
   * with authentication off (nothing is checked), `admin` may take any id over.
   */
  txnCaller(conn: ConnectionContext): { principal: string; admin: boolean } | undefined {
    if (!this.enabled) return undefined;
    const s = this.session(conn);
    const perms = this.permissionsOf(s);
    // The gate refused an unauthenticated request already; an empty principal owns nothing.
    return { principal: s.principal ?? '', admin: perms?.includes('admin') ?? false };
  }

  /** LIST filtering: topics the connection may describe (everything when authentication is off). */
  canDescribe(conn: ConnectionContext, topic: string): boolean {
    if (!this.enabled) return true;
    const s = this.session(conn);
    const perms = this.permissionsOf(s);
    return perms !== undefined && this.topicAllowed(s.principal!, perms, topic, 'describe');
  }

  /** The topics the connection may describe, as `canDescribe` decides each: METADATA, LIST and the groups shown. */
  topicScope(conn: ConnectionContext): TopicScope {
    return this.enabled ? { all: false, describable: (topic) => this.canDescribe(conn, topic) } : ALL_TOPICS;
  }

  /**
   * Whether the connection sees a group, on both ports (docs/security.md, "Groups and topic ACLs"): the
   * group ACL lets it use the group, and it may describe every topic the group names. With authentication off every group, its members' bytes
   * not decoded (one that does not parse is shown as raw bytes).
   */
  groupVisible(conn: ConnectionContext, groups: ClassicGroups, groupId: string): boolean {
    if (!this.groupUsable(conn, groupId)) return false;
    const scope = this.topicScope(conn);
    return scope.all || (groupTopics(groups, groupId)?.every(scope.describable) ?? false);
  }

  /** The group ACL lets the connection's principal use `group` (`admin` uses every group; all with authentication off). */
  private groupUsable(conn: ConnectionContext, group: string): boolean {
    if (!this.enabled) return true;
    const s = this.session(conn);
    const perms = this.permissionsOf(s);
    return perms !== undefined && (perms.includes('admin') || groupAllowed(this.groupAcls, group, s.principal!));
  }

  /**
   * Admission of one request: rate limit, batch size, authentication, permissions, topic ACL.
   * `req` is the parsed command line, or the body of a binary batch (command `BATCH`).
   */
  gate(command: string, conn: ConnectionContext, req: ParsedLine | Buffer | undefined): TributaryError | undefined {
    const s = this.session(conn);
    s.admittedUnder = this.reloads;
    const rate = this.config.maxRequestsPerSecondPerConnection;
    if (rate > 0) {
      // Monotonic: a step back of the wall clock would drain the bucket for the step's length.
      const now = performance.now();
      s.tokens = Math.min(rate, s.tokens + ((now - s.refilledAt) * rate) / 1000);
      s.refilledAt = now;
      if (s.tokens < 1) return new TributaryError('throttled', { limit: rate, per: 'second' });
      s.tokens -= 1;
    }
    const isBatch = Buffer.isBuffer(req);
    if (isBatch && this.config.maxBatchBytes > 0 && req.length > this.config.maxBatchBytes) {
      return new TributaryError('record_too_large', { size: req.length, max: this.config.maxBatchBytes, reason: 'batch' });
    }
    return this.authorize(command, conn, req);
  }

  /**
   * A request `gate` admitted that then waited for its turn (one not pipelined, behind a long-poll HEARTBEAT
   * or a JOIN_GROUP awaiting a rebalance): when a reload (SIGHUP) came in between, it is held to the rules in
   * force now, as an open STREAM is. Otherwise it ran with rights withdrawn meanwhile: a LEAVE_GROUP removed
   * the member, a FETCH_OFFSET read the offsets of a group the principal may no longer use. While it waits
   * its connection admits nothing else, so the session's mark is this request's.
   */
  recheck(command: string, conn: ConnectionContext, req: ParsedLine): void {
    if (this.session(conn).admittedUnder === this.reloads) return;
    const refused = this.authorize(command, conn, req);
    if (refused) throw refused;
  }

  /**
   * Authentication, permissions, topic and group ACL of one request, with the users and ACLs in force now: the
   * admission of every request, and the check an open STREAM is held to again after a reload.
   */
  authorize(command: string, conn: ConnectionContext, req: ParsedLine | Buffer | undefined): TributaryError | undefined {
    const s = this.session(conn);
    const isBatch = Buffer.isBuffer(req);
    if (this.peers && BROKER_COMMANDS.has(command) && !s.peer) {
      return new TributaryError('NOT_AUTHORIZED_FOR_OPERATION', {
        command,
        permission: 'broker',
        ...(s.principal === undefined ? {} : { principal: s.principal }),
        reason: 'needs a client certificate from the inter-broker CA',
      });
    }
    if (!this.enabled || OPEN.has(command)) return undefined;
    const perms = this.permissionsOf(s);
    if (perms === undefined) {
      if (s.authenticated) {
        // The user was removed (revoked) since this connection authenticated.
        s.authenticated = false;
        s.principal = undefined;
      }
      return new TributaryError('authentication_required', { command });
    }
    // A batch frame names its topic in the header: the same requirement as the text command with topic=.
    const batchTopicName = isBatch ? batchTopic(req) : undefined;
    const params: ReadonlyMap<string, string> = isBatch
      ? new Map(batchTopicName === undefined ? [] : [['topic', batchTopicName]])
      : req === undefined
        ? new Map()
        : req.params;
    const need = requirementOf(command, params);
    const isAdmin = perms.includes('admin');
    if (!isAdmin) {
      for (const p of need.permissions) {
        if (!perms.includes(p)) return new TributaryError('NOT_AUTHORIZED_FOR_OPERATION', { command, permission: p, principal: s.principal! });
      }
      if (need.topic === 'describe' && !perms.includes('topic.read') && !perms.includes('topic.write')) {
        return new TributaryError('NOT_AUTHORIZED_FOR_OPERATION', { command, permission: 'topic.read', principal: s.principal! });
      }
    }
    // Every command naming a group (group=, on the Kafka port the API's group id) is held to its ACL.
    const group = params.get('group');
    if (group !== undefined && !isAdmin && !groupAllowed(this.groupAcls, group, s.principal!)) {
      return new TributaryError('NOT_AUTHORIZED_FOR_GROUP', { group, principal: s.principal! });
    }
    if (need.topic !== undefined) {
      const topic = params.get('topic');
      // No topic: the handler refuses the request as malformed.
      if (topic !== undefined && !this.topicAllowed(s.principal!, perms, topic, need.topic)) {
        return new TributaryError('NOT_AUTHORIZED_FOR_TOPIC', { topic, access: need.topic, principal: s.principal! });
      }
    }
    return undefined;
  }
}
