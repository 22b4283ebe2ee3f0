/**
 * Producer worker of the produce-consume benchmark (a child process).
 *
 *   node dist/bench/pc-producer.js --host H --port P --topic T --partitions 12 --count N --size S
 *        --batch B --connections C --in-flight W [--target broker|relay] [--frames template|encoded]
 *
 * Sends N records as binary batch frames (acks=1), partitions round-robin by batch, over C connections
 * with up to W unacknowledged batches each. `--frames template` (default) patches ids and send times into
 * a copy of one pre-encoded frame (the least a client can do per record); `encoded` encodes each frame
 * from record objects with the protocol's encodeBatch, as a hand-written wire client does. Every record carries its id and send time (see pc-payload).
 * `--warmup N --warmup-topic T` sends N records to T first, reports {"event":"warm"} and waits for `go`
 * on stdin before the clock starts (worker-args.ts).
 * Reports one JSON line on stdout: {"event":"result", records, elapsedMs, recordsPerSec, ackP50Ms, ...}.
 * Works unchanged against the relay, which acks every frame with one small reply frame.
 */
import net from 'node:net';
import { FrameDecoder } from 'tributary-protocol/frame.js';
import { WARMUP_FLAGS, waitForGo, workerArgs } from './worker-args.js';
import { nowMs, percentile, report, selfCpuMs } from './lib.js';
import { BatchTemplate, EncodedBatches } from './pc-payload.js';

const args = workerArgs('pc-producer', {
  batch: { type: 'string', default: '500' },
  connections: { type: 'string', default: '4' },
  'in-flight': { type: 'string', default: '16' },
  frames: { type: 'string', default: 'template' },
  ...WARMUP_FLAGS,
}, 1);
const { a, int } = args;
// Annotated: a call through it then ends control flow, as the function it replaces did.
const fail: (msg: string) => never = args.fail;


const host = a.host!;
const port = int('port', a.port);
const topic = a.topic!;
const partitions = int('partitions', a.partitions);
const measuredTotal = int('count', a.count);
const warmupTotal = int('warmup', a.warmup, 0);
const warmupTopic = a['warmup-topic'];
if (warmupTotal > 0 && !warmupTopic) fail('--warmup needs --warmup-topic');
const size = int('size', a.size, 12);
const batchSize = Math.min(int('batch', a.batch), Math.max(measuredTotal, warmupTotal));
const connections = int('connections', a.connections);
const window = int('in-flight', a['in-flight']);

const frames = a.frames;
if (frames !== 'template' && frames !== 'encoded') fail(`--frames must be template or encoded (got ${frames})`);
/** Builds the frame of a batch of `count` records: partition, first id, send time. */
interface FrameSource {
  readonly count: number;
  build(partition: number, firstId: number, sentMs: number): Buffer;
}
const source = (to: string, count: number): FrameSource => {
  if (frames === 'encoded') return new EncodedBatches(to, count, size);
  const t = new BatchTemplate(to, count, size);
  return { count, build: (p, id, ms) => t.build(p, id, ms) };
};

/** The pass under way (the warm-up's, then the measured one): its records, batches and frame sources. */
let total = 0;
let batches = 0;
let fullTemplate: FrameSource;
let lastTemplate: FrameSource;
let nextBatch = 0;
let ackedRecords = 0;
let ackedBatches = 0;
let bytesSent = 0;
let ackLatency = new Float64Array(0);
let passDone: () => void = () => {};
let finished = false;

/** Sends `count` records to `to` over every connection; resolves once each is acknowledged. */
function pass(to: string, count: number): Promise<void> {
  total = count;
  batches = Math.ceil(count / batchSize);
  const lastCount = count - (batches - 1) * batchSize;
  fullTemplate = source(to, batchSize);
  lastTemplate = lastCount === batchSize ? fullTemplate : source(to, lastCount);
  nextBatch = 0;
  ackedRecords = 0;
  ackedBatches = 0;
  bytesSent = 0;
  ackLatency = new Float64Array(batches);
  return new Promise<void>((resolve) => {
    passDone = resolve;
    for (const c of conns) c.pump();
  });
}

interface InFlight {
  sentAt: number;
  count: number;
}

class ProducerConnection {
  private readonly decoder = new FrameDecoder();
  private readonly inflight: InFlight[] = [];
  private head = 0;

  constructor(readonly socket: net.Socket) {
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', (e) => {
      if (!finished) fail(`connection error: ${e.message}`);
    });
    socket.on('close', () => {
      if (!finished) fail('connection closed by the server');
    });
  }

  get pending(): number {
    return this.inflight.length - this.head;
  }

  /** Send batches while the window has room. */
  pump(): void {
    if (this.pending >= window || nextBatch >= batches) return;
    this.socket.cork();
    while (this.pending < window && nextBatch < batches) {
      const k = nextBatch++;
      const tpl = k === batches - 1 ? lastTemplate : fullTemplate;
      const sentAt = nowMs();
      const frame = tpl.build(k % partitions, k * batchSize, sentAt);
      bytesSent += frame.length;
      this.inflight.push({ sentAt, count: tpl.count });
      this.socket.write(frame);
    }
    this.socket.uncork();
  }

  private onData(chunk: Buffer): void {
    let frames: Buffer[];
    try {
      frames = this.decoder.push(chunk);
    } catch (err) {
      fail(`bad reply framing: ${(err as Error).message}`);
    }
    const now = nowMs();
    for (const body of frames) {
      if (body.length === 0) continue;
      // Broker: {"status":"OK","partition":..,"count":n}; relay: {"status":"OK"}; errors: "ERROR: ...".
      if (body[0] !== 0x7b /* { */) fail(`produce failed: ${body.toString('utf8', 0, Math.min(body.length, 300))}`);
      const req = this.inflight[this.head++];
      if (!req) fail('reply without a request');
      ackLatency[ackedBatches++] = now - req.sentAt;
      ackedRecords += req.count;
    }
    if (this.head > 1024 && this.head * 2 > this.inflight.length) {
      this.inflight.splice(0, this.head);
      this.head = 0;
    }
    if (ackedRecords >= total) passDone();
    else this.pump();
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

const conns: ProducerConnection[] = [];
try {
  for (let i = 0; i < connections; i++) conns.push(new ProducerConnection(await connect()));
} catch (err) {
  fail(`connect ${host}:${port}: ${(err as Error).message}`);
}
if (warmupTotal > 0) {
  await pass(warmupTopic!, warmupTotal);
  report({ event: 'warm', records: ackedRecords });
  await waitForGo();
}
const cpuAtStart = selfCpuMs();
const startedAt = nowMs();
await pass(topic, measuredTotal);
finished = true;
const elapsedMs = nowMs() - startedAt;
const lat = ackLatency.subarray(0, ackedBatches).sort();
report({
  event: 'result',
  cpuMs: selfCpuMs() - cpuAtStart,
  target: a.target,
  frames,
  records: ackedRecords,
  batches: ackedBatches,
  bytesSent,
  elapsedMs,
  recordsPerSec: (ackedRecords / elapsedMs) * 1000,
  ackP50Ms: percentile(lat, 50),
  ackP99Ms: percentile(lat, 99),
  ackMaxMs: lat.length > 0 ? lat[lat.length - 1] : null,
});
for (const c of conns) c.socket.destroy();
process.exitCode = 0;
