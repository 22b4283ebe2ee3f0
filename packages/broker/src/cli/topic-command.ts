import { type Command, Option } from 'commander';
import { type ClientOptions, intArg, withBootstrap, withConnection } from './client-util.js';

interface CreateOptions extends ClientOptions {
  partitions?: number;
  replicationFactor?: number;
  retentionHours?: number;
  retentionBytes?: number;
  cleanupPolicy?: 'delete' | 'compact';
}

function print(line: string): void {
  process.stdout.write(`${line}\n`);
}

export function registerTopicCommand(program: Command): void {
  const topic = program.command('topic').description('create, list, describe and delete topics');

  withBootstrap(
    topic
      .command('create <name>')
      .description('create a topic (idempotent for an identical definition)')
      // Omitted options are left to the broker's defaults (defaultPartitions, retention settings).
      .option('--partitions <n>', 'number of partitions', intArg(1))
      .option('--replication-factor <n>', 'replicas per partition (cluster mode; a standalone broker takes only 1)', intArg(1))
      .option('--retention-hours <n>', 'retention by age, -1 for unlimited', intArg(-1))
      .option('--retention-bytes <n>', 'retention by size per partition, -1 for unlimited', intArg(-1))
      .addOption(new Option('--cleanup-policy <policy>', 'delete old segments or compact by key').choices(['delete', 'compact'])),
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
    print(reply);
  });

  withBootstrap(topic.command('list').description('list topics')).action(async (opts: ClientOptions) => {
    print(await withConnection(opts, (conn) => conn.command('LIST')));
  });

  withBootstrap(topic.command('describe <name>').description('partitions, leaders and offsets of a topic as JSON')).action(
    async (name: string, opts: ClientOptions) => {
      const info = await withConnection(opts, (conn) => conn.json('DESCRIBE', { topic: name }));
      print(JSON.stringify(info, null, 2));
    },
  );

  withBootstrap(topic.command('delete <name>').description('delete a topic and its data')).action(
    async (name: string, opts: ClientOptions) => {
      print(await withConnection(opts, (conn) => conn.command('DELETE', { topic: name })));
    },
  );
}
