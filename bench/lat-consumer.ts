/**
 * Consumer of the latency benchmark (a child process): one member of a group of consumers.
 *
 *   node dist/bench/lat-consumer.js --target broker|relay --host H --port P --topic T --partitions N
 *        --size S --group G --measure-from MS --out FILE [--mode poll|stream]
 *
 * Broker: the SDK Consumer with its default settings, in group G. Relay: one STREAM connection (the
 * relay spreads frames over its consumers). For every record: latency = receive time − scheduled send
 * time (in the payload); records scheduled before --measure-from (the warm-up) are not counted.
 *
 * Prints {"event":"assigned", partitions} after each rebalance (broker) or {"event":"assigned"} once
 * streaming (relay). When stdin says `done`, it waits until nothing arrived for 1 s (at most 10 s),
 * writes the measured latencies (float64, ms) to FILE and prints {"event":"result", received, measured}.
 */
import fs from 'node:fs';
import net from 'node:net';
import readline from 'node:readline';
import { Consumer } from 'tributary-client/consumer.js';
import { decodeBatch, isBatchBody } from 'tributary-protocol/batch.js';
import { FrameDecoder, encodeFrame } from 'tributary-protocol/frame.js';
import { nowMs, report } from './lib.js';
import { PAYLOAD_HEADER_BYTES } from './pc-payload.js';
import { workerArgs } from './worker-args.js';

const { a, int, fail } = workerArgs('lat-consumer', { group: { type: 'string' }, 'measure-from': { type: 'string' }, out: { type: 'string' }, mode: { type: 'string' } }, 0);
const target = a.target === 'relay' ? 'relay' : 'broker';
const host = a.host!;
const port = int('port', a.port, 1);
const topic = a.topic!;
const measureFrom = int('measure-from', a['measure-from']);
const out = a.out ?? fail('--out is required');
const mode = a.mode === undefined ? undefined : a.mode === 'poll' || a.mode === 'stream' ? a.mode : fail('--mode takes poll or stream');

let samples = new Float64Array(1 << 16);
let measured = 0;
let received = 0;
let lastAt = nowMs();

function record(value: Buffer, at: number): void {
  received++;
  lastAt = at;
  if (value.length < PAYLOAD_HEADER_BYTES) return;
  const scheduled = value.readDoubleLE(4);
  if (scheduled < measureFrom) return;
  if (measured === samples.length) {
    const bigger = new Float64Array(samples.length * 2);
    bigger.set(samples);
    samples = bigger;
  }
  samples[measured++] = at - scheduled;
}

async function relay(): Promise<() => Promise<void>> {
  const socket = net.connect({ host, port });
  socket.setNoDelay(true);
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  const decoder = new FrameDecoder();
  socket.on('data', (chunk: Buffer) => {
    const at = nowMs();
    for (const body of decoder.push(chunk)) {
      if (!isBatchBody(body)) {
        report({ event: 'assigned' });
        continue;
      }
      for (const r of decodeBatch(body).records) record(r.value, at);
    }
  });
  socket.write(encodeFrame('STREAM partition=0'));
  return async () => {
    socket.destroy();
  };
}

async function broker(): Promise<() => Promise<void>> {
  const consumer = new Consumer({ brokers: [`${host}:${port}`], groupId: a.group ?? fail('--group is required'), topic, autoOffsetReset: 'earliest', ...(mode ? { mode } : {}) });
  consumer.on('rebalance.end', () => report({ event: 'assigned', partitions: consumer.assignment().length }));
  const run = consumer.run({
    eachBatch: async ({ messages, resolveOffset }) => {
      const at = nowMs();
      for (const m of messages) record(m.value, at);
      // Processed: auto-commit moves the group's offsets, so a partition that moves is not read again.
      if (messages.length > 0) resolveOffset(messages[messages.length - 1]!.offset);
    },
  });
  run.catch((err: Error) => fail(`consumer: ${err.message}`));
  return async () => {
    await consumer.close();
  };
}

async function main(): Promise<void> {
  const close = target === 'relay' ? await relay() : await broker();
  const rl = readline.createInterface({ input: process.stdin });
  await new Promise<void>((resolve) => rl.on('line', (l) => l.trim() === 'done' && resolve()));
  const deadline = nowMs() + 10_000;
  while (nowMs() - lastAt < 1000 && nowMs() < deadline) await new Promise((r) => setTimeout(r, 50));
  await close();
  fs.writeFileSync(out, Buffer.from(samples.buffer, 0, measured * 8));
  report({ event: 'result', received, measured });
  process.exit(0);
}

main().catch((err: unknown) => fail(err instanceof Error ? (err.stack ?? err.message) : String(err)));
