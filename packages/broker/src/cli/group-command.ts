import { type Command, InvalidArgumentError, Option } from 'commander';
import { Admin, type GroupDescription, type ResetTarget } from 'tributary-client/admin.js';
import { type Address, type ClientOptions, clientSecurity, connectAny, formatAddress, intArg, parseBootstrapList, toCliError, withBootstrap } from './client-util.js';
import { usageError } from './errors.js';
import { formatOption, table } from './output.js';

type BootstrapOptions = ClientOptions;

interface JsonOptions extends BootstrapOptions {
  json?: boolean;
}

interface ResetOptions extends JsonOptions {
  topic: string;
  partition?: number;
  toEarliest?: boolean;
  toLatest?: boolean;
  toOffset?: number;
  toTimestamp?: number;
  dryRun?: boolean;
}

function print(line: string): void {
  process.stdout.write(`${line}\n`);
}

/**
 * Runs `fn` with an Admin client on the bootstrap broker and always closes it. Errors follow the CLI's
 * conventions: `cannot reach broker at ...` / `error: <code> <fields>` with exit 1.
 */
export async function withAdmin<T>(target: string | ClientOptions, fn: (admin: Admin) => Promise<T>): Promise<T> {
  const opts = typeof target === 'string' ? { bootstrap: target } : target;
  const list = parseBootstrapList(opts.bootstrap);
  const addr: Address = list[0]!;
  // A CLI fails fast, saying why for each address, when no broker answers (as the commands on one
  // connection do): an Admin would keep dialling a broker it never reached for its bootstrapTimeoutMs.
  await (await connectAny(opts.bootstrap, undefined, opts)).conn.close();
  // Few quick retries: a CLI should fail fast when the broker is down, but still follow a redirect.
  const admin = new Admin({ brokers: list.map(formatAddress), retry: { retries: 2, initialDelayMs: 50, maxDelayMs: 200, maxElapsedMs: 2000 }, ...clientSecurity(opts) });
  try {
    return await fn(admin);
  } catch (err) {
    throw toCliError(err, addr);
  } finally {
    await admin.close();
  }
}

/** `--to-timestamp`: milliseconds since the epoch, or an ISO 8601 date. */
export function parseTimestamp(value: string): number {
  if (/^\d+$/.test(value)) {
    const n = Number(value);
    if (Number.isSafeInteger(n)) return n;
  } else if (/^\d{4}-\d{2}-\d{2}/.test(value)) {
    const t = Date.parse(value);
    // Date.parse rolls a day past the month's end over (2026-02-30 is March 2): such a date is refused.
    const [y, m, d] = value.slice(0, 10).split('-').map(Number) as [number, number, number];
    const daysInMonth = new Date(Date.UTC(y, m, 0)).getUTCDate();
    if (Number.isFinite(t) && t >= 0 && d >= 1 && d <= daysInMonth) return t;
  }
  throw new InvalidArgumentError('must be milliseconds since the epoch or an ISO 8601 date (2026-01-31T12:00:00Z).');
}


function partitions(ps: number[]): string {
  return ps.length === 0 ? '-' : ps.join(',');
}

function dash(v: number | string | null | undefined): string {
  return v === null || v === undefined ? '-' : String(v);
}

/** GROUP_STATUS as a readable report: state, members and assignments, offsets and lag, recent generations. */
export function formatGroup(g: GroupDescription): string[] {
  const out: string[] = [];
  out.push(`group:       ${g.group}`);
  out.push(`topic:       ${g.topic || '-'}`);
  out.push(`state:       ${g.state}`);
  out.push(`generation:  ${g.generation}`);
  out.push(g.kind === 'kafka' ? `protocol:    Kafka ${g.protocol || '-'} (assignor ${g.assignor || '-'})` : `protocol:    ${g.protocol} (assignor ${g.assignor})`);
  out.push(`leader:      ${dash(g.leader)}`);
  out.push('');
  out.push(`members (${g.members.length}):`);
  if (g.members.length === 0) out.push('  (none)');
  else {
    const rows = g.members.map((m) => [
      m.member_id,
      m.client_id,
      dash(m.instance),
      dash(m.host),
      String(m.generation),
      m.assigned ? m.assigned.join(',') || '-' : partitions(m.assignments),
      partitions(m.pending),
      `${m.last_heartbeat_ms_ago} ms ago`,
      m.needs_rejoin ? 'yes' : 'no',
    ]);
    for (const l of table(['MEMBER', 'CLIENT', 'INSTANCE', 'HOST', 'GEN', 'ASSIGNED', 'PENDING', 'HEARTBEAT', 'REJOIN'], rows)) out.push(`  ${l}`);
  }
  out.push('');
  out.push(`offsets (total lag ${g.total_lag}):`);
  if (g.offsets.length === 0) out.push('  (none)');
  else {
    if (g.kind === 'kafka') {
      // A Kafka group spans topics; its coordinator does not know who owns what (members assign).
      const rows = g.offsets.map((o) => [dash(o.topic), String(o.partition), dash(o.committed), dash(o.log_end), dash(o.lag)]);
      for (const l of table(['TOPIC', 'PARTITION', 'COMMITTED', 'LOG END', 'LAG'], rows)) out.push(`  ${l}`);
    } else {
      const rows = g.offsets.map((o) => [String(o.partition), dash(o.committed), dash(o.log_end), dash(o.lag), dash(o.owner)]);
      for (const l of table(['PARTITION', 'COMMITTED', 'LOG END', 'LAG', 'OWNER'], rows)) out.push(`  ${l}`);
    }
  }
  out.push('');
  out.push(`generations (last ${g.history.length}):`);
  if (g.history.length === 0) out.push('  (none)');
  else {
    const rows = [...g.history]
      .sort((a, b) => b.generation - a.generation)
      .map((h) => [
        String(h.generation),
        new Date(h.at).toISOString(),
        h.rebalanceMs === undefined ? '-' : `${h.rebalanceMs} ms`,
        h.reasons.map((r) => `${r.cause} ${r.member}${r.missedByMs !== undefined ? ` (missed by ${r.missedByMs} ms)` : ''}`).join('; ') || '-',
      ]);
    for (const l of table(['GEN', 'AT', 'REBALANCE', 'CAUSES'], rows)) out.push(`  ${l}`);
  }
  return out;
}

function resetTarget(opts: ResetOptions): ResetTarget {
  const chosen: ResetTarget[] = [];
  if (opts.toEarliest) chosen.push('earliest');
  if (opts.toLatest) chosen.push('latest');
  if (opts.toOffset !== undefined) chosen.push({ offset: opts.toOffset });
  if (opts.toTimestamp !== undefined) chosen.push({ timestamp: opts.toTimestamp });
  if (chosen.length !== 1) throw usageError('give exactly one of --to-earliest, --to-latest, --to-offset, --to-timestamp');
  return chosen[0]!;
}

export function registerGroupCommand(program: Command): void {
  const group = program.command('group').description('list, describe, reset and delete consumer groups');

  withBootstrap(
    group
      .command('list')
      .description('consumer groups known to the broker, one per line')
      .addOption(formatOption())
      .addOption(new Option('--json', 'the same as --format json').conflicts('format')),
  ).action(async (opts: JsonOptions & { format: 'table' | 'json' }) => {
    const groups = await withAdmin(opts, (admin) => admin.listGroups());
    if (opts.json || opts.format === 'json') print(JSON.stringify(groups));
    else if (groups.length === 0) print('no consumer groups');
    else for (const g of groups) print(g);
  });

  withBootstrap(
    group
      .command('describe <group>')
      .description('state, generation, members and assignments, committed offsets and lag, recent generations')
      .addOption(formatOption())
      .addOption(new Option('--json', 'the same as --format json (the broker GROUP_STATUS JSON)').conflicts('format')),
  ).action(async (name: string, opts: JsonOptions & { format: 'table' | 'json' }) => {
    const g = await withAdmin(opts, (admin) => admin.describeGroup(name));
    if (opts.json || opts.format === 'json') print(JSON.stringify(g, null, 2));
    else for (const l of formatGroup(g)) print(l);
  });

  withBootstrap(
    group
      .command('reset-offsets <group>')
      .description('move the committed offsets of a group (may move them backwards); live members rejoin and resume at them')
      .requiredOption('--topic <topic>', 'topic whose offsets to reset')
      .option('--partition <n>', 'only this partition (default: every partition)', intArg(0))
      .option('--to-earliest', 'the first retained offset')
      .option('--to-latest', 'the end of the log (last stable offset)')
      .option('--to-offset <n>', 'this offset', intArg(0))
      .addOption(new Option('--to-timestamp <ms|iso>', 'the first record at or after this time').argParser(parseTimestamp))
      .option('--dry-run', 'print the offsets it would set, change nothing')
      .option('--json', 'print the new offsets as JSON'),
  ).action(async (name: string, opts: ResetOptions) => {
    const to = resetTarget(opts);
    const dryRun = opts.dryRun === true;
    const entries = await withAdmin(opts, (admin) => admin.resetOffsets({ group: name, topic: opts.topic, partition: opts.partition, to, dryRun }));
    if (opts.json) {
      print(JSON.stringify({ group: name, topic: opts.topic, dryRun, offsets: entries }));
      return;
    }
    const n = `${entries.length} partition${entries.length === 1 ? '' : 's'}`;
    print(dryRun ? `would reset ${n} of ${opts.topic} for group ${name} (dry run: nothing changed)` : `reset ${n} of ${opts.topic} for group ${name}`);
    for (const l of table(['PARTITION', 'OFFSET'], entries.map((e) => [String(e.partition), String(e.offset)]))) print(`  ${l}`);
  });

  withBootstrap(
    group.command('delete <group>').description('delete a group without members and its committed offsets').option('--json', 'print the outcome as JSON: {"group","deleted"}'),
  ).action(async (name: string, opts: BootstrapOptions & { json?: boolean }) => {
    await withAdmin(opts, (admin) => admin.deleteGroup(name));
    print(opts.json ? JSON.stringify({ group: name, deleted: true }) : `deleted group ${name}`);
  });
}
