/**
 * Consumer worker of the produce-consume benchmark (a child process).
 *
 *   node dist/bench/pc-consumer.js --host H --port P --topic T --partitions 12 --count N --size S
 *        [--target broker|relay] [--fetch-records 5000] [--fetch-bytes 4194304] [--linger-ms 300]
 *        [--grace-ms 10000]
 *
 * One push-stream connection per partition (broker: `STREAM topic= partition= offset=0`; relay:
 * `STREAM partition=`, the relay spreads frames over the connections). Every batch frame is decoded with
 * the protocol's decodeBatch; each record's id is checked against a bitmap of N ids (missing, duplicate,
 * foreign) and its end-to-end latency (receive time − send time in the payload) recorded.
 *
 * `--warmup N --warmup-topic T`: reads N records of T first, on streams closed before the measured ones
 * open, so the measured pass runs on compiled code.
 * Prints {"event":"ready"} once the streams are open, then one {"event":"result",...} line when all N
 * ids arrived (plus `linger-ms` to catch late duplicates), or when `done` was written to stdin (the
 * producer finished) and nothing new arrived for `grace-ms`.
 */
import net from 'node:net';
import { decodeBatch, isBatchBody } from 'tributary-protocol/batch.js';
import { formatLine } from 'tributary-protocol/command.js';
import { FrameDecoder, encodeFrame } from 'tributary-protocol/frame.js';
import { WARMUP_FLAGS, workerArgs } from './worker-args.js';
import { nowMs, report, selfCpuMs } from './lib.js';
import { PAYLOAD_HEADER_BYTES } from './pc-payload.js';
import { Tally, finishAfterProducer } from './pc-tally.js';

const args = workerArgs('pc-consumer', {
  'fetch-records': { type: 'string', default: '5000' },
  'fetch-bytes': { type: 'string', default: String(4 * 1024 * 1024) },
  'linger-ms': { type: 'string', default: '300' },
  'grace-ms': { type: 'string', default: '10000' },
  ...WARMUP_FLAGS,
}, 0);
const { a, int } = args;
// Annotated: a call through it then ends control flow, as the function it replaces did.
const fail: (msg: string) => never = args.fail;


const host = a.host!;
const port = int('port', a.port, 1);
const topic = a.topic!;
const partitions = int('partitions', a.partitions, 1);
const total = int('count', a.count, 1);
const size = int('size', a.size, PAYLOAD_HEADER_BYTES);
const target = a.target === 'relay' ? 'relay' : 'broker';
const fetchRecords = int('fetch-records', a['fetch-records'], 1);
const fetchBytes = int('fetch-bytes', a['fetch-bytes'], 1);
const lingerMs = int('linger-ms', a['linger-ms']);
const graceMs = int('grace-ms', a['grace-ms']);
const warmupTotal = int('warmup', a.warmup);
const warmupTopic = a['warmup-topic'];
if (warmupTotal > 0 && !warmupTopic) fail('--warmup needs --warmup-topic');

const tally = new Tally(total, size, partitions);
tally.onHalf = (records) => report({ event: 'half', records });
let finished = false;


/** Counts a frame's records into `into`; true once it holds every id. */
function onBatch(body: Buffer, into: Tally): boolean {
  const t = nowMs();
  const batch = decodeBatch(body);
  const recs = batch.records;
  if (recs.length === 0) return false;
  into.beginBatch(t);
  const checkOffsets = target === 'broker';
  for (let i = 0; i < recs.length; i++) {
    const r = recs[i]!;
    if (checkOffsets) into.record(t, r.value, batch.partition, r.offset);
    else into.record(t, r.value);
  }
  return into.endBatch(t);
}

class StreamConnection {
  private readonly decoder = new FrameDecoder();
  subscribed: () => void = () => {};
  /** Closed on purpose (the warm-up's streams, once it is complete). */
  private closing = false;

  constructor(
    readonly socket: net.Socket,
    readonly partition: number,
    private readonly topic: string,
    /** Called with each batch frame's body. */
    private readonly onBody: (body: Buffer) => void,
  ) {
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', (e) => {
      if (!finished && !this.closing) fail(`partition ${partition}: connection error: ${e.message}`);
    });
    socket.on('close', () => {
      if (!finished && !this.closing) fail(`partition ${partition}: connection closed by the server`);
    });
  }

  close(): void {
    this.closing = true;
    this.socket.destroy();
  }

  open(): Promise<void> {
    if (target === 'broker') {
      const line = formatLine('STREAM', { topic: this.topic, partition: this.partition, offset: 0, batch: fetchRecords, max_bytes: fetchBytes });
      this.socket.write(encodeFrame(line));
      return Promise.resolve();
    }
    // The relay answers OK once the connection is registered as a consumer.
    return new Promise<void>((resolve) => {
      this.subscribed = resolve;
      this.socket.write(encodeFrame(`STREAM partition=${this.partition}`));
    });
  }

  private onData(chunk: Buffer): void {
    let bodies: Buffer[];
    try {
      bodies = this.decoder.push(chunk);
    } catch (err) {
      fail(`bad framing: ${(err as Error).message}`);
    }
    for (const body of bodies) {
      if (body.length === 0) continue; // keepalive
      if (isBatchBody(body)) {
        try {
          this.onBody(body);
        } catch (err) {
          fail(`partition ${this.partition}: undecodable batch: ${(err as Error).message}`);
        }
        continue;
      }
      const text = body.toString('utf8');
      if (text === 'OK') {
        this.subscribed();
        continue;
      }
      if (finished || this.closing) continue;
      fail(`partition ${this.partition}: unexpected frame: ${text.slice(0, 300)}`);
    }
  }
}

function connect(): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host, port });
    s.once('connect', () => {
      s.off('error', reject);
      resolve(s);
    });
    s.once('error', reject);
  });
}

function finish(): void {
  if (finished) return;
  finished = true;
  const stats = tally.stats();
  report({
    event: 'result',
    cpuMs: selfCpuMs() - cpuAtReady,
    target,
    ...stats,
  });
  for (const c of conns) c.socket.destroy();
  process.exitCode = 0;
  // stdin may keep the loop alive
  setImmediate(() => process.exit(0));
}

finishAfterProducer(tally, graceMs, () => finished, finish);

/** One stream connection per partition of `to`, each open (the relay: registered as a consumer). */
async function openStreams(to: string, onBody: (body: Buffer) => void): Promise<StreamConnection[]> {
  const out: StreamConnection[] = [];
  try {
    for (let p = 0; p < partitions; p++) out.push(new StreamConnection(await connect(), p, to, onBody));
  } catch (err) {
    fail(`connect ${host}:${port}: ${(err as Error).message}`);
  }
  await Promise.all(out.map((c) => c.open()));
  return out;
}

if (warmupTotal > 0) {
  // --warmup: the warm-up topic's records first, on streams of their own, closed before the measured
  // ones open (the relay hands frames to every open stream).
  const warm = new Tally(warmupTotal, size, partitions);
  let warmed: () => void = () => {};
  const complete = new Promise<void>((resolve) => {
    warmed = resolve;
  });
  const streams = await openStreams(warmupTopic!, (body) => {
    if (onBatch(body, warm)) warmed();
  });
  await complete;
  for (const c of streams) c.close();
}
const conns = await openStreams(topic, (body) => {
  if (onBatch(body, tally)) setTimeout(finish, lingerMs);
});
const cpuAtReady = selfCpuMs();
report({ event: 'ready' });
