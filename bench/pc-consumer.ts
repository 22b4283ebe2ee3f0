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
 * Prints {"event":"ready"} once the streams are open, then one {"event":"result",...} line when all N
 * ids arrived (plus `linger-ms` to catch late duplicates), or when `done` was written to stdin (the
 * producer finished) and nothing new arrived for `grace-ms`.
 */
import net from 'node:net';
import { decodeBatch, isBatchBody } from 'tributary-protocol/batch.js';
import { formatLine } from 'tributary-protocol/command.js';
import { FrameDecoder, encodeFrame } from 'tributary-protocol/frame.js';
import { workerArgs } from './worker-args.js';
import { nowMs, report, selfCpuMs } from './lib.js';
import { PAYLOAD_HEADER_BYTES } from './pc-payload.js';
import { Tally, finishAfterProducer } from './pc-tally.js';

const args = workerArgs('pc-consumer', {
  'fetch-records': { type: 'string', default: '5000' },
  'fetch-bytes': { type: 'string', default: String(4 * 1024 * 1024) },
  'linger-ms': { type: 'string', default: '300' },
  'grace-ms': { type: 'string', default: '10000' },
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

const tally = new Tally(total, size, partitions);
let finished = false;


function onBatch(body: Buffer): void {
  const t = nowMs();
  const batch = decodeBatch(body);
  const recs = batch.records;
  if (recs.length === 0) return;
  tally.beginBatch(t);
  const checkOffsets = target === 'broker';
  for (let i = 0; i < recs.length; i++) {
    const r = recs[i]!;
    if (checkOffsets) tally.record(t, r.value, batch.partition, r.offset);
    else tally.record(t, r.value);
  }
  if (tally.endBatch(t)) setTimeout(finish, lingerMs);
}

class StreamConnection {
  private readonly decoder = new FrameDecoder();
  subscribed: () => void = () => {};

  constructor(
    readonly socket: net.Socket,
    readonly partition: number,
  ) {
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', (e) => {
      if (!finished) fail(`partition ${partition}: connection error: ${e.message}`);
    });
    socket.on('close', () => {
      if (!finished) fail(`partition ${partition}: connection closed by the server`);
    });
  }

  open(): Promise<void> {
    if (target === 'broker') {
      const line = formatLine('STREAM', { topic, partition: this.partition, offset: 0, batch: fetchRecords, max_bytes: fetchBytes });
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
          onBatch(body);
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
      if (finished) continue;
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

const conns: StreamConnection[] = [];
try {
  for (let p = 0; p < partitions; p++) conns.push(new StreamConnection(await connect(), p));
} catch (err) {
  fail(`connect ${host}:${port}: ${(err as Error).message}`);
}
await Promise.all(conns.map((c) => c.open()));
const cpuAtReady = selfCpuMs();
report({ event: 'ready' });
