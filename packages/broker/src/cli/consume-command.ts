import { once } from 'node:events';
import { type Command, Option } from 'commander';
import type { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { BatchRecord } from 'tributary-protocol/batch.js';
import { RecordAttr } from 'tributary-protocol/record.js';
import { type Address, type ClientOptions, clientSecurity, connect, connectAny, formatAddress, intArg, parseAddress, parseBootstrap, parseBootstrapList, toCliError, withBootstrap } from './client-util.js';
import { CliError, usageError } from './errors.js';

type Isolation = 'read_committed' | 'read_uncommitted';

export interface ConsumeOptions extends ClientOptions {
  group?: string;
  partition?: number;
  fromBeginning?: boolean;
  offset?: number;
  follow?: boolean;
  max?: number;
  format: 'lines' | 'json';
  isolation: Isolation;
}

/** Long-poll per CONSUME when following; below the broker's default maxWaitMs (30 s). */
const FOLLOW_WAIT_MS = 5000;
const FETCH_RECORDS = 500;

export interface PartitionOffsets {
  earliest: number;
  latest: number;
  leo?: number;
  hwm?: number;
}

/** `OK topic=t partitions=n leaders=h:p,h:p epochs=...` → partition count and leader per partition. */
export function parseMetadata(reply: string): { partitions: number; leaders: Array<Address | undefined> } {
  const params = parseLine(reply).params;
  const partitions = Number(params.get('partitions'));
  if (!Number.isSafeInteger(partitions) || partitions < 0) {
    throw new CliError(`error: unexpected METADATA reply: ${reply.slice(0, 200)}`);
  }
  const leaders = (params.get('leaders') ?? '').split(',').map((s) => parseAddress(s.trim()));
  return { partitions, leaders };
}

/** `offsets=P0:earliest=0:latest=5:leo=5:hwm=5,P1:...` → offsets by partition. */
export function parseListOffsets(reply: string): Map<number, PartitionOffsets> {
  const out = new Map<number, PartitionOffsets>();
  const csv = parseLine(reply).params.get('offsets') ?? '';
  for (const entry of csv.split(',')) {
    if (entry === '') continue;
    const [head, ...pairs] = entry.split(':');
    const p = Number(head?.replace(/^P/, ''));
    const vals: Record<string, number> = {};
    for (const pair of pairs) {
      const [k, v] = pair.split('=');
      if (k !== undefined && v !== undefined) vals[k] = Number(v);
    }
    if (!Number.isSafeInteger(p) || vals.earliest === undefined || vals.latest === undefined) {
      throw new CliError(`error: unexpected LIST_OFFSETS reply: ${reply.slice(0, 200)}`);
    }
    out.set(p, { earliest: vals.earliest, latest: vals.latest, leo: vals.leo, hwm: vals.hwm });
  }
  return out;
}

/** Where reading is complete for this isolation level: read_committed stops at the last stable offset. */
function endOffset(o: PartitionOffsets, isolation: Isolation): number {
  return isolation === 'read_committed' ? o.latest : (o.hwm ?? o.leo ?? o.latest);
}

export function formatRecord(topic: string, partition: number, r: BatchRecord, format: 'lines' | 'json'): Buffer {
  if (format === 'lines') return Buffer.concat([r.value, NEWLINE]);
  const obj = {
    topic,
    partition,
    offset: r.offset,
    timestamp: r.timestamp,
    key: r.key === null ? null : r.key.toString('utf8'),
    value: r.value.toString('utf8'),
    headers: r.headers.map((h) => ({ key: h.key, value: h.value.toString('utf8') })),
  };
  return Buffer.from(`${JSON.stringify(obj)}\n`, 'utf8');
}

const NEWLINE = Buffer.from('\n');

interface PartitionState {
  partition: number;
  offset: number;
  end: number;
  conn: Connection;
  addr: Address;
  /** An explicit --offset outside the log: ask anyway, so the broker's OFFSET_OUT_OF_RANGE reaches the user. */
  outOfRange: boolean;
}

/**
 * `consume --group <g>`: a member of the group (the SDK Consumer). It reads the partitions the group
 * gives it from the group's committed offsets (else from the start with --from-beginning, or the end),
 * commits as it goes and, on Ctrl-C or after --max records, commits what it printed and leaves.
 */
async function consumeInGroup(topic: string, group: string, opts: ConsumeOptions): Promise<void> {
  for (const [flag, given] of [
    ['--partition', opts.partition !== undefined],
    ['--offset', opts.offset !== undefined],
    ['--follow', opts.follow === true],
  ] as const) {
    if (given) throw usageError(`${flag} cannot be combined with --group (a group member reads what the group assigns it, and follows until stopped)`);
  }
  const list = parseBootstrapList(opts.bootstrap);
  const { Consumer } = await import('tributary-client/consumer.js');
  let consumer: InstanceType<typeof Consumer>;
  try {
    consumer = new Consumer({
      brokers: list.map(formatAddress),
      groupId: group,
      topic,
      clientId: 'tributary-cli',
      autoOffsetReset: opts.fromBeginning ? 'earliest' : 'latest',
      isolation: opts.isolation,
      ...clientSecurity(opts),
    });
  } catch (err) {
    // The SDK's option check: here the options are command-line input (a bad --group, say), a usage error.
    if (err instanceof TributaryError && err.code === 'invalid_config') throw usageError(err.message);
    throw err;
  }
  const stop = () => void consumer.close();
  // What the consumer retries (a broker that stopped answering, a failed commit) is said once per kind,
  // so a member that cannot make progress does not sit there without a word.
  const warned = new Set<string>();
  consumer.on('crash', ({ error, fatal }) => {
    const kind = error instanceof TributaryError ? error.code : error.message;
    if (fatal || warned.has(kind)) return;
    warned.add(kind);
    process.stderr.write(`warning: ${error.message} (retrying)\n`);
  });
  const onStdoutError = (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') stop();
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  process.stdout.on('error', onStdoutError);
  // What was printed and what the group has committed, by partition: the README promises that the
  // command "commits, then leaves", so a printed record left uncommitted at the end is said (exit 1).
  const printed = new Map<number, number>();
  const committed = new Map<number, number>();
  consumer.on('commit', ({ offsets }) => {
    for (const { partition, offset } of offsets) committed.set(partition, Math.max(committed.get(partition) ?? 0, offset));
  });
  let commitError: unknown;
  let remaining = opts.max ?? Number.POSITIVE_INFINITY;
  let failure: unknown;
  try {
    for await (const m of consumer) {
      const buf = formatRecord(topic, m.partition, { ...m, sequence: 0, producerId: '', epoch: -1, attributes: 0 }, opts.format);
      if (!process.stdout.write(buf)) await once(process.stdout, 'drain');
      printed.set(m.partition, m.offset + 1);
      if (--remaining <= 0) {
        // Leaving the loop counts nothing (a throw leaves it too): the last record printed is counted
        // here. A failure is kept for the message: close()'s final commit tries once more.
        await consumer.commit({ message: m }).catch((err: unknown) => {
          commitError = err;
        });
        break;
      }
    }
  } catch (err) {
    failure = err;
  } finally {
    await consumer.close();
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
    process.stdout.off('error', onStdoutError);
  }
  if (failure !== undefined) throw toCliError(failure, list[0]);
  const uncommitted = [...printed].filter(([p, next]) => (committed.get(p) ?? 0) < next).map(([p]) => p);
  if (uncommitted.length > 0) {
    const why = commitError instanceof Error ? commitError.message : 'the final commit did not complete before leaving';
    throw new CliError(`warning: group ${group}: commit failed: ${why}; these records will be read again by the group (partitions ${uncommitted.join(',')})`);
  }
}

export async function consume(topic: string, opts: ConsumeOptions): Promise<void> {
  if (opts.group !== undefined) return consumeInGroup(topic, opts.group, opts);
  if (opts.fromBeginning && opts.offset !== undefined) throw usageError('--from-beginning and --offset cannot be combined');
  let bootstrap: Address = parseBootstrap(opts.bootstrap); // checks every address: exit 2 before anything connects
  const follow = opts.follow === true;
  const conns = new Set<Connection>();
  const abort = new AbortController();
  let stopped = false;
  let stopWake: () => void = () => {};
  const stoppedPromise = new Promise<'stopped'>((resolve) => {
    stopWake = () => resolve('stopped');
  });
  const stop = () => {
    if (stopped) return;
    stopped = true;
    abort.abort();
    stopWake();
    // Not awaited: pending long-polls are abandoned, and the process is about to end anyway.
    for (const c of conns) void c.close();
  };
  const onSignal = () => stop();
  const onStdoutError = (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') stop(); // reader went away (e.g. `| head`): a normal end, not a failure
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  process.stdout.on('error', onStdoutError);

  const open = async (addr: Address): Promise<Connection> => {
    const c = await connect(addr, abort.signal, opts);
    conns.add(c);
    if (stopped) void c.close();
    return c;
  };

  let remaining = opts.max ?? Number.POSITIVE_INFINITY;

  const write = async (buf: Buffer) => {
    if (buf.length === 0 || stopped) return;
    if (!process.stdout.write(buf)) await Promise.race([once(process.stdout, 'drain'), stoppedPromise]);
  };

  /** One CONSUME; returns whether the partition made progress. */
  const fetchOnce = async (s: PartitionState, waitMs: number): Promise<boolean> => {
    try {
      return await fetchFrom(s, waitMs);
    } catch (err) {
      throw toCliError(err, s.addr);
    }
  };

  const fetchFrom = async (s: PartitionState, waitMs: number): Promise<boolean> => {
    const req = s.conn.consume({
      topic,
      partition: s.partition,
      offset: s.offset,
      isolation: opts.isolation,
      batch: Math.min(FETCH_RECORDS, remaining),
      wait_ms: waitMs > 0 ? waitMs : undefined,
    });
    req.catch(() => {}); // a long-poll abandoned on stop must not surface as an unhandled rejection
    const batch = await Promise.race([req, stoppedPromise]);
    if (batch === 'stopped') return false;
    const before = s.offset;
    const out: Buffer[] = [];
    for (const r of batch.records) {
      if (r.offset < s.offset) continue; // a broker may answer from an earlier batch boundary
      if (!follow && r.offset >= s.end) break; // stop at the end seen when we started
      s.offset = r.offset + 1;
      if ((r.attributes & RecordAttr.CONTROL) !== 0) continue; // transaction markers are not user data
      if (remaining <= 0) break;
      out.push(formatRecord(topic, s.partition, r, opts.format));
      remaining--;
    }
    // The trailer skips past records the broker filtered out (aborted transactions).
    const next = batch.trailer?.nextOffset;
    if (next !== undefined && next > s.offset && remaining > 0) s.offset = follow ? next : Math.min(next, s.end);
    await write(Buffer.concat(out));
    // Other partitions may sit in a long-poll: wake them all once the --max budget is spent.
    if (remaining <= 0) stop();
    return s.offset > before;
  };

  try {
    const first = await connectAny(opts.bootstrap, abort.signal, opts);
    bootstrap = first.addr;
    conns.add(first.conn);
    const boot = first.conn;
    const meta = parseMetadata(await boot.command('METADATA', { topic }));
    let partitions: number[];
    if (opts.partition !== undefined) {
      if (opts.partition >= meta.partitions) {
        throw new CliError(`error: partition_not_found topic=${topic} partition=${opts.partition}`);
      }
      partitions = [opts.partition];
    } else {
      partitions = Array.from({ length: meta.partitions }, (_, i) => i);
    }
    const offsets = parseListOffsets(await boot.command('LIST_OFFSETS', { topic, partition: opts.partition }));

    // Reads go to each partition's leader. Following keeps one long-poll per partition, so each gets its
    // own connection (replies on a connection are in order: one idle partition would block the rest).
    const shared = new Map<string, Connection>([[formatAddress(bootstrap), boot]]);
    const connFor = async (addr: Address): Promise<Connection> => {
      if (follow) return open(addr);
      const k = formatAddress(addr);
      let c = shared.get(k);
      if (!c) {
        c = await open(addr);
        shared.set(k, c);
      }
      return c;
    };

    const states: PartitionState[] = [];
    for (const p of partitions) {
      const o = offsets.get(p);
      if (!o) throw new CliError(`error: no offsets for partition ${p} in LIST_OFFSETS reply`);
      const end = endOffset(o, opts.isolation);
      const start = opts.offset ?? (opts.fromBeginning ? o.earliest : end);
      const outOfRange = start < o.earliest || start > (o.leo ?? end);
      const addr = meta.leaders[p] ?? bootstrap;
      states.push({ partition: p, offset: start, end, conn: await connFor(addr), addr, outOfRange });
      if (stopped) return;
    }

    if (follow) {
      await Promise.all(
        states.map(async (s) => {
          while (!stopped && remaining > 0) await fetchOnce(s, FOLLOW_WAIT_MS);
        }),
      );
    } else {
      // Partition by partition, so the output order is deterministic.
      for (const s of states) {
        if (s.outOfRange) await fetchOnce(s, 0);
        while (!stopped && remaining > 0 && s.offset < s.end) {
          if (!(await fetchOnce(s, 0))) break; // nothing more readable (e.g. an open transaction)
        }
      }
    }
  } catch (err) {
    if (stopped) return; // errors from connections we closed on purpose
    stop();
    throw toCliError(err, bootstrap);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    if (!stopped) {
      stopped = true;
      stopWake();
      await Promise.all([...conns].map((c) => c.close()));
    }
  }
}

export function registerConsumeCommand(program: Command): void {
  withBootstrap(
    program
      .command('consume <topic>')
      .description('print records of a topic, one per line')
      .option('--group <group>', 'read as a member of this consumer group: commits as it goes, leaves on Ctrl-C')
      .option('--partition <n>', 'read only this partition (default: all)', intArg(0))
      .option('--from-beginning', 'start at the earliest retained offset (with --group: only where the group has no committed offset)')
      .option('--offset <n>', 'start at this offset', intArg(0))
      .option('--follow', 'keep waiting for new records instead of stopping at the end')
      .option('--max <n>', 'stop after this many records', intArg(1))
      .addOption(new Option('--format <format>', 'output format').choices(['lines', 'json']).default('lines'))
      .addOption(
        new Option('--isolation <level>', 'read only committed records, or everything').choices(['read_committed', 'read_uncommitted']).default('read_committed'),
      ),
  ).action(async (topic: string, opts: ConsumeOptions) => {
    await consume(topic, opts);
  });
}
