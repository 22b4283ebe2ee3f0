/**
 * The chaos suite (a Jepsen-style fault test): 3 brokers and etcd under a seeded nemesis, SDK producers
 * (plain, idempotent, transactional), a kafkajs transactional producer on the Kafka ports and a consumer
 * group of worker processes, every operation in one
 * history, checked at the end against the logs read back from offset 0 (test/chaos/checker.ts).
 *
 *   CHAOS_MS     how long faults are injected (default 60000 here; `npm run chaos` runs 180000)
 *   CHAOS_SEED   replays a run's fault schedule (random by default; printed at start and end)
 *   CHAOS_FLUSH  always (default) | os
 *   CHAOS_JOURNAL  mixed (default: brokers 0 and 2 run --journal true, broker 1 not) | on | off
 *   CHAOS_LOG_LEVEL  the brokers' log level (default warn; info to diagnose a run)
 */
import { describe, expect, it } from 'vitest';
import { chaosSeed } from './prng.js';
import { runChaos } from './run.js';

const durationMs = Number(process.env.CHAOS_MS ?? 60_000);
const seed = chaosSeed(process.env.CHAOS_SEED);
const flush = process.env.CHAOS_FLUSH === 'os' ? 'os' : 'always';
const journal = process.env.CHAOS_JOURNAL === 'on' || process.env.CHAOS_JOURNAL === 'off' ? process.env.CHAOS_JOURNAL : 'mixed';
const logLevel = process.env.CHAOS_LOG_LEVEL;

describe('chaos', () => {
  it(
    `keeps every safety property under faults for ${durationMs} ms (CHAOS_SEED=${seed})`,
    async () => {
      if (!Number.isFinite(durationMs) || durationMs < 10_000) throw new Error(`CHAOS_MS must be at least 10000, got ${process.env.CHAOS_MS}`);
      const r = await runChaos({ durationMs, seed, flush, journal, logLevel });
      expect(r.failures, `${r.summary}\nreplay with CHAOS_SEED=${seed} CHAOS_MS=${durationMs}`).toEqual([]);
    },
    durationMs + 300_000,
  );
});
