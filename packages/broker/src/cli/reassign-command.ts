/**
 * Moving replicas (cluster mode; docs/operations.md "Moving replicas"): `tributary partitions reassign`,
 * `tributary broker drain <id>` and `tributary topic alter <topic> --replication-factor N` (whose retention
 * options are topic-command.ts's ALTER_TOPIC). Each stores
 * requests through an admin command (REASSIGN, DRAIN_BROKER, ALTER_REPLICATION_FACTOR); the controller
 * carries them out. `--wait` follows the progress (REASSIGNMENTS) until nothing is left.
 */
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import type { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { TOPIC_NAME_RE } from 'tributary-protocol/topic-name.js';
import { type ClientOptions, intArg, withBootstrap, withConnection } from './client-util.js';
import { usageError } from './errors.js';
import { formatOption, table } from './output.js';
import { type RetentionAlterOptions, alterRetention, hasRetentionChange, withRetentionOptions } from './topic-command.js';

function print(line: string): void {
  process.stdout.write(`${line}\n`);
}

export interface ReassignmentView {
  topic: string;
  partition: number;
  phase: string;
  target: number[];
  replicas: number[];
  adding: number[];
  removing: number[];
  isr: number[];
  leader: number;
  throttle: number;
  leader_log_end: number | null;
  behind: Array<{ id: number; offset: number | null; behind: number | null; in_sync: boolean }>;
}

/** One row per partition being moved: where it goes, what it adds and removes, how far behind each new replica is. */
export function formatReassignments(list: ReassignmentView[]): string[] {
  if (list.length === 0) return ['no reassignment in progress'];
  const rows = list.map((x) => [
    x.topic,
    String(x.partition),
    x.phase,
    x.replicas.join(','),
    x.target.join(','),
    x.adding.join(',') || '-',
    x.removing.join(',') || '-',
    x.behind.length === 0 ? '-' : x.behind.map((b) => `${b.id}:${b.in_sync ? 'in-sync' : b.behind === null ? '?' : `${b.behind} behind`}`).join(' '),
    x.throttle > 0 ? `${x.throttle} B/s` : '-',
  ]);
  return table(['TOPIC', 'PARTITION', 'PHASE', 'REPLICAS', 'TARGET', 'ADDING', 'REMOVING', 'NEW REPLICAS', 'THROTTLE'], rows);
}

interface WaitOptions extends ClientOptions {
  wait?: boolean;
  format: 'table' | 'json';
}

async function listReassignments(conn: Connection, topic?: string): Promise<ReassignmentView[]> {
  return (await conn.json<{ reassignments: ReassignmentView[] }>('REASSIGNMENTS', topic !== undefined ? { topic } : {})).reassignments;
}

/** With --wait: prints the progress every 2 s until no reassignment (of `topic`) is left. */
async function follow(conn: Connection, opts: WaitOptions, topic?: string): Promise<void> {
  if (!opts.wait) return;
  for (let last = ''; ; ) {
    const list = await listReassignments(conn, topic);
    if (list.length === 0) break;
    const text = formatReassignments(list).join('\n');
    if (opts.format === 'table' && text !== last) print(text);
    last = text;
    await new Promise((r) => setTimeout(r, 2000));
  }
  if (opts.format === 'table') print('done: no reassignment in progress');
}

interface ReassignOptions extends WaitOptions {
  plan?: string;
  topic?: string;
  partition?: number;
  replicas?: string;
  throttle?: number;
  status?: boolean;
  cancel?: boolean;
}

interface PlanEntry {
  topic: string;
  partition: number;
  replicas: number[];
}

/**
 * A plan file as Kafka's: `{"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3]}, ...]}` (`version`
 * ignored). Anything wrong with the file itself (unreadable, not JSON, a malformed or repeated entry) is a
 * usage error, found before any connection.
 */
export function readPlan(file: string): PlanEntry[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw usageError(`cannot read plan ${file}: ${(err as Error).message}`);
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw usageError(`plan ${file} is not JSON: ${(err as Error).message}`);
  }
  const parts = (doc as { partitions?: unknown })?.partitions;
  if (!Array.isArray(parts) || parts.length === 0) throw usageError(`plan ${file}: expected {"partitions":[{"topic","partition","replicas"}, ...]}`);
  const extra = Object.keys(doc as object).filter((k) => k !== 'partitions' && k !== 'version');
  if (extra.length > 0) throw usageError(`plan ${file} has unknown field(s) ${extra.join(', ')}`);
  const seen = new Map<string, number>();
  return parts.map((x: unknown, i) => {
    const e = x as Partial<PlanEntry>;
    const ok =
      typeof e?.topic === 'string' &&
      TOPIC_NAME_RE.test(e.topic) &&
      Number.isInteger(e.partition) &&
      (e.partition as number) >= 0 &&
      Array.isArray(e.replicas) &&
      e.replicas.length > 0 &&
      e.replicas.every((r) => Number.isInteger(r) && r >= 0);
    if (!ok) throw usageError(`plan ${file}: entry ${i} needs "topic" (a topic name), "partition" (integer >= 0) and "replicas" (broker ids)`);
    const keys = Object.keys(e).filter((k) => !['topic', 'partition', 'replicas'].includes(k));
    if (keys.length > 0) throw usageError(`plan ${file}: entry ${i} has unknown field(s) ${keys.join(', ')}`);
    const where = `${e.topic}[${e.partition}]`;
    const first = seen.get(where);
    if (first !== undefined) throw usageError(`plan ${file}: entry ${i} repeats ${where} (entry ${first})`);
    seen.set(where, i);
    return e as PlanEntry;
  });
}

function replicasArg(text: string): number[] {
  if (!/^\d{1,9}(,\d{1,9})*$/.test(text)) throw usageError(`--replicas must be broker ids separated by commas, got ${JSON.stringify(text)}`);
  return text.split(',').map(Number);
}

/** What `partitions reassign` was asked to do, every option checked (before connecting). */
type ReassignAction = { kind: 'cancel' } | { kind: 'status' } | { kind: 'start'; entries: PlanEntry[] };

function reassignAction(opts: ReassignOptions): ReassignAction {
  const modes = [opts.plan !== undefined || opts.replicas !== undefined, opts.status === true, opts.cancel === true].filter(Boolean).length;
  if (modes > 1) throw usageError('give one of --plan / --replicas (start), --status or --cancel');
  if (opts.cancel) {
    if (opts.throttle !== undefined) throw usageError('--throttle cannot be combined with --cancel');
    if (opts.partition !== undefined && opts.topic === undefined) throw usageError('--partition needs --topic');
    return { kind: 'cancel' };
  }
  if (opts.plan === undefined && opts.replicas === undefined) {
    if (opts.throttle === undefined && opts.partition !== undefined) throw usageError('--partition narrows --cancel and --throttle only (--status lists by --topic)');
    if (opts.partition !== undefined && opts.topic === undefined) throw usageError('--partition needs --topic');
    return { kind: 'status' };
  }
  if (opts.plan !== undefined) {
    if (opts.replicas !== undefined || opts.partition !== undefined || opts.topic !== undefined) throw usageError('--plan takes no --topic, --partition or --replicas');
    return { kind: 'start', entries: readPlan(opts.plan) };
  }
  if (opts.topic === undefined || opts.partition === undefined) throw usageError('--replicas needs --topic and --partition');
  if (!TOPIC_NAME_RE.test(opts.topic)) throw usageError(`--topic must be a topic name (letters, digits, '.', '_', '-'), got ${JSON.stringify(opts.topic)}`);
  return { kind: 'start', entries: [{ topic: opts.topic, partition: opts.partition, replicas: replicasArg(opts.replicas!) }] };
}

async function reassign(opts: ReassignOptions): Promise<void> {
  const action = reassignAction(opts);
  await withConnection(opts, async (conn) => {
    if (action.kind === 'cancel') {
      const reply = Object.fromEntries(parseLine(await conn.command('REASSIGN_CANCEL', { topic: opts.topic, partition: opts.partition })).params);
      print(opts.format === 'json' ? JSON.stringify(reply) : `cancelling ${reply.count} reassignment(s): ${reply.cancelled}`);
      return follow(conn, opts, opts.topic);
    }
    if (action.kind === 'status') {
      if (opts.throttle !== undefined) {
        // --throttle alone: a new throttle for the reassignments in progress.
        const reply = Object.fromEntries(parseLine(await conn.command('REASSIGN_THROTTLE', { throttle: opts.throttle, topic: opts.topic, partition: opts.partition })).params);
        if (opts.format === 'table') print(`throttle ${opts.throttle} B/s set on ${reply.count} reassignment(s)`);
      }
      const list = await listReassignments(conn, opts.topic);
      print(opts.format === 'json' ? JSON.stringify(list) : formatReassignments(list).join('\n'));
      return follow(conn, opts, opts.topic);
    }
    // One REASSIGN for the whole plan: the broker checks all of it and stores it in one etcd transaction,
    // so a refused entry (of any topic) leaves every partition as it was.
    const plan = action.entries.map((e) => `${e.topic}:${e.partition}:${e.replicas.join(',')}`).join(';');
    await conn.command('REASSIGN', { plan, throttle: opts.throttle });
    const started = action.entries.map((e) => `${e.topic}[${e.partition}]`);
    print(opts.format === 'json' ? JSON.stringify({ started }) : `reassignment started for ${started.join(', ')}`);
    return follow(conn, opts);
  });
}

export function registerReassignCommands(program: Command, broker: Command, topic: Command): void {
  const partitions = program.command('partitions').description('move partition replicas between brokers (cluster mode)');
  withBootstrap(
    partitions
      .command('reassign')
      .description('start a reassignment (--plan file or --topic/--partition/--replicas), show progress (--status), change its throttle (--throttle alone) or cancel it (--cancel)')
      .option('--plan <file>', 'JSON plan: {"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3]}]}')
      .option('--topic <name>', 'topic of --replicas, or to narrow --status/--cancel/--throttle')
      .option('--partition <n>', 'partition of --replicas, or to narrow --cancel/--throttle', intArg(0))
      .option('--replicas <ids>', 'the new replicas, preferred leader first (e.g. 3,1,2)')
      .option('--throttle <bytes/s>', 'bytes per second each broker may fetch for the replicas it adds while they catch up (0: unthrottled)', intArg(0))
      .option('--status', 'show the reassignments in progress')
      .option('--cancel', 'go back to the original replicas')
      .option('--wait', 'follow the progress until nothing is left in progress')
      .addOption(formatOption()),
  ).action((opts: ReassignOptions) => reassign(opts));

  withBootstrap(
    broker
      .command('drain <id>')
      .description('move every replica and leadership off a broker, onto the other live brokers (balanced)')
      .option('--throttle <bytes/s>', 'reassignment throttle (see partitions reassign)', intArg(0))
      .option('--wait', 'follow the progress until the broker holds nothing')
      .addOption(formatOption()),
  ).action(async (id: string, opts: WaitOptions & { throttle?: number }) => {
    if (!/^\d{1,9}$/.test(id)) throw usageError(`broker id must be an integer >= 0, got ${JSON.stringify(id)}`);
    const brokerId = Number(id);
    await withConnection(opts, async (conn) => {
      const reply = Object.fromEntries(parseLine(await conn.command('DRAIN_BROKER', { broker: brokerId, throttle: opts.throttle })).params);
      print(opts.format === 'json' ? JSON.stringify(reply) : `draining broker ${brokerId}: ${reply.partitions} replica(s) to move, ${reply.leading} leadership(s) to hand over`);
      await follow(conn, opts);
    });
  });

  withBootstrap(
    withRetentionOptions(
      topic
        .command('alter <name>')
        .description("change a topic's retention (ALTER_TOPIC) or its replication factor (cluster mode: replicas are added or removed by reassignment)")
        .option('--replication-factor <n>', 'the new number of replicas per partition', intArg(1))
        .option('--throttle <bytes/s>', 'reassignment throttle (see partitions reassign)', intArg(0))
        .option('--wait', 'follow the progress until every partition has its replicas'),
    ).addOption(formatOption()),
  ).action(async (name: string, opts: WaitOptions & RetentionAlterOptions & { replicationFactor?: number; throttle?: number }) => {
    const rf = opts.replicationFactor;
    if (rf === undefined && !hasRetentionChange(opts)) throw usageError('give --replication-factor or at least one of --retention-hours, --retention-bytes, --delete-retention-ms');
    // They shape the reassignment a new replication factor starts; without one they would do nothing.
    if (rf === undefined && (opts.throttle !== undefined || opts.wait)) throw usageError('--throttle and --wait go with --replication-factor');
    await withConnection(opts, async (conn) => {
      // Retention first: it is in effect at once, where a new replication factor is a reassignment to follow.
      if (hasRetentionChange(opts)) print(await alterRetention(conn, name, opts));
      if (rf === undefined) return;
      const reply = Object.fromEntries(parseLine(await conn.command('ALTER_REPLICATION_FACTOR', { topic: name, replication_factor: rf, throttle: opts.throttle })).params);
      print(opts.format === 'json' ? JSON.stringify(reply) : `topic ${name}: replication factor ${rf}; reassigning partitions ${reply.partitions || '(none)'}`);
      await follow(conn, opts, name);
    });
  });
}
