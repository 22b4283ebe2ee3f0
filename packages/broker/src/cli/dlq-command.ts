import type { Command } from 'commander';
import { type ClientOptions, withBootstrap } from './client-util.js';
import { withAdmin } from './group-command.js';

interface ReplayOptions extends ClientOptions {
  group?: string;
  transactionalId?: string;
  json?: boolean;
}

function print(line: string): void {
  process.stdout.write(`${line}\n`);
}

/**
 * `tributary dlq replay <topic>`: moves a dead-letter topic of run({ retryTopics }) back to the source
 * topics, exactly once across a crash of the replayer (docs/sdk.md, "Retry and dead-letter topics").
 */
export function registerDlqCommand(program: Command): void {
  const dlq = program.command('dlq').description('dead-letter topics of run({ retryTopics })');
  withBootstrap(
    dlq
      .command('replay <deadLetterTopic>')
      .description('write every message the dead-letter topic holds now back to the topic it was first read from (without the retry headers)')
      .option('--group <group>', 'the group whose offsets record what was replayed (default <deadLetterTopic>.replay)')
      .option('--transactional-id <id>', 'transactional id of the replayer (default <group>.replayer)')
      .option('--json', 'print the counts as JSON'),
  ).action(async (topic: string, opts: ReplayOptions) => {
    const r = await withAdmin(opts, (admin) =>
      admin.replayDeadLetters({ deadLetterTopic: topic, ...(opts.group !== undefined ? { groupId: opts.group } : {}), ...(opts.transactionalId !== undefined ? { transactionalId: opts.transactionalId } : {}) }),
    );
    if (opts.json) {
      print(JSON.stringify({ deadLetterTopic: topic, ...r }));
      return;
    }
    const total = Object.values(r.replayed).reduce((a, b) => a + b, 0);
    print(`replayed ${total} message${total === 1 ? '' : 's'} from ${topic}${r.skipped > 0 ? ` (${r.skipped} without retry headers passed over)` : ''}`);
    for (const [t, n] of Object.entries(r.replayed)) print(`  ${t}: ${n}`);
  });
}
