import { createReadStream, statSync } from 'node:fs';
import { type Command, Option } from 'commander';
import type { Connection } from 'tributary-protocol/connection.js';
import type { Acks, Batch, BatchRecord } from 'tributary-protocol/batch.js';
import { choosePartition } from 'tributary-client/producer.js';
import { type ClientOptions, connect, formatAddress, intArg, withBootstrap, withConnection } from './client-util.js';
import { parseMetadata } from './consume-command.js';
import { CliError } from './errors.js';
import { ProgressBar } from './progress.js';

interface ProduceOptions extends ClientOptions {
  key?: string;
  partition?: number;
  file?: string;
  acks: '0' | '1' | 'all';
  batchSize: number;
}

/** Batches on the wire at once: enough to hide the round trip, few enough to bound memory. */
const MAX_IN_FLIGHT = 4;
/** Cut a batch early past this many payload bytes so frames stay far below the broker's frame limit. */
const MAX_BATCH_BYTES = 1024 * 1024;

/** Sends batches pipelined on one connection; replies come back in order, so per-partition order holds. */
class PipelinedSender {
  private readonly inFlight = new Set<Promise<void>>();
  private failure: unknown;
  acked = 0;

  constructor(
    private readonly conn: Connection,
    private readonly acks: Acks,
  ) {}

  async send(batch: Batch): Promise<void> {
    while (this.inFlight.size >= MAX_IN_FLIGHT) await Promise.race(this.inFlight);
    this.check();
    const count = batch.records.length;
    const p: Promise<void> = this.conn
      .produceBatch(batch)
      .then(
        () => {
          this.acked += count;
        },
        (err: unknown) => {
          // acks=0 may be answered with a bare `OK` rather than the JSON ack: that is still success.
          if (this.acks === '0' && err instanceof SyntaxError) this.acked += count;
          else this.failure ??= err;
        },
      )
      .finally(() => this.inFlight.delete(p));
    this.inFlight.add(p);
  }

  async drain(): Promise<void> {
    await Promise.all(this.inFlight);
    this.check();
  }

  private check(): void {
    if (this.failure !== undefined) throw this.failure;
  }
}

export async function produce(topic: string, opts: ProduceOptions): Promise<number> {
  let total = 0;
  if (opts.file !== undefined) {
    try {
      total = statSync(opts.file).size;
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      throw new CliError(`error: cannot read ${opts.file}: ${e.code === 'ENOENT' ? 'no such file' : e.message}`);
    }
  }
  const key = opts.key === undefined ? null : Buffer.from(opts.key, 'utf8');
  const partition = opts.partition ?? -1; // -1: by the key's hash, else round-robin per batch (below)
  const input: NodeJS.ReadableStream = opts.file !== undefined ? createReadStream(opts.file) : process.stdin;
  const progress = opts.file !== undefined ? new ProgressBar(total) : undefined;

  return withConnection(opts, async (conn, bootstrap) => {
    // Each batch goes to its partition's leader (METADATA): in a cluster the bootstrap broker leads only
    // some partitions. The partition is chosen here as the broker would (key hash, else round-robin).
    const meta = parseMetadata(await conn.command('METADATA', { topic }));
    if (opts.partition !== undefined && opts.partition >= meta.partitions) {
      throw new CliError(`error: topic ${topic} has ${meta.partitions} partitions (no partition ${opts.partition})`);
    }
    const bootSender = new PipelinedSender(conn, opts.acks);
    const senders = new Map<string, PipelinedSender>();
    const opened: Connection[] = [];
    const senderFor = async (p: number): Promise<PipelinedSender> => {
      const leader = meta.leaders[p];
      if (!leader || formatAddress(leader) === formatAddress(bootstrap)) return bootSender;
      const k = formatAddress(leader);
      let s = senders.get(k);
      if (!s) {
        const c = await connect(leader, undefined, opts);
        opened.push(c);
        s = new PipelinedSender(c, opts.acks);
        senders.set(k, s);
      }
      return s;
    };
    const all = () => [bootSender, ...senders.values()];
    const acked = () => all().reduce((n, s) => n + s.acked, 0);
    let roundRobin = 0;
    const sender = {
      get acked() {
        return acked();
      },
      drain: () => Promise.all(all().map((s) => s.drain())),
    };
    let records: BatchRecord[] = [];
    let bytes = 0;
    let bytesRead = 0;

    const flush = async () => {
      if (records.length === 0) return;
      const p = choosePartition(key, partition >= 0 ? partition : undefined, meta.partitions, () => roundRobin++);
      const batch: Batch = {
        topic,
        partition: p,
        acks: opts.acks,
        idempotent: false,
        firstSequence: 0,
        lastSequence: 0,
        records,
      };
      records = [];
      bytes = 0;
      await (await senderFor(p)).send(batch);
    };

    const add = async (line: Buffer) => {
      // Tolerate CRLF input: the \r is line-ending noise, not part of the record.
      const value = line.length > 0 && line[line.length - 1] === 0x0d ? line.subarray(0, line.length - 1) : line;
      records.push({ offset: 0, sequence: 0, producerId: '', key, epoch: -1, value, timestamp: 0, attributes: 0, headers: [] });
      bytes += value.length + (key?.length ?? 0);
      if (records.length >= opts.batchSize || bytes >= MAX_BATCH_BYTES) await flush();
    };

    // Pieces of a line that spans chunks; joined only once its newline arrives (no quadratic concat).
    let carry: Buffer[] = [];
    try {
      for await (const data of input) {
        const chunk = typeof data === 'string' ? Buffer.from(data, 'utf8') : (data as Buffer);
        bytesRead += chunk.length;
        let start = 0;
        for (let nl = chunk.indexOf(0x0a); nl !== -1; nl = chunk.indexOf(0x0a, start)) {
          const piece = chunk.subarray(start, nl);
          if (carry.length > 0) {
            carry.push(piece);
            await add(Buffer.concat(carry));
            carry = [];
          } else {
            await add(piece);
          }
          start = nl + 1;
        }
        if (start < chunk.length) carry.push(chunk.subarray(start));
        // Piped stdin may be a live feed (tail -f): send what has arrived instead of waiting for a full batch.
        if (opts.file === undefined) await flush();
        progress?.update(bytesRead, sender.acked);
      }
    } catch (err) {
      progress?.finish();
      // fs/stream errors carry a syscall; broker and SDK errors do not and pass through unchanged.
      if (typeof (err as NodeJS.ErrnoException).syscall === 'string') {
        throw new CliError(`error: cannot read ${opts.file ?? 'stdin'}: ${(err as Error).message}`);
      }
      throw err;
    }
    if (carry.length > 0) await add(Buffer.concat(carry)); // last line without a trailing newline
    await flush();
    try {
      await sender.drain();
    } finally {
      progress?.update(bytesRead, sender.acked, true);
      progress?.finish();
      await Promise.all(opened.map((c) => c.close().catch(() => {})));
    }
    return sender.acked;
  });
}

export function registerProduceCommand(program: Command): void {
  withBootstrap(
    program
      .command('produce <topic>')
      .description('send one record per line from stdin or a file')
      .option('--key <key>', 'key for every record (also picks the partition by hash)')
      .option('--partition <n>', 'partition to write to (default: by the key hash, else round-robin per batch)', intArg(0))
      .option('--file <path>', 'read lines from this file instead of stdin (shows progress on a terminal)')
      .addOption(new Option('--acks <acks>', 'acknowledgement level').choices(['0', '1', 'all']).default('1'))
      .option('--batch-size <n>', 'records per batch', intArg(1, 1_000_000), 500)
      .option('--json', 'print the outcome as JSON: {"topic","records"}'),
  ).action(async (topic: string, opts: ProduceOptions & { json?: boolean }) => {
    const count = await produce(topic, opts);
    process.stdout.write(opts.json ? `${JSON.stringify({ topic, records: count })}\n` : `produced ${count} records to ${topic}\n`);
  });
}
