/**
 * Background load of the scale benchmark (a child process): --busy partitions (spread over the topics
 * s-0.. of --partitions-per-topic each) receive --rate records/s each, one small binary batch per record,
 * pipelined over 4 connections, never waiting for one before sending the next (acks=1).
 *
 *   node dist/bench/scale-load.js --host H --port P --topics T --partitions-per-topic N --busy B --rate R
 *
 * Prints {"event":"running"} once sending, and {"event":"result", sent, acked, unanswered, errors} when
 * stdin closes: `unanswered` were still in flight then (the broker's backlog), `errors` failed before.
 */
import { parseArgs } from 'node:util';
import type { Batch } from 'tributary-protocol/batch.js';
import { Connection } from 'tributary-protocol/connection.js';
import { report } from './lib.js';

const { values: a } = parseArgs({
  options: {
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string' },
    topics: { type: 'string' },
    'partitions-per-topic': { type: 'string' },
    busy: { type: 'string' },
    rate: { type: 'string' },
  },
});
const port = Number(a.port);
const topics = Number(a.topics);
const perTopic = Number(a['partitions-per-topic']);
const busy = Number(a.busy);
const rate = Number(a.rate);
for (const [k, n] of Object.entries({ port, topics, perTopic, busy, rate })) {
  if (!Number.isSafeInteger(n) || n < 1) {
    process.stderr.write(`scale-load: bad --${k}\n`);
    process.exit(2);
  }
}

const value = Buffer.alloc(100, 0x62);
let sent = 0;
let acked = 0;
let inFlight = 0;
let stopping = false;
let errors = 0;
let firstError = '';

async function main(): Promise<void> {
  const conns = await Promise.all(Array.from({ length: 4 }, () => Connection.connect({ host: a.host!, port })));
  // Busy partitions: round-robin over the topics, so every topic has some.
  const targets = Array.from({ length: busy }, (_, i) => ({ topic: `s-${i % topics}`, partition: Math.floor(i / topics) % perTopic }));
  const tickMs = 100;
  const perTick = (rate * tickMs) / 1000;
  let carry = 0;
  const timer = setInterval(() => {
    carry += perTick;
    const n = Math.floor(carry);
    carry -= n;
    for (let r = 0; r < n; r++) {
      targets.forEach((t, i) => {
        const batch: Batch = {
          topic: t.topic,
          partition: t.partition,
          acks: '1',
          idempotent: false,
          firstSequence: 0,
          lastSequence: 0,
          records: [{ offset: 0, sequence: 0, producerId: '', key: null, epoch: 0, value, timestamp: 0, attributes: 0, headers: [] }],
        };
        sent++;
        inFlight++;
        conns[i % conns.length]!.produceBatch(batch).then(
          () => {
            inFlight--;
            acked++;
          },
          (err: Error) => {
            inFlight--;
            if (stopping) return; // unanswered when the load stopped: counted apart
            errors++;
            firstError ||= err.message;
          },
        );
      });
    }
  }, tickMs);
  report({ event: 'running' });
  process.stdin.on('end', async () => {
    clearInterval(timer);
    // Requests still unanswered now are the broker's backlog, not failures: closing fails them.
    stopping = true;
    const unanswered = inFlight;
    await Promise.allSettled(conns.map((c) => c.close()));
    report({ event: 'result', sent, acked, unanswered, errors, firstError });
    process.exit(0);
  });
  process.stdin.resume();
}

main().catch((err: unknown) => {
  process.stderr.write(`scale-load: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
