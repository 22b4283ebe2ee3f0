/**
 * The SDK Producer under faults, checked on its history (Jepsen style): every send() is logged with its
 * invoke and complete times and outcome while a seeded nemesis cuts connections at random bytes (a
 * request or a reply half written, then reset), stalls them past requestTimeoutMs, freezes the broker
 * (SIGSTOP/SIGCONT) and kills it (kill -9, restart). Then the log is read back and checked against
 * docs/sdk.md, "Producer": an acknowledged record is at the offset it was acknowledged with; with
 * `idempotent: true` no record is in the log twice and a partition's records are in send() call order
 * (pipelined, 5 in flight, retried); without idempotence an acknowledged record is there at least once.
 * Every send() and close() settles. PRODUCER_HISTORY_SEED=<n> replays the nemesis' and workload's choices.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { Producer } from 'tributary-client/producer.js';
import { Rng } from '../chaos/prng.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { bounded, readLogs, SendHistory } from '../helpers/producer-history.js';

const SEED = process.env.PRODUCER_HISTORY_SEED ? Number(process.env.PRODUCER_HISTORY_SEED) : Math.floor(Math.random() * 2 ** 32);
const TOPIC = 'ph';
const PARTITIONS = 3;
const WORKLOAD_MS = 12_000;
/** The broker's --max-record-bytes: now and then a send carries a larger record, mixed into batches with good ones. */
const MAX_RECORD = 4096;

/** A proxy that resets connections at a random byte of a chunk (`cutRate` per chunk) or stalls them. */
class CutProxy {
  cutRate = 0;
  cuts = 0;
  port = 0;
  private server: net.Server | undefined;
  private readonly conns = new Set<{ client: net.Socket; upstream: net.Socket }>();

  constructor(
    private readonly target: () => number,
    private readonly rng: Rng,
  ) {}

  async start(): Promise<void> {
    const server = net.createServer((client) => this.accept(client));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    this.server = server;
    this.port = (server.address() as net.AddressInfo).port;
  }

  private accept(client: net.Socket): void {
    const upstream = net.connect(this.target(), '127.0.0.1');
    const c = { client, upstream };
    this.conns.add(c);
    const drop = () => {
      this.conns.delete(c);
      if (!client.destroyed) client.resetAndDestroy();
      if (!upstream.destroyed) upstream.resetAndDestroy();
    };
    const forward = (from: net.Socket, to: net.Socket) => {
      from.on('data', (d: Buffer) => {
        if (this.cutRate > 0 && this.rng.next() < this.cutRate) {
          this.cuts++;
          to.write(d.subarray(0, this.rng.int(0, d.length - 1)), drop);
          return;
        }
        to.write(d);
      });
    };
    forward(client, upstream);
    forward(upstream, client);
    for (const s of [client, upstream]) {
      s.on('error', drop);
      s.on('close', drop);
    }
  }

  /** Stops forwarding on every open connection (bytes wait as in a partition) until the returned function runs. */
  stall(): () => void {
    const held = [...this.conns];
    for (const c of held) {
      c.client.pause();
      c.upstream.pause();
    }
    return () => {
      for (const c of held) {
        c.client.resume();
        c.upstream.resume();
      }
    };
  }

  async close(): Promise<void> {
    for (const c of this.conns) {
      c.client.destroy();
      c.upstream.destroy();
    }
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe(`producer history under faults (PRODUCER_HISTORY_SEED=${SEED})`, () => {
  let broker: BrokerProcess | undefined;
  let proxy: CutProxy | undefined;
  let admin: Connection;

  beforeAll(async () => {
    const rng = Rng.derive(SEED, 'proxy');
    proxy = new CutProxy(() => broker!.port, rng);
    await proxy.start();
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--flush', 'always', '--max-record-bytes', String(MAX_RECORD), '--advertised-host', '127.0.0.1', '--advertised-port', String(proxy.port)] });
    admin = await broker.connect();
    await admin.command('CREATE', { topic: TOPIC, partitions: PARTITIONS });
  });

  const producers: Producer[] = [];

  afterAll(async () => {
    // Closed by the test; forced here when it failed before.
    await Promise.all(producers.map((p) => p.close({ signal: AbortSignal.timeout(1000) }).catch(() => {})));
    await broker?.dispose();
    await proxy?.close();
  });

  it('acknowledged records are where they were acknowledged, idempotent ones once and in call order; every call settles', async () => {
    const seedMsg = `PRODUCER_HISTORY_SEED=${SEED}`;
    const nemesisRng = Rng.derive(SEED, 'nemesis');
    const common = {
      brokers: [`127.0.0.1:${proxy!.port}`],
      maxInFlightPerPartition: 5,
      maxBatchRecords: 3,
      requestTimeoutMs: 1500,
      stallTimeoutMs: 1500,
      connectTimeoutMs: 1000,
      retry: { initialDelayMs: 20, maxDelayMs: 300, retries: 10_000, maxElapsedMs: 25_000 },
    };
    const made = {
      idem: new Producer({ ...common, idempotent: true, lingerMs: 1 }),
      plain: new Producer({ ...common, lingerMs: 0 }),
      // Back-pressure: a few records fill its buffer, so sends wait for acknowledgements (buffer_full past requestTimeoutMs).
      tight: new Producer({ ...common, idempotent: true, lingerMs: 2, maxBufferedBytes: 6 * 1024 }),
      // A retry budget shorter than a freeze or stall: batches fail for good (appended or not) and the
      // partition goes on in a new epoch behind them.
      brief: new Producer({ ...common, idempotent: true, lingerMs: 1, retry: { ...common.retry, maxElapsedMs: 1200 } }),
    };
    producers.push(...Object.values(made));
    const history = new SendHistory(TOPIC, PARTITIONS, Rng.derive(SEED, 'workload'), MAX_RECORD);
    const log: string[] = [];
    const t0 = performance.now();
    let stop = false;

    const nemesis = async () => {
      while (!stop) {
        await sleep(nemesisRng.int(300, 800));
        if (stop) break;
        const fault = nemesisRng.pick(['cut', 'cut', 'stall', 'freeze', 'kill'] as const);
        const at = Math.round(performance.now() - t0);
        log.push(`${at} ms: ${fault}`);
        if (fault === 'cut') {
          proxy!.cutRate = 0.2;
          await sleep(nemesisRng.int(300, 1000));
          proxy!.cutRate = 0;
        } else if (fault === 'stall') {
          const release = proxy!.stall();
          await sleep(nemesisRng.int(1000, 2500));
          release();
        } else if (fault === 'freeze') {
          await broker!.kill('SIGSTOP');
          await sleep(nemesisRng.int(500, 2500));
          await broker!.kill('SIGCONT');
        } else {
          await broker!.kill('SIGKILL');
          await sleep(nemesisRng.int(0, 500));
          await broker!.relaunch();
        }
      }
    };

    const faults = nemesis();
    history.start('idem', { producer: made.idem, idempotent: true, callers: 3, oversized: 0.01, missing: 0.01 });
    history.start('plain', { producer: made.plain, idempotent: false, callers: 2, oversized: 0.01, missing: 0.01 });
    history.start('brief', { producer: made.brief, idempotent: true, callers: 2 });
    history.start('tight', { producer: made.tight, idempotent: true, callers: 1, pad: [100, 700], missing: 0.01 });
    await sleep(WORKLOAD_MS);
    stop = true;
    proxy!.cutRate = 0;
    // No hang: every send settles within its retry budget once the faults stop, and close() after it.
    await bounded('the nemesis', faults, 15_000, seedMsg);
    await history.stop(40_000, seedMsg);
    // Every byte held for a record is given back once its send settled (maxBufferedBytes is not leaked).
    expect(producers.map((p) => p.bufferedBytes), seedMsg).toEqual(producers.map(() => 0));
    await bounded('close()', Promise.all(producers.map((p) => p.close())), 30_000, seedMsg);

    admin = await broker!.connect();
    const anomalies = history.check(await readLogs(admin, TOPIC, PARTITIONS));
    const summary = { seed: SEED, faults: log, cuts: proxy!.cuts, ...history.summary() };
    console.log(JSON.stringify(summary));
    expect(anomalies.slice(0, 20), `${seedMsg} ${JSON.stringify(summary)}`).toEqual([]);
    // An oversized record fails its own send only, not the sends batched with it.
    expect(history.collateral(), seedMsg).toBe(0);
    // The run did something: most sends went through despite the faults.
    expect(history.acked('idem'), seedMsg).toBeGreaterThan(history.failed('idem'));
  }, 150_000);
});
