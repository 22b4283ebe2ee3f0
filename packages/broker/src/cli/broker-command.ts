import { type Command, Option } from 'commander';
import type { Broker } from '../broker/broker.js';
import type { BrokerConfig } from '../common/config.js';
import type { Logger } from '../common/logger.js';
import { formatAddress } from './client-util.js';
import { type FirstSignal, signalAction } from './signal-repeat.js';
import { CONFIG_FIELDS, type ConfigField, fieldHelp, loadBrokerConfig } from './config-loader.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { CliError, EXIT_FAILURE, EXIT_USAGE } from './errors.js';

function placeholder(f: ConfigField): string {
  switch (f.kind.type) {
    case 'integer':
    case 'number':
      return 'n';
    case 'enum':
      return 'mode';
    case 'boolean':
      return 'bool';
    case 'json':
      return 'json';
    default:
      return 'value';
  }
}

/**
 * Why the broker did not start, as a CliError: a configuration problem found by the broker itself (a TLS
 * file that does not parse, a data directory that is a file) exits 2 as the loader's do (errors.ts),
 * anything else 1.
 */
function startError(err: unknown, config: BrokerConfig): CliError {
  if (err instanceof Error && err.message.startsWith('invalid config: ')) return new CliError(err.message, EXIT_USAGE);
  return new CliError(describeStartError(err, config));
}

function describeStartError(err: unknown, config: BrokerConfig): string {
  const e = err as NodeJS.ErrnoException & { address?: string; port?: number };
  const where = e.port !== undefined ? formatAddress({ host: e.address ?? config.host, port: e.port }) : undefined;
  if (e.code === 'EADDRINUSE' && where) return `error: broker failed to start: ${where} is already in use`;
  if (e.code === 'EADDRNOTAVAIL' && where) return `error: broker failed to start: cannot bind ${where} (address not available)`;
  if (e.code === 'EACCES' && where) return `error: broker failed to start: permission denied binding ${where}`;
  const msg = err instanceof Error ? err.message : String(err);
  return `error: broker failed to start: ${msg}`;
}

/** Resolve the config, run the broker until SIGTERM/SIGINT, stop it gracefully. Resolves when stopped. */
export async function runBroker(opts: Record<string, unknown>): Promise<void> {
  // Before anything is created: the data directory and its files hold records of ACL-protected topics, so
  // no group or other access whatever the caller's umask (docs/security.md "Secrets").
  process.umask(0o077);
  const flags: Record<string, unknown> = {};
  for (const f of CONFIG_FIELDS) if (opts[f.key] !== undefined) flags[f.key] = opts[f.key];
  const loaded = loadBrokerConfig({ flags, env: process.env, configFile: opts.config as string | undefined });
  if (!loaded.ok) throw new CliError(loaded.errors.join('\n'), EXIT_USAGE);
  const config = loaded.config;

  let broker: Broker;
  let started: Promise<void>;
  let logger: Logger;
  try {
    // Loaded here, not at the top: client commands then start without loading storage, metrics and pino.
    const { Broker: BrokerClass } = await import('../broker/broker.js');
    const { createLogger } = await import('../common/logger.js');
    const { keepHeapHeadroom } = await import('../common/heap-headroom.js');
    keepHeapHeadroom(config.heapHeadroomMb);
    logger = createLogger(config.logLevel, 'tributary', config.logFormat);
    broker = new BrokerClass(config, logger);
    started = broker.start();
  } catch (err) {
    throw startError(err, config);
  }

  // Handlers go in before start() settles so a signal during recovery still shuts down cleanly.
  const stopped = new Promise<void>((resolve, reject) => {
    let first: FirstSignal | undefined;
    const onSignal = (sig: NodeJS.Signals) => {
      const action = signalAction(first, sig, performance.now());
      if (action === 'ignore') {
        logger.info({ signal: sig }, 'repeated signal within 1 s of the first: one request, ignored');
        return;
      }
      if (action === 'exit') {
        process.stderr.write(`tributary broker: second ${sig}, exiting without a clean shutdown\n`);
        process.exit(1);
      }
      first = { signal: sig, at: performance.now() };
      logger.info({ signal: sig }, 'shutting down');
      broker.abortStart(`${sig} during recovery`); // a recovery waiting for its offset store must not hold the stop
      started.then(
        () =>
          broker.stop(sig).then(resolve, (err: unknown) => {
            reject(new CliError(`error: broker shutdown failed: ${err instanceof Error ? err.message : String(err)}`));
          }),
        () => {}, // a failed start is reported (and exits) through the start path
      );
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  });
  stopped.catch(() => {}); // observed below; this only keeps an early rejection from counting as unhandled

  try {
    await started;
  } catch (err) {
    logger.debug({ err }, 'broker failed to start'); // the stack, for when the one-line reason is not enough
    // Best effort, bounded: let a half-started broker release what it opened before we exit.
    await Promise.race([broker.stop('start failed').catch(() => {}), new Promise((r) => setTimeout(r, 2000).unref())]);
    throw startError(err, config);
  }
  if (broker.startFailed && config.exitOnStartupFailure) {
    await Promise.race([broker.stop('start failed').catch(() => {}), new Promise((r) => setTimeout(r, 2000).unref())]);
    // A configuration problem the broker finds itself exits 2, as the ones found before it starts
    // (docs/operations.md, "Configuration problems the broker finds itself"): a restart will not fix it.
    const invalid = broker.recoveryError instanceof TributaryError && broker.recoveryError.code === 'invalid_config';
    throw new CliError(`error: broker failed to start: ${broker.recoveryError?.message ?? 'recovery failed'}`, invalid ? EXIT_USAGE : EXIT_FAILURE);
  }
  // SIGHUP: re-read users, topic and group ACLs (revocation without a restart). Other settings need a restart.
  process.on('SIGHUP', () => {
    const again = loadBrokerConfig({ flags, env: process.env, configFile: opts.config as string | undefined });
    if (!again.ok) {
      logger.error({ errors: again.errors }, 'SIGHUP: config invalid; users and ACLs unchanged');
      return;
    }
    broker.reloadSecurity(again.config.users, again.config.topicAcls, again.config.groupAcls);
  });
  const host = config.host;
  process.stdout.write(
    `tributary broker listening on ${formatAddress({ host, port: broker.port })} ` +
      `(health ${formatAddress({ host, port: broker.healthPort })}, data ${config.dataDir}; ` +
      `health paths /live /ready /metrics; TLS ${config.tlsCert ? 'on' : 'off'}, authentication ${config.authentication ? 'on' : 'off'}` +
      `${broker.kafka ? `; Kafka protocol on ${formatAddress({ host: config.kafkaHost ?? host, port: broker.kafka.port })}` : broker.kafkaSkipped ? `; Kafka protocol off: ${broker.kafkaSkipped}` : ''}` +
      `${broker.recoveryError ? `; NOT READY: ${broker.recoveryError.message}` : ''})\n`,
  );
  await stopped;
}

export function registerBrokerCommand(program: Command): void {
  const broker = program.command('broker').description('run a Tributary broker');
  const start = broker
    .command('start')
    .description('start a broker; settings come from flags > TRIBUTARY_* env > --config file > defaults')
    .option('--config <file>', 'YAML (.yaml/.yml) or JSON (.json) file of settings; unknown keys are an error');
  // One flag per schema key, so a setting added to the schema is configurable without touching the CLI.
  // A boolean flag alone means true (`--cluster`); `--cluster false` also works.
  for (const f of CONFIG_FIELDS)
    start.addOption(new Option(f.kind.type === 'boolean' ? `--${f.flag} [bool]` : `--${f.flag} <${placeholder(f)}>`, fieldHelp(f)));
  start.action(async (opts: Record<string, unknown>) => {
    await runBroker(opts);
  });
}
