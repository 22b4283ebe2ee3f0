// A chaos consumer-group member in its own process (so the nemesis can kill -9 it).
//
//   node consumer-worker.mjs '<json config>'     config: { options: ConsumerOptions }
//
// Runs the compiled SDK's Consumer with run({ eachMessage }) and prints one JSON line per event on
// stdout (pipe writes are synchronous on Linux: a line printed before a kill -9 is not lost):
//   {t:'msg', member, partition, offset, value, ag, time}          one per record handed to the handler
//   {t:'commit-start', id, member, generation, offsets, time}       BATCH_COMMIT sent (the exact offsets)
//   {t:'commit-end', id, outcome: ok|fail|info, error?, time}
//   {t:'fetch-start', id, partition, time} / {t:'fetch-end', id, outcome, offset, committed, error?, time}
//   {t:'assign', member, generation, ag, assigned, revoked, kept, owned, time}   after each rebalance
//   {t:'reader', partition, step, detail, ms?, time}   a reader's failed read (step 'error'), or a leader
//                                                      lookup or read that took over 200 ms, or a dial
//   {t:'crash', code, message, fatal, time}, {t:'ready', ...}, {t:'closed', time}, {t:'error', ...}
// Commits and FETCH_OFFSET are seen by wrapping the consumer's routing client: the SDK does not report
// when a commit is sent, only when it is acknowledged.
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const { Consumer } = await import(pathToFileURL(path.join(root, 'packages', 'client', 'dist', 'index.js')).href);

const cfg = JSON.parse(process.argv[2] ?? '{}');
const out = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);

/** Errors the broker answered that leave nothing applied; anything else may have gone through. */
const DEFINITE = new Set([
  'GEN_MISMATCH',
  'NOT_OWNER',
  'member_not_found',
  'REBALANCE_IN_PROGRESS',
  'offset_regression',
  'invalid_parameter',
  'FENCED_INSTANCE_ID',
]);

const consumer = new Consumer(cfg.options);
// Instrumentation reaches into the consumer's routing client (a private part; see consumer-context.ts).
const cluster = consumer.ctx?.cluster;
if (!cluster) throw new Error('consumer-worker: the consumer has no ctx.cluster any more; update the instrumentation');
const original = cluster.coordinatorCommand.bind(cluster);
let ids = 0;
cluster.coordinatorCommand = async (key, name, fields, opts = {}) => {
  if (name === 'BATCH_COMMIT') {
    const id = ++ids;
    const offsets = String(opts.positional?.[0] ?? '')
      .split(',')
      .filter(Boolean)
      .map((e) => {
        const [p, o] = e.slice(1).split(':');
        return { partition: Number(p), offset: Number(o) };
      });
    out({ t: 'commit-start', id, member: fields.member, generation: fields.generation, offsets, time: Date.now() });
    try {
      const r = await original(key, name, fields, opts);
      out({ t: 'commit-end', id, outcome: 'ok', time: Date.now() });
      return r;
    } catch (err) {
      out({ t: 'commit-end', id, outcome: DEFINITE.has(err?.code) ? 'fail' : 'info', error: err?.code ?? String(err), time: Date.now() });
      throw err;
    }
  }
  if (name === 'FETCH_OFFSET') {
    const id = ++ids;
    out({ t: 'fetch-start', id, partition: fields.partition, time: Date.now() });
    try {
      const r = await original(key, name, fields, opts);
      const offset = /(?:^|\s)offset=(\d+)/.exec(r);
      const committed = /(?:^|\s)committed=(true|false)/.exec(r);
      out({ t: 'fetch-end', id, outcome: 'ok', offset: offset ? Number(offset[1]) : undefined, committed: committed?.[1] === 'true', time: Date.now() });
      return r;
    } catch (err) {
      out({ t: 'fetch-end', id, outcome: 'info', error: err?.code ?? String(err), time: Date.now() });
      throw err;
    }
  }
  return original(key, name, fields, opts);
};

// Every failed read reaches the router (it re-routes on it), and readers look up, dial and read through
// it: how a reader spent a fault is visible.
const SLOW_MS = 200;
const reader = (partition, step, detail, ms) => out({ t: 'reader', partition, step, detail: String(detail).slice(0, 200), ...(ms !== undefined ? { ms } : {}), time: Date.now() });
const onLeaderError = cluster.onLeaderError.bind(cluster);
cluster.onLeaderError = (topic, partition, err) => {
  reader(partition, 'error', `${err?.code ?? 'unknown'}: ${err?.fields?.reason ?? err?.message ?? err}`);
  return onLeaderError(topic, partition, err);
};
const leaderFor = cluster.leaderFor.bind(cluster);
cluster.leaderFor = async (topic, partition, signal) => {
  const t0 = Date.now();
  try {
    const leader = await leaderFor(topic, partition, signal);
    if (Date.now() - t0 > SLOW_MS) reader(partition, 'lookup', leader, Date.now() - t0);
    return leader;
  } catch (err) {
    if (Date.now() - t0 > SLOW_MS) reader(partition, 'lookup', `failed: ${err?.code}`, Date.now() - t0);
    throw err;
  }
};
const dedicated = cluster.dedicated.bind(cluster);
cluster.dedicated = async (address, signal, opts) => {
  const t0 = Date.now();
  const conn = await dedicated(address, signal, opts).catch((err) => {
    reader(-1, 'dial', `${address} failed: ${err?.code}`, Date.now() - t0);
    throw err;
  });
  reader(-1, 'dial', address, Date.now() - t0); // rare: once per reader and per re-route
  const consume = conn.consume.bind(conn);
  conn.consume = async (fields) => {
    const r0 = Date.now();
    try {
      const batch = await consume(fields);
      // A reply that starts before the offset asked for would be redelivered as new: say so, with both.
      const first = batch?.records?.[0]?.offset;
      if (first !== undefined && first < Number(fields.offset)) reader(Number(fields.partition), 'behind', `${address}: asked ${fields.offset}, got ${first}..${batch.records.at(-1).offset}`);
      return batch;
    } catch (err) {
      // The reader resets its position on this one (autoOffsetReset), without re-routing: say who said it.
      if (err?.code === 'OFFSET_OUT_OF_RANGE') reader(Number(fields.partition), 'range', `${address}: asked ${fields.offset}, range ${err.fields?.earliest}..${err.fields?.latest}`);
      throw err;
    } finally {
      const ms = Date.now() - r0;
      if (ms > Number(fields.wait_ms ?? 0) + SLOW_MS) reader(Number(fields.partition), 'read', address, ms);
    }
  };
  return conn;
};

consumer.on('rebalance.end', (e) =>
  out({
    t: 'assign',
    member: consumer.memberId,
    generation: e.generation,
    ag: e.assignmentGeneration,
    assigned: e.assigned,
    revoked: e.revoked,
    kept: e.kept,
    owned: consumer.assignment(),
    time: Date.now(),
  }),
);
consumer.on('crash', (e) =>
  out({ t: 'crash', code: e.error?.code, message: String(e.error?.message ?? e.error).slice(0, 300), fatal: e.fatal, time: Date.now() }),
);

let closing = false;
process.on('SIGTERM', () => {
  if (closing) return;
  closing = true;
  consumer.close().then(
    () => {
      out({ t: 'closed', time: Date.now() });
      process.exit(0);
    },
    (err) => {
      out({ t: 'error', message: String(err), time: Date.now() });
      process.exit(1);
    },
  );
});

const running = consumer.run({
  eachMessage: async ({ message }) => {
    out({
      t: 'msg',
      member: consumer.memberId,
      partition: message.partition,
      offset: message.offset,
      value: message.value.toString(),
      ag: message.assignmentGeneration,
      time: Date.now(),
    });
  },
});
running.then(
  () => {
    if (!closing) {
      out({ t: 'error', message: 'run() ended by itself', time: Date.now() });
      process.exit(3);
    }
  },
  (err) => {
    out({ t: 'error', code: err?.code, message: String(err), time: Date.now() });
    process.exit(2);
  },
);
await consumer.start();
out({ t: 'ready', member: consumer.memberId, generation: consumer.generation, owned: consumer.assignment(), time: Date.now() });
