/**
 * `tributary consume --group g --max N` whose commits fail (the PostgreSQL offset store stopped): it says
 * so on stderr and exits 1 (README, "Using it": it commits, then leaves), instead of exiting 0 silently.
 */
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrokerProcess, CLI } from '../helpers/launcher.js';
import { type PostgresServer, startPostgres } from '../helpers/postgres.js';
import { envWithoutTributary } from '../helpers/cli.js';
import { trackChild } from '../helpers/process-registry.js';

describe('consume --group when the final commit fails', () => {
  let pgServer: PostgresServer;
  let broker: BrokerProcess;

  beforeAll(async () => {
    pgServer = await startPostgres();
    broker = await BrokerProcess.start({ args: ['--offset-store', 'postgres', '--offset-store-postgres-url', pgServer.connectionString, '--group-join-window-ms', '20'] });
  }, 90_000);

  afterAll(async () => {
    await broker?.dispose();
    await pgServer?.stop();
  });

  it('warns that the records will be read again and exits 1', async () => {
    const raw = await broker.connect();
    await raw.command('CREATE', { topic: 'cf', partitions: 1 });
    await raw.command('PUBLISH', { topic: 'cf', partition: 0, message: 'a' });
    const proc = trackChild(
      spawn(process.execPath, [CLI, 'consume', 'cf', '--group', 'g', '--from-beginning', '--max', '2', '--bootstrap', broker.address], { env: envWithoutTributary(), stdio: ['ignore', 'pipe', 'pipe'] }),
      'cli',
    );
    let stdout = '';
    let stderr = '';
    proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const closed = new Promise<number | null>((resolve) => proc.once('close', resolve));
    // The first record printed means the member joined and fetched; then the store goes away, and the
    // second record brings --max and the final commit.
    await new Promise<void>((resolve) =>
      proc.stdout!.on('data', (d: Buffer) => {
        stdout += d.toString();
        if (stdout.includes('a\n')) resolve();
      }),
    );
    await pgServer.down({ mode: 'immediate' });
    await raw.command('PUBLISH', { topic: 'cf', partition: 0, message: 'b' });
    const code = await closed;
    await raw.close();
    expect(stdout).toBe('a\nb\n');
    expect(stderr).toMatch(/^warning: group g: commit failed: .+; these records will be read again by the group \(partitions 0\)\n$/m);
    expect(code).toBe(1);
  }, 60_000);
});
