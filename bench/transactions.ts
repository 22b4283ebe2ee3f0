/**
 * `npm run bench -- transactions`: what transactions cost on the write path and on the read path, with
 * the wire protocol through the raw Connection (src/client/connection.ts), against a broker process with
 * the default flush (fsync group commit) on a fresh data dir.
 *
 * 1. Committed transactions/s. Per scenario (records per transaction x concurrent producers), a topic
 *    with --partitions partitions; each producer (own connection, own transactional id) runs for
 *    --duration-s: BEGIN_TXN, then the transaction's TXN_PUBLISH commands pipelined (all sent, then all
 *    awaited; records round-robin over the partitions), then END_TXN result=commit. Printed: txn/s,
 *    records/s, MB/s, END_TXN-to-reply and whole-transaction (BEGIN sent to END answered) p50/p99, broker
 *    CPU per record. As the reference, in the same run, the same producers write the same number of
 *    records to another topic with plain PUBLISH acks=1, pipelined per transaction-sized group; the ratio
 *    transactional/plain records/s is the cost of transactions. Afterwards every partition of the
 *    transactional topic is read with read_committed: each committed record exactly once (by the id in
 *    its payload), nothing else; read_uncommitted must hold one commit marker per (transaction,
 *    partition it wrote). The plain topic must hold every plain record exactly once.
 * 2. Read throughput. One partition holding a mix of committed transactions, aborted transactions and
 *    plain records (binary batches), written by --builders concurrent writers so transactions interleave;
 *    then the whole log is read with CONSUME (one request at a time) in read_uncommitted and
 *    read_committed, alternating (ABBA) for --rounds rounds after a warm-up. Printed per isolation:
 *    delivered records/s, MB/s, log offsets/s (the whole log over the read time, i.e. how fast the log is
 *    got through), broker CPU per log offset; the ratio read_committed/read_uncommitted of medians and
 *    whether it meets the aim (>= 0.9). read_committed must deliver exactly the committed and plain records
 *    (each once, no aborted record, no marker), read_uncommitted every record and marker.
 * A failed check or error exits 1; a missed throughput aim is only reported.
 */
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Connection } from 'tributary-protocol/connection.js';
import type { Batch, BatchRecord } from 'tributary-protocol/batch.js';
import { formatLine, isErrorReply, parseError, parseLine } from 'tributary-protocol/command.js';
import { RecordAttr } from 'tributary-protocol/record.js';
import {
  type BrokerHandle,
  fmtFixed,
  fmtInt,
  installCleanupHandlers,
  keepTempDir,
  makeTempDir,
  median,
  percentile,
  procCpuMs,
  removeTempDir,
  selfCpuMs,
  splitArgs,
  startBroker,
  table,
} from './lib.js';

export const description = 'committed transactions/s (10 and 100 records) vs plain PUBLISH, and read_committed vs read_uncommitted read throughput';

type Isolation = 'read_committed' | 'read_uncommitted';

interface Options {
  phases: Set<'txn' | 'read'>;
  durationMs: number;
  txnSizes: number[];
  producers: number[];
  partitions: number;
  size: number;
  plain: boolean;
  readRecords: number;
  readTxnSize: number;
  abortedFraction: number;
  plainFraction: number;
  builders: number;
  readBatch: number;
  readMaxBytes: number;
  rounds: number;
  warmup: number;
  aim: number;
  brokerArgs: string[];
  brokerNodeArgs: string[];
  keepData: boolean;
  verbose: boolean;
}

const USAGE = `usage: npm run bench -- transactions [options]

Committed transactions/s (vs plain PUBLISH) and read_committed vs read_uncommitted read throughput,
raw wire protocol against a broker process (default flush: fsync group commit), fresh temp data dir.

  --phases <list>            txn (committed transactions/s), read (isolation read throughput)  [txn,read]
 transactions (phase txn):
  --duration-s <n>           transactional run per scenario, seconds                          [5]
  --txn-sizes <list>         records per transaction                                       [10,100]
  --producers <list>         concurrent transactional producers (one connection and id each)  [1,4]
  --partitions <n>           partitions of each scenario's topic; a transaction's records go
                             round-robin over them                                            [4]
  --size <bytes>             payload bytes per record (>= 16)                               [100]
  --no-plain                 skip the plain PUBLISH acks=1 reference
 read throughput (phase read):
  --read-records <n>         records in the mixed log (one partition)                  [300000]
  --read-txn-size <n>        records per transaction and per plain batch                    [100]
  --aborted-fraction <f>     share of the transactions that abort                          [0.1]
  --plain-fraction <f>       share of the records written as plain (non-transactional)     [0.2]
  --builders <n>             concurrent writers building the log (transactions interleave)    [4]
  --read-batch <n>           CONSUME batch= (records per request, <= 10000)                [1000]
  --read-max-bytes <n>       CONSUME max_bytes=                                         [16777216]
  --rounds <n>               measured full reads per isolation (alternating ABBA)             [5]
  --warmup <n>               unmeasured full reads per isolation first                        [1]
  --aim <f>                  read_committed/read_uncommitted ratio to meet                  [0.9]
 general:
  --broker-args "<args>"     extra 'broker start' flags, e.g. "--flush os"
  --broker-node-args "<a>"   node flags for the broker, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof"
  --keep-data                keep the broker data dir
  --verbose                  echo the broker's stderr
  -h, --help
`;

/** Options whose values are flag lists ("--flush os"): glue `--opt value` into `--opt=value` for parseArgs. */
const PASSTHROUGH = new Set(['--broker-args', '--broker-node-args']);

function glueValues(argv: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (PASSTHROUGH.has(a) && i + 1 < argv.length) out.push(`${a}=${argv[++i]}`);
    else out.push(a);
  }
  return out;
}

function parseOptions(argv: string[]): Options | undefined {
  const { values: v } = parseArgs({
    args: glueValues(argv),
    strict: true,
    options: {
      phases: { type: 'string', default: 'txn,read' },
      'duration-s': { type: 'string', default: '5' },
      'txn-sizes': { type: 'string', default: '10,100' },
      producers: { type: 'string', default: '1,4' },
      partitions: { type: 'string', default: '4' },
      size: { type: 'string', default: '100' },
      'no-plain': { type: 'boolean', default: false },
      'read-records': { type: 'string', default: '300000' },
      'read-txn-size': { type: 'string', default: '100' },
      'aborted-fraction': { type: 'string', default: '0.1' },
      'plain-fraction': { type: 'string', default: '0.2' },
      builders: { type: 'string', default: '4' },
      'read-batch': { type: 'string', default: '1000' },
      'read-max-bytes': { type: 'string', default: String(16 * 1024 * 1024) },
      rounds: { type: 'string', default: '5' },
      warmup: { type: 'string', default: '1' },
      aim: { type: 'string', default: '0.9' },
      'broker-args': { type: 'string' },
      'broker-node-args': { type: 'string' },
      'keep-data': { type: 'boolean', default: false },
      verbose: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (v.help) return undefined;
  const int = (name: string, s: string | undefined, min: number, max = Number.MAX_SAFE_INTEGER): number => {
    const n = Number(s);
    if (!Number.isSafeInteger(n) || n < min || n > max) throw new Error(`--${name} must be an integer in [${min}, ${max}] (got ${s})`);
    return n;
  };
  const frac = (name: string, s: string | undefined): number => {
    const n = Number(s);
    if (!(n >= 0 && n <= 1)) throw new Error(`--${name} must be a number in [0, 1] (got ${s})`);
    return n;
  };
  const list = (name: string, s: string | undefined): number[] => {
    const xs = (s ?? '')
      .split(',')
      .map((x) => x.trim())
      .filter(Boolean)
      .map((x) => int(name, x, 1));
    if (xs.length === 0) throw new Error(`--${name} is empty`);
    return xs;
  };
  const phases = new Set<'txn' | 'read'>();
  for (const p of (v.phases ?? '')
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean)) {
    if (p !== 'txn' && p !== 'read') throw new Error(`unknown phase ${p} (txn, read)`);
    phases.add(p);
  }
  if (phases.size === 0) throw new Error('--phases is empty');
  const duration = Number(v['duration-s']);
  if (!(duration > 0)) throw new Error(`--duration-s must be positive (got ${v['duration-s']})`);
  const aim = Number(v.aim);
  if (!(aim > 0)) throw new Error(`--aim must be positive (got ${v.aim})`);
  return {
    phases,
    durationMs: duration * 1000,
    txnSizes: list('txn-sizes', v['txn-sizes']),
    producers: list('producers', v.producers),
    partitions: int('partitions', v.partitions, 1, 10_000),
    size: int('size', v.size, 16, 1024 * 1024),
    plain: v['no-plain'] !== true,
    readRecords: int('read-records', v['read-records'], 1),
    readTxnSize: int('read-txn-size', v['read-txn-size'], 1, 100_000),
    abortedFraction: frac('aborted-fraction', v['aborted-fraction']),
    plainFraction: frac('plain-fraction', v['plain-fraction']),
    builders: int('builders', v.builders, 1, 1000),
    readBatch: int('read-batch', v['read-batch'], 1, 10_000),
    readMaxBytes: int('read-max-bytes', v['read-max-bytes'], 1),
    rounds: int('rounds', v.rounds, 1),
    warmup: int('warmup', v.warmup, 0),
    aim,
    brokerArgs: splitArgs(v['broker-args']),
    brokerNodeArgs: splitArgs(v['broker-node-args']),
    keepData: v['keep-data'] === true,
    verbose: v.verbose === true,
  };
}

// ---------------------------------------------------------------- payloads

/**
 * Payloads are ASCII (they travel in text commands): a tag character, then a fixed-width decimal id,
 * padded with '.' to the record size. Phase 1: `T` + producer (3 digits) + record number (10 digits);
 * phase 2: `C` (committed), `A` (aborted) or `P` (plain) + record id (10 digits).
 */
function payload(prefix: string, size: number): string {
  return prefix.length >= size ? prefix : prefix + '.'.repeat(size - prefix.length);
}

function txnPayload(producer: number, n: number, size: number): string {
  return payload(`T${String(producer).padStart(3, '0')}${String(n).padStart(10, '0')}`, size);
}

function mixPayload(kind: 'C' | 'A' | 'P', id: number, size: number): string {
  return payload(`${kind}${String(id).padStart(10, '0')}`, size);
}

/** Decimal digits of value[from, to) (ASCII), without allocating a string. */
function digits(value: Buffer, from: number, to: number): number {
  let n = 0;
  for (let i = from; i < to; i++) {
    const d = value[i]! - 48;
    if (d < 0 || d > 9) return -1;
    n = n * 10 + d;
  }
  return n;
}

// ---------------------------------------------------------------- raw transactional producer

function kv(reply: string): Map<string, string> {
  return parseLine(reply).params;
}

/** A transactional producer on its own connection, speaking the wire commands (no SDK). */
class TxnProducer {
  producerId = '';
  epoch = -1;

  constructor(
    readonly conn: Connection,
    readonly id: string,
  ) {}

  async init(): Promise<void> {
    const r = kv(await this.conn.command('INIT_PRODUCER_ID', { transactional_id: this.id }));
    this.producerId = r.get('producerId')!;
    this.epoch = Number(r.get('epoch'));
  }

  private ids(): { transactional_id: string; producerId: string; epoch: number } {
    return { transactional_id: this.id, producerId: this.producerId, epoch: this.epoch };
  }

  begin(): Promise<string> {
    return this.conn.command('BEGIN_TXN', this.ids());
  }

  /** Every record's TXN_PUBLISH sent at once (seqNum from 1), then all replies awaited. */
  publishAll(topic: string, records: Array<{ partition: number; message: string }>): Promise<string[]> {
    const ids = this.ids();
    return Promise.all(records.map((r, i) => this.conn.command('TXN_PUBLISH', { ...ids, topic, partition: r.partition, seqNum: i + 1, message: r.message })));
  }

  async end(result: 'commit' | 'abort'): Promise<void> {
    const state = kv(await this.conn.command('END_TXN', { ...this.ids(), result })).get('state');
    const want = result === 'commit' ? 'committed' : 'aborted';
    if (state !== want) throw new Error(`END_TXN ${result} of ${this.id} answered state=${state}`);
  }
}

// ---------------------------------------------------------------- reading a partition

interface ScanResult {
  requests: number;
  /** Bytes of the reply frames. */
  wireBytes: number;
  /** Where the read ended (the trailer's next offset). */
  endOffset: number;
}

/**
 * Reads one partition from offset 0 to its end under `isolation`, one CONSUME at a time, calling
 * `onBatch` with every reply. Needs record_extensions_v1 (the trailer's next offset skips filtered records).
 */
async function scan(
  conn: Connection,
  topic: string,
  partition: number,
  isolation: Isolation,
  batch: number,
  maxBytes: number,
  onBatch: (b: Batch) => void,
): Promise<ScanResult> {
  let offset = 0;
  let requests = 0;
  let wireBytes = 0;
  for (;;) {
    const reply = await conn.request(formatLine('CONSUME', { topic, partition, offset, isolation, batch, max_bytes: maxBytes }));
    requests++;
    if (reply.kind === 'text') {
      if (isErrorReply(reply.text)) throw parseError(reply.text);
      throw new Error(`CONSUME answered text: ${reply.text.slice(0, 120)}`);
    }
    wireBytes += reply.raw.length + 4;
    const b = reply.batch;
    if (!b.trailer) throw new Error('CONSUME reply without a trailer (record_extensions_v1 not negotiated?)');
    onBatch(b);
    const next = b.trailer.nextOffset;
    if (next <= offset && b.records.length === 0) return { requests, wireBytes, endOffset: offset };
    offset = next;
    if (offset >= b.trailer.highWatermark) return { requests, wireBytes, endOffset: offset };
  }
}

const isControl = (r: BatchRecord) => (r.attributes & RecordAttr.CONTROL) !== 0;

async function listOffsets(conn: Connection, topic: string): Promise<Array<{ leo: number; hwm: number; latest: number }>> {
  const csv = kv(await conn.command('LIST_OFFSETS', { topic })).get('offsets') ?? '';
  return csv
    .split(',')
    .filter(Boolean)
    .map((e) => ({ leo: Number(/leo=(\d+)/.exec(e)?.[1]), hwm: Number(/hwm=(\d+)/.exec(e)?.[1]), latest: Number(/latest=(\d+)/.exec(e)?.[1]) }));
}

// ---------------------------------------------------------------- phase 1: committed transactions/s

interface RunStats {
  /** Transactions (or plain groups) completed. */
  units: number;
  records: number;
  elapsedMs: number;
  /** BEGIN_TXN sent to its reply (transactions only). */
  beginLat: number[];
  /** First TXN_PUBLISH sent to the last reply (transactions only). */
  publishLat: number[];
  /** END_TXN sent to its reply (transactions only). */
  endLat: number[];
  /** BEGIN_TXN sent to END_TXN answered; plain: first PUBLISH sent to the last ack. */
  unitLat: number[];
  brokerCpuMs: number;
  clientCpuMs: number;
}

interface Scenario {
  txnSize: number;
  producers: number;
  txn: RunStats;
  plain?: RunStats;
  /** Records read back under read_committed, each counted once. */
  readCommitted: number;
  missing: number;
  duplicates: number;
  foreign: number;
  markers: number;
  expectedMarkers: number;
  plainRead?: number;
  plainMissing?: number;
  plainDuplicates?: number;
  problems: string[];
}

function emptyStats(): RunStats {
  return { units: 0, records: 0, elapsedMs: 0, beginLat: [], publishLat: [], endLat: [], unitLat: [], brokerCpuMs: Number.NaN, clientCpuMs: Number.NaN };
}

/** Partition of record j of transaction (or group) t of producer p: round-robin, starting where the last one left off. */
function partitionOf(p: number, t: number, j: number, size: number, partitions: number): number {
  return (p + t * size + j) % partitions;
}

async function runTxnScenario(broker: BrokerHandle, txnSize: number, producers: number, o: Options): Promise<Scenario> {
  const { host, port } = broker;
  const pid = broker.child.proc.pid;
  const txnTopic = `txn-${txnSize}-p${producers}`;
  const plainTopic = `plain-${txnSize}-p${producers}`;
  const admin = await Connection.connect({ host, port });
  const conns: Connection[] = [];
  const problems: string[] = [];
  try {
    await admin.command('CREATE', { topic: txnTopic, partitions: o.partitions });
    if (o.plain) await admin.command('CREATE', { topic: plainTopic, partitions: o.partitions });
    for (let i = 0; i < producers; i++) conns.push(await Connection.connect({ host, port }));
    const txps = conns.map((c, i) => new TxnProducer(c, `bench-${txnTopic}-${i}`));
    for (const t of txps) await t.init();

    // ---- transactional run
    const txn = emptyStats();
    const committedTxns = new Array<number>(producers).fill(0);
    const b0 = procCpuMs(pid);
    const c0 = selfCpuMs();
    const t0 = performance.now();
    const deadline = t0 + o.durationMs;
    await Promise.all(
      txps.map(async (tp, p) => {
        const records = Array.from({ length: txnSize }, () => ({ partition: 0, message: '' }));
        let t = 0;
        while (performance.now() < deadline) {
          for (let j = 0; j < txnSize; j++) {
            records[j]!.partition = partitionOf(p, t, j, txnSize, o.partitions);
            records[j]!.message = txnPayload(p, t * txnSize + j, o.size);
          }
          const start = performance.now();
          await tp.begin();
          const begun = performance.now();
          await tp.publishAll(txnTopic, records);
          const endSent = performance.now();
          await tp.end('commit');
          const done = performance.now();
          txn.beginLat.push(begun - start);
          txn.publishLat.push(endSent - begun);
          txn.endLat.push(done - endSent);
          txn.unitLat.push(done - start);
          t++;
        }
        committedTxns[p] = t;
      }),
    );
    txn.elapsedMs = performance.now() - t0;
    txn.clientCpuMs = selfCpuMs() - c0;
    const b1 = procCpuMs(pid);
    if (b0 !== undefined && b1 !== undefined) txn.brokerCpuMs = b1 - b0;
    txn.units = committedTxns.reduce((a, b) => a + b, 0);
    txn.records = txn.units * txnSize;
    process.stderr.write(`    transactional: ${txn.units} transactions in ${fmtFixed(txn.elapsedMs / 1000, 1)} s\n`);

    // ---- plain reference: the same producers write the same number of records with PUBLISH acks=1
    let plain: RunStats | undefined;
    let plainGroups: number[] = [];
    if (o.plain) {
      plain = emptyStats();
      const ps = plain;
      const pb0 = procCpuMs(pid);
      const pc0 = selfCpuMs();
      const pt0 = performance.now();
      // Bounded, in case plain produce is far slower than expected: the rate stays valid.
      const cap = pt0 + 4 * o.durationMs;
      const groups = new Array<number>(producers).fill(0);
      await Promise.all(
        conns.map(async (conn, p) => {
          let t = 0;
          while (t < committedTxns[p]! && performance.now() < cap) {
            const start = performance.now();
            const acks: Promise<string>[] = [];
            for (let j = 0; j < txnSize; j++) {
              acks.push(
                conn.command('PUBLISH', {
                  topic: plainTopic,
                  partition: partitionOf(p, t, j, txnSize, o.partitions),
                  acks: '1',
                  message: txnPayload(p, t * txnSize + j, o.size),
                }),
              );
            }
            await Promise.all(acks);
            ps.unitLat.push(performance.now() - start);
            t++;
          }
          groups[p] = t;
        }),
      );
      ps.elapsedMs = performance.now() - pt0;
      ps.clientCpuMs = selfCpuMs() - pc0;
      const pb1 = procCpuMs(pid);
      if (pb0 !== undefined && pb1 !== undefined) ps.brokerCpuMs = pb1 - pb0;
      ps.units = groups.reduce((a, b) => a + b, 0);
      ps.records = ps.units * txnSize;
      process.stderr.write(`    plain: ${ps.units} groups in ${fmtFixed(ps.elapsedMs / 1000, 1)} s\n`);
      plainGroups = groups;
    }

    // ---- verification: read_committed returns every committed record exactly once, nothing else
    const seen = committedTxns.map((n) => new Uint8Array(n * txnSize));
    let readCommitted = 0;
    let duplicates = 0;
    let foreign = 0;
    let markers = 0;
    for (let part = 0; part < o.partitions; part++) {
      await scan(admin, txnTopic, part, 'read_committed', 5000, 16 * 1024 * 1024, (b) => {
        for (const r of b.records) {
          const p = r.value[0] === 84 /* T */ ? digits(r.value, 1, 4) : -1;
          const n = p >= 0 ? digits(r.value, 4, 14) : -1;
          const bits = p >= 0 && p < producers ? seen[p] : undefined;
          if (isControl(r) || !bits || n < 0 || n >= bits.length || partitionOf(p, Math.floor(n / txnSize), n % txnSize, txnSize, o.partitions) !== part) {
            foreign++;
            continue;
          }
          if (bits[n]) duplicates++;
          else {
            bits[n] = 1;
            readCommitted++;
          }
        }
      });
      await scan(admin, txnTopic, part, 'read_uncommitted', 5000, 16 * 1024 * 1024, (b) => {
        for (const r of b.records) if (isControl(r)) markers++;
      });
    }
    const missing = txn.records - readCommitted;
    // One commit marker per (transaction, partition it wrote to): consecutive records go to consecutive partitions.
    const expectedMarkers = txn.units * Math.min(txnSize, o.partitions);
    if (missing !== 0) problems.push(`${txnTopic}: ${missing} committed records missing under read_committed`);
    if (duplicates !== 0) problems.push(`${txnTopic}: ${duplicates} duplicate records under read_committed`);
    if (foreign !== 0) problems.push(`${txnTopic}: ${foreign} unexpected records (or markers) under read_committed`);
    if (markers !== expectedMarkers) problems.push(`${txnTopic}: ${markers} commit markers, expected ${expectedMarkers}`);

    const sc: Scenario = { txnSize, producers, txn, plain, readCommitted, missing, duplicates, foreign, markers, expectedMarkers, problems };
    if (plain) {
      const pseen = plainGroups.map((n) => new Uint8Array(n * txnSize));
      let read = 0;
      let dup = 0;
      let bad = 0;
      for (let part = 0; part < o.partitions; part++) {
        await scan(admin, plainTopic, part, 'read_committed', 5000, 16 * 1024 * 1024, (b) => {
          for (const r of b.records) {
            const p = r.value[0] === 84 ? digits(r.value, 1, 4) : -1;
            const n = p >= 0 ? digits(r.value, 4, 14) : -1;
            const bits = p >= 0 && p < producers ? pseen[p] : undefined;
            if (!bits || n < 0 || n >= bits.length) bad++;
            else if (bits[n]) dup++;
            else {
              bits[n] = 1;
              read++;
            }
          }
        });
      }
      sc.plainRead = read;
      sc.plainMissing = plain.records - read;
      sc.plainDuplicates = dup;
      if (sc.plainMissing !== 0) problems.push(`${plainTopic}: ${sc.plainMissing} plain records missing`);
      if (dup !== 0) problems.push(`${plainTopic}: ${dup} duplicate plain records`);
      if (bad !== 0) problems.push(`${plainTopic}: ${bad} unexpected records`);
    }
    return sc;
  } finally {
    for (const c of conns) await c.close();
    await admin.close();
  }
}

// ---------------------------------------------------------------- phase 2: read throughput

type UnitKind = 'commit' | 'abort' | 'plain';

interface MixLog {
  topic: string;
  committed: number;
  aborted: number;
  plain: number;
  markers: number;
  txnCommitted: number;
  txnAborted: number;
  plainBatches: number;
  leo: number;
  payloadBytes: number;
  buildMs: number;
}

/** Deterministic PRNG (mulberry32) for the order of units. */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

async function buildMixedLog(broker: BrokerHandle, o: Options): Promise<MixLog> {
  const { host, port } = broker;
  const topic = 'readmix';
  const T = o.readTxnSize;
  const units = Math.max(1, Math.ceil(o.readRecords / T));
  const plainUnits = Math.round(units * o.plainFraction);
  const txnUnits = units - plainUnits;
  const abortUnits = Math.round(txnUnits * o.abortedFraction);
  const kinds: UnitKind[] = [];
  for (let i = 0; i < units; i++) kinds.push(i < plainUnits ? 'plain' : i < plainUnits + abortUnits ? 'abort' : 'commit');
  const rnd = mulberry32(0x7b1b);
  for (let i = kinds.length - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1));
    [kinds[i], kinds[j]] = [kinds[j]!, kinds[i]!];
  }
  const admin = await Connection.connect({ host, port });
  const conns: Connection[] = [];
  try {
    await admin.command('CREATE', { topic, partitions: 1 });
    for (let i = 0; i < o.builders; i++) conns.push(await Connection.connect({ host, port }));
    const txps = conns.map((c, i) => new TxnProducer(c, `bench-readmix-${i}`));
    for (const t of txps) await t.init();
    let next = 0;
    let done = 0;
    const t0 = performance.now();
    let lastReport = t0;
    await Promise.all(
      txps.map(async (tp) => {
        for (;;) {
          const u = next++;
          if (u >= units) return;
          const kind = kinds[u]!;
          const tag = kind === 'commit' ? 'C' : kind === 'abort' ? 'A' : 'P';
          if (kind === 'plain') {
            const records: BatchRecord[] = [];
            for (let j = 0; j < T; j++) {
              records.push({
                offset: 0,
                sequence: 0,
                producerId: '',
                key: null,
                epoch: -1,
                value: Buffer.from(mixPayload('P', u * T + j, o.size)),
                timestamp: 0,
                attributes: 0,
                headers: [],
              });
            }
            await tp.conn.produceBatch({ topic, partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records });
          } else {
            await tp.begin();
            await tp.publishAll(
              topic,
              Array.from({ length: T }, (_, j) => ({ partition: 0, message: mixPayload(tag, u * T + j, o.size) })),
            );
            await tp.end(kind);
          }
          done++;
          const now = performance.now();
          if (now - lastReport > 5000) {
            lastReport = now;
            process.stderr.write(`    building: ${done}/${units} units (${fmtFixed((now - t0) / 1000, 0)} s)\n`);
          }
        }
      }),
    );
    const buildMs = performance.now() - t0;
    const [offs] = await listOffsets(admin, topic);
    const log: MixLog = {
      topic,
      committed: (txnUnits - abortUnits) * T,
      aborted: abortUnits * T,
      plain: plainUnits * T,
      markers: txnUnits,
      txnCommitted: txnUnits - abortUnits,
      txnAborted: abortUnits,
      plainBatches: plainUnits,
      leo: offs?.leo ?? Number.NaN,
      payloadBytes: units * T * o.size + txnUnits * 2,
      buildMs,
    };
    if (offs && offs.latest !== offs.leo) throw new Error(`readmix: last stable offset ${offs.latest} != log end ${offs.leo} after every transaction ended`);
    return log;
  } finally {
    for (const c of conns) await c.close();
    await admin.close();
  }
}

interface ReadRun {
  isolation: Isolation;
  warmup: boolean;
  records: number;
  committed: number;
  aborted: number;
  plain: number;
  markers: number;
  duplicates: number;
  payloadBytes: number;
  wireBytes: number;
  requests: number;
  endOffset: number;
  elapsedMs: number;
  brokerCpuMs: number;
  clientCpuMs: number;
}

async function readMixed(conn: Connection, broker: BrokerHandle, log: MixLog, isolation: Isolation, warmup: boolean, o: Options): Promise<ReadRun> {
  const ids = new Uint8Array(Math.ceil(o.readRecords / o.readTxnSize) * o.readTxnSize);
  const run: ReadRun = {
    isolation,
    warmup,
    records: 0,
    committed: 0,
    aborted: 0,
    plain: 0,
    markers: 0,
    duplicates: 0,
    payloadBytes: 0,
    wireBytes: 0,
    requests: 0,
    endOffset: 0,
    elapsedMs: 0,
    brokerCpuMs: Number.NaN,
    clientCpuMs: 0,
  };
  const pid = broker.child.proc.pid;
  const b0 = procCpuMs(pid);
  const c0 = selfCpuMs();
  const t0 = performance.now();
  const res = await scan(conn, log.topic, 0, isolation, o.readBatch, o.readMaxBytes, (b) => {
    const rs = b.records;
    run.records += rs.length;
    for (let i = 0; i < rs.length; i++) {
      const r = rs[i]!;
      const v = r.value;
      run.payloadBytes += v.length;
      if (isControl(r)) {
        run.markers++;
        continue;
      }
      const tag = v[0];
      if (tag === 67 /* C */) run.committed++;
      else if (tag === 65 /* A */) run.aborted++;
      else if (tag === 80 /* P */) run.plain++;
      const id = digits(v, 1, 11);
      if (id >= 0 && id < ids.length) {
        if (ids[id]) run.duplicates++;
        ids[id] = 1;
      }
    }
  });
  run.elapsedMs = performance.now() - t0;
  run.clientCpuMs = selfCpuMs() - c0;
  const b1 = procCpuMs(pid);
  if (b0 !== undefined && b1 !== undefined) run.brokerCpuMs = b1 - b0;
  run.requests = res.requests;
  run.wireBytes = res.wireBytes;
  run.endOffset = res.endOffset;
  return run;
}

function checkRead(r: ReadRun, log: MixLog): string[] {
  const p: string[] = [];
  const what = `${r.isolation}${r.warmup ? ' (warm-up)' : ''}`;
  if (r.duplicates) p.push(`${what}: ${r.duplicates} duplicate records`);
  if (r.endOffset !== log.leo) p.push(`${what}: read ended at offset ${r.endOffset}, log end ${log.leo}`);
  const other = r.records - r.committed - r.aborted - r.plain - r.markers;
  if (other) p.push(`${what}: ${other} records with an unknown payload`);
  if (r.isolation === 'read_committed') {
    if (r.committed !== log.committed) p.push(`${what}: ${r.committed} committed records, expected ${log.committed}`);
    if (r.plain !== log.plain) p.push(`${what}: ${r.plain} plain records, expected ${log.plain}`);
    if (r.aborted !== 0) p.push(`${what}: ${r.aborted} records of aborted transactions delivered`);
    if (r.markers !== 0) p.push(`${what}: ${r.markers} markers delivered`);
  } else {
    if (r.committed !== log.committed || r.aborted !== log.aborted || r.plain !== log.plain || r.markers !== log.markers) {
      p.push(
        `${what}: ${r.committed}/${r.aborted}/${r.plain}/${r.markers} committed/aborted/plain/markers, expected ${log.committed}/${log.aborted}/${log.plain}/${log.markers}`,
      );
    }
  }
  return p;
}

// ---------------------------------------------------------------- output

const perSec = (n: number, ms: number) => (ms > 0 ? (n * 1000) / ms : Number.NaN);
const us = (ms: number, n: number) => (n > 0 ? (ms * 1000) / n : Number.NaN);

function sortedPct(xs: number[], p: number): number {
  const s = Float64Array.from(xs).sort();
  return percentile(s, p);
}

function txnTable(scenarios: Scenario[], o: Options): string {
  const rows: string[][] = [];
  for (const s of scenarios) {
    const name = `${s.txnSize} rec x ${s.producers}p`;
    const t = s.txn;
    rows.push([
      `${name} txn`,
      fmtInt(perSec(t.units, t.elapsedMs)),
      fmtInt(perSec(t.records, t.elapsedMs)),
      fmtFixed(perSec(t.records * o.size, t.elapsedMs) / 1e6, 2),
      fmtFixed(sortedPct(t.beginLat, 50), 1),
      fmtFixed(sortedPct(t.publishLat, 50), 1),
      fmtFixed(sortedPct(t.endLat, 50), 1),
      fmtFixed(sortedPct(t.endLat, 99), 1),
      fmtFixed(sortedPct(t.unitLat, 50), 1),
      fmtFixed(sortedPct(t.unitLat, 99), 1),
      fmtFixed(us(t.brokerCpuMs, t.records), 1),
      fmtFixed(us(t.clientCpuMs, t.records), 1),
      `${fmtInt(s.readCommitted)}/${fmtInt(t.records)}`,
      `${s.missing}/${s.duplicates}`,
    ]);
    const p = s.plain;
    if (p) {
      rows.push([
        `${name} plain`,
        fmtInt(perSec(p.units, p.elapsedMs)),
        fmtInt(perSec(p.records, p.elapsedMs)),
        fmtFixed(perSec(p.records * o.size, p.elapsedMs) / 1e6, 2),
        '-',
        '-',
        '-',
        '-',
        fmtFixed(sortedPct(p.unitLat, 50), 1),
        fmtFixed(sortedPct(p.unitLat, 99), 1),
        fmtFixed(us(p.brokerCpuMs, p.records), 1),
        fmtFixed(us(p.clientCpuMs, p.records), 1),
        `${fmtInt(s.plainRead ?? Number.NaN)}/${fmtInt(p.records)}`,
        `${s.plainMissing ?? '-'}/${s.plainDuplicates ?? '-'}`,
      ]);
    }
  }
  return table(
    [
      'scenario',
      'txn/s',
      'records/s',
      'MB/s',
      'BEGIN p50',
      'publish p50',
      'END p50 ms',
      'END p99 ms',
      'txn p50 ms',
      'txn p99 ms',
      'broker us/rec',
      'client us/rec',
      'read_committed',
      'miss/dup',
    ],
    rows,
  );
}

function readTable(runs: ReadRun[], log: MixLog): string {
  const row = (label: string, r: ReadRun) => [
    label,
    fmtInt(r.records),
    fmtFixed(r.elapsedMs, 0),
    fmtInt(perSec(r.records, r.elapsedMs)),
    fmtFixed(perSec(r.payloadBytes, r.elapsedMs) / 1e6, 1),
    fmtInt(perSec(log.leo, r.elapsedMs)),
    fmtFixed(us(r.brokerCpuMs, log.leo), 2),
    fmtFixed(us(r.clientCpuMs, log.leo), 2),
    fmtInt(r.requests),
  ];
  const rows: string[][] = [];
  const counters: Record<string, number> = {};
  for (const r of runs) {
    if (r.warmup) continue;
    counters[r.isolation] = (counters[r.isolation] ?? 0) + 1;
    rows.push(row(`${r.isolation} #${counters[r.isolation]}`, r));
  }
  for (const iso of ['read_uncommitted', 'read_committed'] as const) {
    const rs = runs.filter((r) => !r.warmup && r.isolation === iso);
    if (rs.length === 0) continue;
    const m = (f: (r: ReadRun) => number) => median(rs.map(f));
    rows.push([
      `${iso} median`,
      fmtInt(m((r) => r.records)),
      fmtFixed(
        m((r) => r.elapsedMs),
        0,
      ),
      fmtInt(m((r) => perSec(r.records, r.elapsedMs))),
      fmtFixed(
        m((r) => perSec(r.payloadBytes, r.elapsedMs) / 1e6),
        1,
      ),
      fmtInt(m((r) => perSec(log.leo, r.elapsedMs))),
      fmtFixed(
        m((r) => us(r.brokerCpuMs, log.leo)),
        2,
      ),
      fmtFixed(
        m((r) => us(r.clientCpuMs, log.leo)),
        2,
      ),
      fmtInt(m((r) => r.requests)),
    ]);
  }
  return table(['read', 'records', 'ms', 'records/s', 'MB/s', 'log offsets/s', 'broker us/offset', 'client us/offset', 'requests'], rows);
}

// ---------------------------------------------------------------- main

export async function run(argv: string[]): Promise<number> {
  let o: Options;
  try {
    const parsed = parseOptions(argv);
    if (!parsed) {
      process.stdout.write(USAGE);
      return 0;
    }
    o = parsed;
  } catch (err) {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n\n${USAGE}`);
    return 2;
  }
  installCleanupHandlers();
  const dir = makeTempDir('tributary-bench-txn-');
  const problems: string[] = [];
  const scenarios: Scenario[] = [];
  const reads: ReadRun[] = [];
  let mix: MixLog | undefined;
  let broker: BrokerHandle | undefined;
  try {
    broker = await startBroker(dir, { nodeArgs: o.brokerNodeArgs, args: o.brokerArgs, echoStderr: o.verbose });
    process.stderr.write(`broker pid ${broker.child.proc.pid} on ${broker.host}:${broker.port}, data dir ${dir}\n`);

    if (o.phases.has('txn')) {
      for (const txnSize of o.txnSizes) {
        for (const producers of o.producers) {
          process.stderr.write(`  transactions of ${txnSize} records, ${producers} producer(s), ${o.durationMs / 1000} s ...\n`);
          const s = await runTxnScenario(broker, txnSize, producers, o);
          scenarios.push(s);
          problems.push(...s.problems);
        }
      }
    }

    if (o.phases.has('read')) {
      process.stderr.write(`  building the mixed log (${fmtInt(o.readRecords)} records, ${o.builders} writers) ...\n`);
      mix = await buildMixedLog(broker, o);
      process.stderr.write(`    built in ${fmtFixed(mix.buildMs / 1000, 1)} s, log end ${fmtInt(mix.leo)}\n`);
      const expectedLeo = mix.committed + mix.aborted + mix.plain + mix.markers;
      if (mix.leo !== expectedLeo) problems.push(`readmix: log end ${mix.leo}, expected ${expectedLeo} (records + markers)`);
      const conn = await Connection.connect({ host: broker.host, port: broker.port });
      try {
        const order: Isolation[] = [];
        for (let i = 0; i < o.warmup; i++) order.push('read_uncommitted', 'read_committed');
        // ABBA: each isolation goes first as often as the other.
        for (let i = 0; i < o.rounds; i++)
          order.push(...((i % 2 === 0 ? ['read_uncommitted', 'read_committed'] : ['read_committed', 'read_uncommitted']) as Isolation[]));
        for (let i = 0; i < order.length; i++) {
          const warm = i < 2 * o.warmup;
          const r = await readMixed(conn, broker, mix, order[i]!, warm, o);
          process.stderr.write(`    ${r.isolation}${warm ? ' (warm-up)' : ''}: ${fmtInt(r.records)} records in ${fmtFixed(r.elapsedMs, 0)} ms\n`);
          reads.push(r);
          problems.push(...checkRead(r, mix));
        }
      } finally {
        await conn.close();
      }
    }
  } catch (err) {
    problems.push(`error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  } finally {
    if (broker) {
      const code = await broker.child.stop(30_000);
      if (code !== 0) problems.push(`broker exited with ${code}: ${broker.child.stderr().slice(-2000)}`);
    }
    if (o.keepData) {
      keepTempDir(dir);
      process.stderr.write(`kept the broker data dir ${dir}\n`);
    } else {
      removeTempDir(dir);
    }
  }

  const out: string[] = [];
  out.push(`\ntransactions (node ${process.version}, broker args: ${o.brokerArgs.join(' ') || '(defaults: flush=always)'})`);
  if (scenarios.length > 0) {
    out.push(
      `\n1. committed transactions: ${o.partitions} partitions per topic, ${o.size} B records round-robin over them, BEGIN_TXN / TXN_PUBLISH pipelined / END_TXN commit, ` +
        `${o.durationMs / 1000} s per scenario; plain = the same records with PUBLISH acks=1 pipelined per group of the transaction's size`,
    );
    out.push(
      '   BEGIN / END = BEGIN_TXN / END_TXN sent to reply, publish = first TXN_PUBLISH sent to last reply (ms); txn = BEGIN_TXN sent to END_TXN reply (plain: group sent to last ack);\n' +
        '   us/rec = CPU microseconds per record (broker: all threads, from /proc); read_committed = distinct records read back / written\n',
    );
    out.push(txnTable(scenarios, o));
    out.push('');
    for (const s of scenarios) {
      if (!s.plain) continue;
      const tr = perSec(s.txn.records, s.txn.elapsedMs);
      const pr = perSec(s.plain.records, s.plain.elapsedMs);
      out.push(
        `ratio transactional/plain records/s, ${s.txnSize} rec x ${s.producers}p: ${fmtFixed(tr / pr, 2)}   ` +
          `(broker CPU per record ${fmtFixed(us(s.txn.brokerCpuMs, s.txn.records) / us(s.plain.brokerCpuMs, s.plain.records), 1)}x; markers ${fmtInt(s.markers)}/${fmtInt(s.expectedMarkers)})`,
      );
    }
  }
  if (mix) {
    out.push(
      `\n2. read throughput: one partition, ${fmtInt(mix.leo)} offsets = ${fmtInt(mix.committed)} committed (${fmtInt(mix.txnCommitted)} txns) + ${fmtInt(mix.aborted)} aborted (${fmtInt(mix.txnAborted)} txns) + ` +
        `${fmtInt(mix.plain)} plain (${fmtInt(mix.plainBatches)} batches) records of ${o.size} B + ${fmtInt(mix.markers)} markers, written by ${o.builders} interleaving writers in ${fmtFixed(mix.buildMs / 1000, 1)} s`,
    );
    out.push(
      `   CONSUME batch=${o.readBatch} max_bytes=${o.readMaxBytes}, one request at a time; ${o.rounds} rounds ABBA after ${o.warmup} warm-up; MB = 10^6 payload bytes delivered; log offsets/s = whole log / read time\n`,
    );
    out.push(readTable(reads, mix));
    const med = (iso: Isolation, f: (r: ReadRun) => number) => median(reads.filter((r) => !r.warmup && r.isolation === iso).map(f));
    const scanRatio = med('read_committed', (r) => perSec(mix!.leo, r.elapsedMs)) / med('read_uncommitted', (r) => perSec(mix!.leo, r.elapsedMs));
    const recRatio = med('read_committed', (r) => perSec(r.records, r.elapsedMs)) / med('read_uncommitted', (r) => perSec(r.records, r.elapsedMs));
    const cpuRatio = med('read_committed', (r) => r.brokerCpuMs) / med('read_uncommitted', (r) => r.brokerCpuMs);
    const rc = reads.filter((r) => !r.warmup && r.isolation === 'read_committed').at(-1);
    out.push('');
    if (rc)
      out.push(
        `read_committed delivered ${fmtInt(rc.records)} = ${fmtInt(rc.committed)} committed + ${fmtInt(rc.plain)} plain (expected ${fmtInt(mix.committed + mix.plain)}), 0 aborted expected: ${fmtInt(rc.aborted)}`,
      );
    out.push(
      `ratio read_committed/read_uncommitted, whole-log read rate (log offsets/s): ${fmtFixed(scanRatio, 2)}  aim >= ${o.aim}: ${scanRatio >= o.aim ? 'met' : 'NOT met'}`,
    );
    out.push(`ratio read_committed/read_uncommitted, delivered records/s: ${fmtFixed(recRatio, 2)}  aim >= ${o.aim}: ${recRatio >= o.aim ? 'met' : 'NOT met'}`);
    out.push(`broker CPU for a whole read, read_committed/read_uncommitted: ${fmtFixed(cpuRatio, 2)}x`);
  }
  for (const p of problems) out.push(`FAIL ${p}`);
  out.push(problems.length > 0 ? '\ntransactions: FAILED' : '\ntransactions: ok');
  process.stdout.write(`${out.join('\n')}\n`);
  return problems.length > 0 ? 1 : 0;
}
