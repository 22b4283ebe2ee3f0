/**
 * Open-loop producer of the latency benchmark (a child process).
 *
 *   node dist/bench/lat-producer.js --target broker|relay --host H --port P --topic T --partitions N
 *        --rate R --size S --duration-ms D --start-at MS [--linger-ms L]
 *
 * Every millisecond it sends the records that are due by the clock, R per second, whatever the acks
 * do: a slow broker cannot slow the schedule down, so coordinated omission cannot hide (docs of
 * bench/README.md, "latency"). Each record carries its id and its *scheduled* send time (pc-payload.ts),
 * so a delay anywhere, the producer's own included, counts. Broker: the SDK Producer with its default
 * settings (keyless records, so its default partitioning spreads them). Relay: one binary batch frame per tick.
 *
 * The schedule starts at the absolute time MS, once the sender is ready: the relay's socket connected, the
 * SDK producer connected and its metadata fetched by one small record sent and acknowledged first (counted in
 * `sent`; consumers skip it). A producer that would start behind its schedule would spend the warm-up
 * catching up, so it fails instead.
 *
 * Prints {"event":"started"} when the schedule starts and {"event":"result", sent, acked, errors, ...} once
 * everything sent was acknowledged (or 15 s after the end).
 */
import net from 'node:net';
import { Producer } from 'tributary-client/producer.js';
import { FrameDecoder } from 'tributary-protocol/frame.js';
import { nowMs, percentile, report } from './lib.js';
import { BatchTemplate, PAYLOAD_HEADER_BYTES, writePayloadHeader } from './pc-payload.js';
import { workerArgs } from './worker-args.js';

const { a, int, fail } = workerArgs('lat-producer', { rate: { type: 'string' }, 'duration-ms': { type: 'string' }, 'start-at': { type: 'string' }, 'linger-ms': { type: 'string' } }, 1);
const target = a.target === 'relay' ? 'relay' : 'broker';
const host = a.host!;
const port = int('port', a.port);
const topic = a.topic!;
const partitions = int('partitions', a.partitions);
const rate = int('rate', a.rate);
const size = int('size', a.size, PAYLOAD_HEADER_BYTES);
const durationMs = int('duration-ms', a['duration-ms']);
const startAt = int('start-at', a['start-at']);
const lingerMs = a['linger-ms'] === undefined ? undefined : int('linger-ms', a['linger-ms'], 0);
const total = Math.floor((rate * durationMs) / 1000);

let sent = 0;
let acked = 0;
/** Records sent before the schedule to make the sender ready (not in the schedule's numbering). */
let primers = 0;
let errors = 0;
let firstError = '';
let ticks = 0;
let maxTickGapMs = 0;
/** Acknowledgement latency of each send() (ack time minus its first record's scheduled time), ms. */
const ackLatencies: number[] = [];

/** Sends records [from, to) scheduled at start + i / rate. */
type Sender = (from: number, to: number, start: number) => void;

async function relaySender(): Promise<{ send: Sender; close: () => void }> {
  const socket = net.connect({ host, port });
  socket.setNoDelay(true);
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  const decoder = new FrameDecoder();
  socket.on('data', (chunk: Buffer) => {
    for (const body of decoder.push(chunk)) if (body.length > 0) acked = Math.min(sent, acked + (pendingCounts.shift() ?? 0));
  });
  socket.on('error', (e) => fail(`relay connection: ${e.message}`));
  const templates = new Map<number, BatchTemplate>();
  const pendingCounts: number[] = [];
  let partition = 0;
  return {
    send: (from, to, start) => {
      const n = to - from;
      let t = templates.get(n);
      if (!t) templates.set(n, (t = new BatchTemplate(topic, n, size)));
      const f = Buffer.allocUnsafe(t.frame.length);
      t.frame.copy(f);
      f.writeInt32BE(partition++ % partitions, t.partitionAt);
      for (let i = 0; i < n; i++) writePayloadHeader(f, t.valueAt[i]!, from + i, start + ((from + i) * 1000) / rate);
      pendingCounts.push(n);
      socket.write(f);
    },
    close: () => socket.destroy(),
  };
}

async function brokerSender(): Promise<{ send: Sender; close: () => Promise<void> }> {
  const producer = new Producer({ brokers: [`${host}:${port}`], ...(lingerMs === undefined ? {} : { lingerMs }) });
  // Shorter than a payload header: consumers count it received and measure nothing.
  await producer.send({ topic, messages: [{ value: Buffer.alloc(1) }] });
  primers = 1;
  const filler = Buffer.alloc(size, 0x61);
  return {
    send: (from, to, start) => {
      const messages = [];
      for (let i = from; i < to; i++) {
        const value = Buffer.allocUnsafe(size);
        filler.copy(value);
        writePayloadHeader(value, 0, i, start + (i * 1000) / rate);
        // Keyless and no partition: the SDK's default partitioning spreads them (sticky batches).
        messages.push({ value });
      }
      const scheduled = start + (from * 1000) / rate;
      producer.send({ topic, messages }).then(
        () => {
          acked += messages.length;
          ackLatencies.push(nowMs() - scheduled);
        },
        (err: Error) => {
          errors += messages.length;
          firstError ||= err.message;
        },
      );
    },
    close: () => producer.close(),
  };
}

async function main(): Promise<void> {
  const sender = target === 'relay' ? await relaySender() : await brokerSender();
  const wait = startAt - nowMs();
  if (wait < 0) fail(`not ready at the planned start (${Math.round(-wait)} ms late)`);
  await new Promise((r) => setTimeout(r, wait));
  const start = startAt;
  report({ event: 'started' });
  let last = start;
  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = nowMs();
      ticks++;
      maxTickGapMs = Math.max(maxTickGapMs, now - last);
      last = now;
      const due = Math.min(total, Math.floor(((now - start) * rate) / 1000) + 1);
      if (due > sent) {
        // Whatever is due goes now, in chunks the broker's batch limits take comfortably.
        for (let from = sent; from < due; from += 1000) sender.send(from, Math.min(due, from + 1000), start);
        sent = due;
      }
      if (sent >= total) resolve();
      else setTimeout(tick, 1);
    };
    tick();
  });
  const deadline = nowMs() + 15_000;
  while (acked + errors < sent && nowMs() < deadline) await new Promise((r) => setTimeout(r, 10));
  await sender.close();
  const acks = Float64Array.from(ackLatencies).sort();
  const ms = (x: number) => Math.round(x * 100) / 100;
  report({ event: 'result', sent: sent + primers, acked: acked + primers, errors, firstError, ticks, maxTickGapMs: ms(maxTickGapMs), ackP50: ms(percentile(acks, 50)), ackP99: ms(percentile(acks, 99)), elapsedMs: Math.round(nowMs() - start) });
  process.exit(0);
}

main().catch((err: unknown) => fail(err instanceof Error ? (err.stack ?? err.message) : String(err)));
