import { type Command, Option } from 'commander';
import type { Connection } from 'tributary-protocol/connection.js';
import type { TopicDescription } from 'tributary-client/admin.js';
import { parseLine } from 'tributary-protocol/command.js';
import { type ClientOptions, intArg, withBootstrap, withConnection } from './client-util.js';
import { formatOption, table } from './output.js';
import { parseLogOffsets } from '../partition/log-offsets.js';

interface CreateOptions extends ClientOptions {
  format: 'table' | 'json';
  partitions?: number;
  replicationFactor?: number;
  retentionHours?: number;
  retentionBytes?: number;
  cleanupPolicy?: 'delete';
}

/** `topic alter`'s retention options (the command itself is in reassign-command.ts, with --replication-factor). */
export interface RetentionAlterOptions {
  retentionHours?: number;
  retentionBytes?: number;
  deleteRetentionMs?: number;
}

export function withRetentionOptions(cmd: Command): Command {
  return (
    cmd
      .option('--retention-hours <n>', 'retention by age, -1 for unlimited', intArg(-1))
      .option('--retention-bytes <n>', 'retention by size per partition, -1 for unlimited', intArg(-1))
      // Offered, unlike on create: the broker refuses it on a topic that is not compacted (every user topic for now), with its reason.
      .option('--delete-retention-ms <n>', "how long a compacted topic's tombstones stay", intArg(0))
  );
}

export function hasRetentionChange(opts: RetentionAlterOptions): boolean {
  return opts.retentionHours !== undefined || opts.retentionBytes !== undefined || opts.deleteRetentionMs !== undefined;
}

/** ALTER_TOPIC with the options given; the line to print (the reply's fields as JSON with --format json). */
export async function alterRetention(conn: Connection, name: string, opts: RetentionAlterOptions & { format: 'table' | 'json' }): Promise<string> {
  const reply = await conn.command('ALTER_TOPIC', { topic: name, retention_hours: opts.retentionHours, retention_bytes: opts.retentionBytes, delete_retention_ms: opts.deleteRetentionMs });
  const p = Object.fromEntries(parseLine(reply).params);
  if (opts.format === 'json') return JSON.stringify(p);
  const limit = (v: string | undefined, unit: string) => (v === '-1' ? 'unlimited' : `${v} ${unit}`);
  return `altered topic ${p.topic}: retention ${limit(p.retention_hours, 'h')} / ${limit(p.retention_bytes, 'B')}, tombstones ${p.delete_retention_ms} ms`;
}

interface ListOptions extends ClientOptions {
  internal?: boolean;
  format: 'table' | 'json';
}

function print(line: string): void {
  process.stdout.write(`${line}\n`);
}

/** A compacted topic's tombstone retention as the summaries show it (a broker of an older version sends none). */
function tombstones(policy: string | undefined, ms: string | number | undefined): string {
  return policy === 'compact' && ms !== undefined ? ` (tombstones ${ms} ms)` : '';
}

export function registerTopicCommand(program: Command): void {
  const topic = program.command('topic').description('create, alter, list, describe and delete topics');

  withBootstrap(
    topic
      .command('create <name>')
      .description('create a topic (idempotent for an identical definition)')
      // Omitted options are left to the broker's defaults (defaultPartitions, retention settings).
      .option('--partitions <n>', 'number of partitions', intArg(1))
      .option('--replication-factor <n>', 'replicas per partition (cluster mode; a standalone broker takes only 1)', intArg(1))
      .option('--retention-hours <n>', 'retention by age, -1 for unlimited', intArg(-1))
      .option('--retention-bytes <n>', 'retention by size per partition, -1 for unlimited', intArg(-1))
      // compact is not offered: the broker refuses it for user topics (compaction is internal-only in this version),
      // and with it the tombstone retention (delete_retention_ms), which only a compacted topic takes.
      .addOption(new Option('--cleanup-policy <policy>', 'delete old segments (compaction is for internal topics only)').choices(['delete']))
      .addOption(formatOption()),
  ).action(async (name: string, opts: CreateOptions) => {
    const reply = await withConnection(opts, (conn) =>
      conn.command('CREATE', {
        topic: name,
        partitions: opts.partitions,
        replication_factor: opts.replicationFactor,
        retention_hours: opts.retentionHours,
        retention_bytes: opts.retentionBytes,
        cleanup_policy: opts.cleanupPolicy,
      }),
    );
    const p = Object.fromEntries(parseLine(reply).params);
    if (opts.format === 'json') {
      print(JSON.stringify(p));
      return;
    }
    const what = `${p.partitions} partitions, replication factor ${p.replication_factor}, retention ${p.retention_hours === '-1' ? 'unlimited' : `${p.retention_hours} h`}, cleanup ${p.cleanup_policy}${tombstones(p.cleanup_policy, p.delete_retention_ms)}`;
    print(p.created === 'false' ? `topic ${p.topic} already exists with this definition (${what})` : `created topic ${p.topic}: ${what}`);
  });

  withBootstrap(
    topic
      .command('list')
      .description('topic names, one per line (internal __ topics with --internal)')
      .option('--internal', 'also list internal topics (__consumer_offsets, __transaction_state)')
      .addOption(formatOption()),
  ).action(async (opts: ListOptions) => {
    const reply = await withConnection(opts, (conn) => conn.command('LIST'));
    const names = (parseLine(reply).params.get('topics') ?? '')
      .split(',')
      .filter((t) => t !== '' && (opts.internal || !t.startsWith('__')))
      .sort();
    if (opts.format === 'json') print(JSON.stringify(names));
    else if (names.length === 0) print('no topics');
    else for (const n of names) print(n);
  });

  withBootstrap(topic.command('describe <name>').description('partitions, leaders, replicas and offsets of a topic').addOption(formatOption())).action(
    async (name: string, opts: ClientOptions & { format: 'table' | 'json' }) => {
      const info = await withConnection(opts, async (conn) => {
        const d = await conn.json<TopicDescription>('DESCRIBE', { topic: name });
        // DESCRIBE answers with this broker's copies (in a cluster they trail, or are empty where it hosts
        // no replica): each partition's offsets from its leader (LIST_OFFSETS), '-' where it cannot be asked.
        for (const p of d.partitions) {
          const entry = await conn.command('LIST_OFFSETS', { topic: name, partition: p.id }).then(
            (r) => parseLogOffsets(p.id, parseLine(r).params.get('offsets') ?? ''),
            () => undefined,
          );
          Object.assign(p, entry ? { earliest: entry.earliest, leo: entry.leo, hwm: entry.hwm, lso: entry.latest } : { earliest: null, leo: null, hwm: null, lso: null });
        }
        return d;
      });
      if (opts.format === 'json') {
        print(JSON.stringify(info, null, 2));
        return;
      }
      print(
        `topic ${info.topic}: ${info.partitions.length} partitions, replication factor ${info.replication_factor}, ` +
          `retention ${info.retention_hours === -1 ? 'unlimited' : `${info.retention_hours} h`} / ${info.retention_bytes === -1 ? 'unlimited' : `${info.retention_bytes} B`}, ` +
          `cleanup ${info.cleanup_policy}${tombstones(info.cleanup_policy, info.delete_retention_ms)}, partitioner ${info.partitioner}${info.idempotent ? ', idempotent' : ''}`,
      );
      const rows = info.partitions.map((p) => [
        String(p.id),
        p.leader ?? '-',
        String(p.leader_epoch),
        p.replicas.join(','),
        p.isr.join(','),
        // '-': no broker that could say (the leader) was reachable.
        String(p.earliest ?? '-'),
        String(p.hwm ?? '-'),
        String(p.leo ?? '-'),
        String(p.lso ?? '-'),
      ]);
      for (const l of table(['PARTITION', 'LEADER', 'EPOCH', 'REPLICAS', 'ISR', 'EARLIEST', 'HWM', 'LEO', 'LSO'], rows)) print(l);
    },
  );

  withBootstrap(topic.command('delete <name>').description('delete a topic and its data').addOption(formatOption())).action(
    async (name: string, opts: ClientOptions & { format: 'table' | 'json' }) => {
      const reply = await withConnection(opts, (conn) => conn.command('DELETE', { topic: name }));
      print(opts.format === 'json' ? JSON.stringify(Object.fromEntries(parseLine(reply).params)) : `deleted topic ${name}`);
    },
  );
}
