import { type Command, InvalidArgumentError, Option } from 'commander';
import type { LocalCluster } from './local-cluster.js';
import { type ClientOptions, formatAddress, intArg, parseAddress, withBootstrap, withConnection } from './client-util.js';
import { readConfigFile } from './config-loader.js';
import { BrokerUnreachableError, CliError, usageError } from './errors.js';
import { formatOption, table } from './output.js';

function print(line: string): void {
  process.stdout.write(`${line}\n`);
}

// ---------------------------------------------------------------- cluster status

/**
 * CLUSTER_STATUS as either mode answers it: a cluster broker names brokers by `address` and lists
 * replicas; a standalone one gives `host`/`port` and no replicas (it is the only one).
 */
export interface ClusterStatusReply {
  mode: string;
  broker_id?: number;
  controller: number | null;
  brokers: Array<{ id: number; address?: string; host?: string; port?: number; started_at?: number; alive?: boolean }>;
  partitions: Array<{ topic: string; partition: number; leader: number; leader_epoch: number; replicas?: number[]; isr: number[]; hwm?: number }>;
  under_replicated: number;
  leaderless: number;
}

interface StatusOptions extends ClientOptions {
  json?: boolean;
  topic?: string;
}

function ids(xs: number[] | undefined): string {
  return xs === undefined || xs.length === 0 ? '-' : xs.join(',');
}

/** The partitions `cluster status` shows, in order: internal (`__`) topics only when asked for (`internal`) or named (`topic`). */
function statusPartitions(s: ClusterStatusReply, topic: string | undefined, internal: boolean): ClusterStatusReply['partitions'] {
  return s.partitions
    .filter((p) => (topic === undefined ? internal || !p.topic.startsWith('__') : p.topic === topic))
    .sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
}

/**
 * CLUSTER_STATUS's two counts over some of its partitions, as the broker counts them (cluster-node.ts `status`),
 * so that a report narrowed by --topic or without internal topics counts the partitions it shows.
 */
function statusCounts(s: ClusterStatusReply, parts: ClusterStatusReply['partitions']): { under_replicated: number; leaderless: number } {
  const live = new Set(s.brokers.map((b) => b.id));
  return {
    under_replicated: parts.filter((p) => p.isr.length < (p.replicas ?? p.isr).length).length,
    leaderless: parts.filter((p) => p.leader < 0 || !live.has(p.leader)).length,
  };
}

/** The report of `tributary cluster status`: brokers, controller, then one row per partition with what is wrong with it. */
/** The status as tables; internal (`__`) topics only when asked for (`internal`) or named (`topic`). */
export function formatClusterStatus(s: ClusterStatusReply, topic?: string, internal = false): string[] {
  const live = new Set(s.brokers.map((b) => b.id));
  const parts = statusPartitions(s, topic, internal);
  const shown = statusCounts(s, parts);
  // Internal partitions left out by default: their trouble is still named, or the report would read as healthy.
  const hidden = topic === undefined && !internal ? statusCounts(s, s.partitions.filter((p) => p.topic.startsWith('__'))) : undefined;
  const more = (n: number | undefined) => (n ? ` (and ${n} of internal topics: --internal shows them)` : '');
  const out: string[] = [];
  out.push(`mode:              ${s.mode}${s.broker_id !== undefined ? ` (answered by broker ${s.broker_id})` : ''}`);
  out.push(`controller:        ${s.controller ?? '- (none elected)'}`);
  out.push(`under-replicated:  ${shown.under_replicated}${more(hidden?.under_replicated)}`);
  out.push(`leaderless:        ${shown.leaderless}${more(hidden?.leaderless)}`);
  out.push('');
  out.push(`brokers (${s.brokers.length}):`);
  const brokerRows = [...s.brokers]
    .sort((a, b) => a.id - b.id)
    .map((b) => [
      String(b.id),
      b.address ?? (b.host !== undefined && b.port !== undefined ? formatAddress({ host: b.host, port: b.port }) : '-'),
      b.id === s.controller ? 'controller' : '-',
      b.started_at !== undefined ? new Date(b.started_at).toISOString() : '-',
    ]);
  if (brokerRows.length === 0) out.push('  (none)');
  else for (const l of table(['ID', 'ADDRESS', 'ROLE', 'STARTED'], brokerRows)) out.push(`  ${l}`);
  out.push('');
  out.push(`partitions (${parts.length}${topic !== undefined ? ` of ${topic}` : ''}):`);
  if (parts.length === 0) out.push('  (none)');
  else {
    const rows = parts.map((p) => {
      const replicas = p.replicas ?? p.isr;
      // A dead follower can stay in the ISR of an idle partition for a while: say so rather than "ok".
      const state =
        p.leader < 0 || !live.has(p.leader)
          ? 'LEADERLESS'
          : p.isr.length < replicas.length
            ? 'UNDER-REPLICATED'
            : replicas.some((r) => !live.has(r))
              ? 'REPLICA-DOWN'
              : 'ok';
      return [p.topic, String(p.partition), p.leader < 0 ? '-' : String(p.leader), String(p.leader_epoch), ids(replicas), ids(p.isr), state];
    });
    for (const l of table(['TOPIC', 'PARTITION', 'LEADER', 'EPOCH', 'REPLICAS', 'ISR', 'STATE'], rows)) out.push(`  ${l}`);
  }
  return out;
}

/** CLUSTER_STATUS from the first broker of a comma-separated list that can be reached. */
async function fetchStatus(opts: ClientOptions): Promise<ClusterStatusReply> {
  const list = opts.bootstrap
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (list.length === 0) throw usageError('--bootstrap must be host:port[,host:port...]');
  for (const a of list) if (!parseAddress(a)) throw usageError(`--bootstrap must be host:port[,host:port...], got ${JSON.stringify(a)}`);
  let unreachable: CliError | undefined;
  for (const bootstrap of list) {
    try {
      return await withConnection({ ...opts, bootstrap }, (conn) => conn.json<ClusterStatusReply>('CLUSTER_STATUS'));
    } catch (err) {
      // Any broker answers CLUSTER_STATUS, so a dead one in the list is skipped; a broker's error is final.
      if (err instanceof BrokerUnreachableError) {
        unreachable = err;
        continue;
      }
      throw err;
    }
  }
  throw list.length === 1 ? unreachable! : new CliError(`error: cannot reach any broker of ${list.join(',')}`);
}

// ---------------------------------------------------------------- dev-cluster

/**
 * What dev-cluster gives each broker itself (local-cluster.ts): in --broker-args, which every broker
 * gets, it would replace them all with one value, so brokers shared a data directory (failing on its
 * lock, or writing outside the temporary one shown), a port or an id, or met another etcd than dev-cluster's.
 */
const DEV_CLUSTER_OWN_FLAGS = ['--cluster', '--etcd', '--broker-id', '--port', '--health-port', '--data-dir'];

/** The first of `flags` that `brokerArgs` sets (`--flag value` or `--flag=value`), or undefined. */
function firstFlagIn(brokerArgs: string, flags: readonly string[]): string | undefined {
  return brokerArgs.split(/\s+/).map((a) => a.split('=')[0]!).find((f) => flags.includes(f));
}

function brokerArgsArg(value: string): string {
  const flag = firstFlagIn(value, DEV_CLUSTER_OWN_FLAGS);
  if (flag !== undefined) throw new InvalidArgumentError(`may not set ${flag}: dev-cluster sets it for each broker (${DEV_CLUSTER_OWN_FLAGS.join(', ')}).`);
  return value;
}

/** What dev-cluster --tls gives each broker too (local-cluster.ts tlsArgs): its certificates and CAs. */
const DEV_CLUSTER_TLS_FLAGS = ['--tls-cert', '--tls-key', '--inter-broker-tls-ca', '--etcd-tls-ca', '--etcd-tls-cert', '--etcd-tls-key'];

/** The refusal of --broker-args setting a flag --tls gives each broker, or undefined. */
function tlsOwnFlagRefusal(brokerArgs: string): string | undefined {
  const flag = firstFlagIn(brokerArgs, DEV_CLUSTER_TLS_FLAGS);
  return flag === undefined ? undefined : `with --tls, --broker-args may not set ${flag}: dev-cluster sets it for each broker (${DEV_CLUSTER_TLS_FLAGS.join(', ')}).`;
}

/** The value `brokerArgs` gives `flag` (`--flag value`, `--flag=value`; '' when alone), or undefined when it is not set. */
function flagValueIn(brokerArgs: string, flag: string): string | undefined {
  const args = brokerArgs.split(/\s+/).filter(Boolean);
  const at = args.findIndex((a) => a === flag || a.startsWith(`${flag}=`));
  if (at < 0) return undefined;
  if (args[at] !== flag) return args[at]!.slice(flag.length + 1);
  const next = args[at + 1];
  return next === undefined || next.startsWith('-') ? '' : next;
}

/**
 * Whether --broker-args turn authentication on: `--authentication` (alone or with any value but false),
 * else `authentication: true` in the --config file. A file that cannot be read counts as on: the brokers
 * refuse it themselves, with the reason.
 */
function brokerArgsAuthenticate(brokerArgs: string): boolean {
  const flag = flagValueIn(brokerArgs, '--authentication');
  if (flag !== undefined) return flag !== 'false';
  const file = flagValueIn(brokerArgs, '--config');
  if (!file) return false;
  const read = readConfigFile(file);
  return 'error' in read || read.data.authentication === true;
}

interface DevClusterOptions {
  brokers: number;
  dataDir?: string;
  basePort?: number;
  brokerArgs?: string;
  tls?: boolean;
  principal?: string;
  token?: string;
}

/** Runs a local cluster in the foreground until SIGINT/SIGTERM, then stops it (brokers first, then etcd). */
async function devCluster(opts: DevClusterOptions): Promise<void> {
  const refusal = opts.tls === true && opts.brokerArgs !== undefined ? tlsOwnFlagRefusal(opts.brokerArgs) : undefined;
  if (refusal !== undefined) throw usageError(refusal);
  const { LocalCluster } = await import('./local-cluster.js');
  const rf = Math.min(3, opts.brokers);
  let cluster: LocalCluster | undefined;
  let signalled: NodeJS.Signals | undefined;
  let wake: () => void = () => {};
  const stopRequested = new Promise<void>((resolve) => {
    wake = resolve;
  });
  const onSignal = (sig: NodeJS.Signals) => {
    if (signalled) {
      // The exit hook of local-cluster SIGKILLs every child; a temp dir may stay behind.
      process.stderr.write(`dev-cluster: second ${sig}, killing everything without a clean shutdown\n`);
      process.exit(1);
    }
    signalled = sig;
    process.stderr.write(`dev-cluster: ${sig}, stopping brokers, then etcd\n`);
    wake();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    try {
      cluster = await LocalCluster.start({
        brokers: opts.brokers,
        dataDir: opts.dataDir,
        basePort: opts.basePort,
        tls: opts.tls === true,
        ...(opts.principal !== undefined ? { auth: { principal: opts.principal, token: opts.token ?? '' } } : {}),
        // Replicated by default: `topic create` has no replication flag, and a dev cluster is for failover.
        brokerArgs: ['--default-replication-factor', String(rf), ...(opts.brokerArgs ?? '').split(/\s+/).filter(Boolean)],
        onLog: (who, line) => {
          if (who !== 'etcd') process.stderr.write(`[${who}] ${compactLog(line)}\n`);
        },
        onUnexpectedExit: (id, code, signal) => {
          process.stderr.write(`dev-cluster: broker ${id} exited (${code ?? signal}); the others keep running\n`);
        },
      });
    } catch (err) {
      throw new CliError(`error: dev-cluster failed to start: ${err instanceof Error ? err.message : String(err)}`);
    }
    if (!signalled) printUsage(cluster, rf, opts.dataDir !== undefined);
    await stopRequested;
  } finally {
    await cluster?.stop();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  if (cluster) print('dev-cluster: stopped');
}

const LEVELS: Record<number, string> = { 10: 'trace', 20: 'debug', 30: 'info', 40: 'warn', 50: 'error', 60: 'fatal' };

/** A broker's JSON log line as one short line (level, component, message, error, a few fields); anything else as is. */
export function compactLog(line: string): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return line;
  }
  if (typeof o !== 'object' || o === null || typeof o.msg !== 'string') return line;
  const { level, time: _t, pid: _p, hostname: _h, name: _n, component, msg, err, ...rest } = o;
  const fields = Object.entries(rest)
    .filter(([, v]) => v === null || typeof v !== 'object')
    .map(([k, v]) => `${k}=${String(v)}`);
  const error = typeof err === 'object' && err !== null && 'message' in err ? ` (${String((err as { message: unknown }).message)})` : '';
  return `${LEVELS[level as number] ?? String(level)}${component ? ` ${String(component)}` : ''}: ${msg}${fields.length ? ` ${fields.join(' ')}` : ''}${error}`;
}

/** Ends with the `bootstrap:` line, written with the rest in one piece: a script can wait for that line. */
function printUsage(cluster: LocalCluster, rf: number, keptDir: boolean): void {
  const first = cluster.brokers[0]!.address;
  // With TLS, every client command needs the brokers' CA (plain TCP is refused).
  const ca = cluster.pki?.ca;
  const flags = ca === undefined ? '' : ` --ca ${ca}`;
  const out: string[] = [];
  out.push(
    `tributary dev-cluster: ${cluster.brokers.length} broker${cluster.brokers.length === 1 ? '' : 's'}, etcd ${cluster.etcdEndpoints.join(',')} (pid ${cluster.etcdPid})`,
  );
  out.push(`data: ${cluster.dataDir}${keptDir ? '' : ' (temporary, removed on exit)'}`);
  if (cluster.pki) {
    out.push(`TLS: clients, brokers and etcd; certificates in ${cluster.pki.dir}, clients trust ${cluster.pki.ca}`);
  }
  const rows = cluster.brokers.map((b) => [String(b.id), b.address, `http://127.0.0.1:${b.healthPort}/ready`, String(b.pid ?? '-')]);
  for (const l of table(['BROKER', 'ADDRESS', 'HEALTH', 'PID'], rows)) out.push(`  ${l}`);
  out.push('');
  out.push("Try it (--bootstrap takes one address or a comma-separated list, as SDK clients' brokers do; the whole list is on the bootstrap line below):");
  out.push(`  tributary cluster status --bootstrap ${first}${flags}`);
  out.push(`  tributary topic create orders --partitions 6 --bootstrap ${first}${flags}     # replication factor ${rf} by default here`);
  out.push(`  tributary topic describe orders --bootstrap ${first}${flags}`);
  const tlsOption = ca === undefined ? '' : `, tls: { ca: fs.readFileSync(${JSON.stringify(ca)}) }`;
  out.push(`  new Producer({ brokers: ${JSON.stringify(cluster.brokers.map((b) => b.address))}${tlsOption} })`);
  out.push('  kill -9 a broker pid above to watch its partitions fail over; Ctrl-C stops everything.');
  out.push('');
  out.push(`bootstrap: ${cluster.bootstrap}`);
  process.stdout.write(`${out.join('\n')}\n`);
}

export function registerClusterCommands(program: Command): void {
  const dev = program.command('dev-cluster');
  dev
    .description('run etcd and a few cluster brokers on this machine in the foreground, for trying cluster mode (Ctrl-C stops all)')
    .option('--brokers <n>', 'number of brokers', intArg(1, 16), 3)
    .option('--data-dir <dir>', 'keep etcd and broker data here (<dir>/etcd, <dir>/broker-<id>) and reuse it next time (default: a temp dir, removed on exit)', (v: string) => {
      // Empty would resolve to the current directory and leave etcd and broker data there.
      if (v.trim() === '') throw new InvalidArgumentError('must not be empty.');
      return v;
    })
    .option(
      '--base-port <port>',
      'fixed ports: broker i on port+i, its health port on port+80+i, etcd on port+90 and port+91, so at most 10 brokers (default: free ports)',
      intArg(1, 65535 - 91),
    )
    .option('--broker-args <flags>', 'extra `broker start` flags for every broker, e.g. "--broker-lease-ttl-seconds 2"', (v: string) => {
      // --tls given before it: refused as the option is read (devCluster checks the other order).
      const refusal = dev.getOptionValue('tls') === true ? tlsOwnFlagRefusal(v) : undefined;
      if (refusal !== undefined) throw new InvalidArgumentError(refusal);
      return brokerArgsArg(v);
    })
    .option('--tls', 'TLS to clients, between brokers and to etcd, with a CA and certificates made by openssl in <data>/tls (clients then need --ca)')
    .addOption(new Option('--principal <name>', "who dev-cluster's own status checks authenticate as, when --broker-args turn authentication on (refused otherwise)").env('TRIBUTARY_PRINCIPAL'))
    .addOption(new Option('--token <token>', 'token of --principal (prefer the environment variable)').env('TRIBUTARY_TOKEN'))
    .action(async (opts: DevClusterOptions) => {
      if (opts.token !== undefined && opts.principal === undefined) throw usageError('--token needs --principal');
      // Given as options, never ignored: only brokers with authentication on would check them. The
      // TRIBUTARY_PRINCIPAL and TRIBUTARY_TOKEN of the environment are every command's, not refused here.
      const given = (['principal', 'token'] as const).some((k) => dev.getOptionValueSource(k) === 'cli');
      if (given && !brokerArgsAuthenticate(opts.brokerArgs ?? '')) {
        throw usageError('--principal and --token are for brokers with authentication on (--broker-args "--authentication", or a --config file with authentication: true); these brokers have it off, so nothing would use them');
      }
      // Fixed ports: an eleventh broker's health port (port+90) would be etcd's client port.
      if (opts.basePort !== undefined && opts.brokers > 10) throw usageError('--base-port lays out at most 10 brokers (health ports port+80..port+89, etcd on port+90 and port+91)');
      await devCluster(opts);
    });

  const cluster = program.command('cluster').description('inspect a cluster');
  withBootstrap(
    cluster
      .command('status')
      .description('brokers, controller, and leader, epoch, replicas and ISR of every partition, with the under-replicated and leaderless counts')
      .option('--topic <name>', 'only the partitions of this topic')
      .option('--internal', 'also the partitions of internal topics (__consumer_offsets, __transaction_state)')
      .addOption(formatOption())
      .addOption(new Option('--json', 'the same as --format json (the broker CLUSTER_STATUS JSON, its partitions and counts narrowed as the tables are)').conflicts('format')),
  ).action(async (opts: StatusOptions & { internal?: boolean; format: 'table' | 'json' }) => {
    const s = await fetchStatus(opts);
    const internal = opts.internal === true;
    // A topic of no partitions does not exist: an error rather than an empty report that looks like an answer.
    if (opts.topic !== undefined && !s.partitions.some((p) => p.topic === opts.topic)) throw new CliError(`error: topic_not_found topic=${opts.topic}`);
    // JSON narrowed as the tables are, its counts too (they counted every topic whatever --topic said);
    // the internal partitions left out by default are counted apart, so a script still sees their trouble.
    if (opts.json || opts.format === 'json') {
      const partitions = statusPartitions(s, opts.topic, internal);
      const hidden = opts.topic === undefined && !internal ? statusCounts(s, s.partitions.filter((p) => p.topic.startsWith('__'))) : undefined;
      const left = hidden ? { internal_under_replicated: hidden.under_replicated, internal_leaderless: hidden.leaderless } : {};
      print(JSON.stringify({ ...s, partitions, ...statusCounts(s, partitions), ...left }, null, 2));
    } else for (const l of formatClusterStatus(s, opts.topic, internal)) print(l);
  });
}
