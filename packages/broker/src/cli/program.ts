import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, CommanderError } from 'commander';
import { TributaryError } from 'tributary-protocol/errors.js';
import { registerBrokerCommand } from './broker-command.js';
import { registerClusterCommands } from './cluster-command.js';
import { registerConsumeCommand } from './consume-command.js';
import { CliError, EXIT_FAILURE, EXIT_OK, EXIT_USAGE, formatBrokerError } from './errors.js';
import { registerDlqCommand } from './dlq-command.js';
import { registerGroupCommand } from './group-command.js';
import { registerProduceCommand } from './produce-command.js';
import { registerReassignCommands } from './reassign-command.js';
import { registerTopicCommand } from './topic-command.js';
import { registerUserCommand } from './user-command.js';

/** Found by walking up: the file sits at a different depth under src/ and dist/src/. */
function packageVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      try {
        const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: string; version?: string };
        if (pkg.name === 'tributary-broker' && pkg.version) return pkg.version;
      } catch {
        // keep looking
      }
    }
    dir = dirname(dir);
  }
  return '0.0.0';
}

/** A fresh program per run: commander keeps parsed option values on the instance. */
export function buildProgram(): Command {
  const program = new Command('tributary')
    .description('Tributary partitioned-log message broker')
    .version(packageVersion())
    .exitOverride(); // inherited by subcommands added with .command()
  registerBrokerCommand(program);
  registerTopicCommand(program);
  registerProduceCommand(program);
  registerConsumeCommand(program);
  registerGroupCommand(program);
  registerDlqCommand(program);
  registerUserCommand(program);
  registerClusterCommands(program);
  const sub = (name: string) => program.commands.find((c) => c.name() === name)!;
  registerReassignCommands(program, sub('broker'), sub('topic'));
  refuseRepeatedOptions(program);
  return program;
}

/**
 * An option given twice is refused (exit 2), not settled by the last one: `--partitions 3 --partitions 30`
 * is a mistake either way. None of the CLI's options is meant to repeat.
 */
function refuseRepeatedOptions(cmd: Command): void {
  for (const opt of cmd.options) {
    let seen = false;
    cmd.on(`option:${opt.name()}`, () => {
      if (seen) cmd.error(`error: option '${opt.flags}' given more than once`, { exitCode: EXIT_USAGE, code: 'tributary.repeatedOption' });
      seen = true;
    });
  }
  for (const c of cmd.commands) refuseRepeatedOptions(c);
}

/** Runs the CLI and returns the exit code; messages for failures are already on stderr. */
export async function run(argv: string[]): Promise<number> {
  try {
    await buildProgram().parseAsync(argv);
    return EXIT_OK;
  } catch (err) {
    if (err instanceof CommanderError) {
      // Commander printed its own message (or the help/version text); usage mistakes exit 2.
      return err.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
    }
    if (err instanceof CliError) {
      process.stderr.write(`${err.message}\n`);
      return err.exitCode;
    }
    if (err instanceof TributaryError) {
      process.stderr.write(`${formatBrokerError(err)}\n`);
      return EXIT_FAILURE;
    }
    process.stderr.write(`error: ${err instanceof Error ? err.message : String(err)}\n`);
    return EXIT_FAILURE;
  }
}
