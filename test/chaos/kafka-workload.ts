/**
 * The chaos workload's Kafka part: kafkajs transactional producers on the brokers' Kafka ports (through
 * their proxies, faulted with the main ports), so transactions whose partitions are led by other brokers
 * than the transactional id's coordinator (TXN_VERIFY, TXN_MARKER; docs/kafka.md "Transactions") are
 * checked like the SDK's: one history, the same checker. Each transaction writes 1-4 records to random
 * partitions, one Produce each, and commits three in four. A producer whose request failed or hung is
 * dropped and a new one with the same transactional id fences it (its open transaction is aborted).
 */
import { Kafka, logLevel, type Producer as KafkaProducer, type Transaction } from 'kafkajs';
import type { History, SendOp, TxnOp } from './history.js';
import { Rng } from './prng.js';
import { Pending, stopLoops, within } from './workload.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
/** A kafkajs call that takes longer is abandoned (its outcome unknown) and its producer dropped. */
const CALL_MS = 15_000;

/** kafkajs errors carry the Kafka error's name in `type`. */
function kafkaCode(err: unknown): string {
  const e = err as { type?: unknown; name?: unknown; message?: unknown };
  if (typeof e?.type === 'string') return e.type;
  return typeof e?.message === 'string' ? e.message.slice(0, 120) : String(err);
}

export interface KafkaWorkloadOptions {
  history: History;
  /** The Kafka ports' addresses. */
  bootstrap: string[];
  topic: string;
  partitions: number;
  seed: number;
  producers?: number;
}

export class KafkaTransactions {
  private stopping = false;
  private readonly loops: Promise<void>[] = [];
  private readonly live = new Set<KafkaProducer>();
  private readonly pending: Pending;
  private readonly kafka: Kafka;
  private seq = 0;
  sent = 0;

  constructor(private readonly o: KafkaWorkloadOptions) {
    this.pending = new Pending((op) => o.history.add(op));
    this.kafka = new Kafka({
      brokers: o.bootstrap,
      clientId: 'chaos-kafka',
      logLevel: logLevel.NOTHING,
      connectionTimeout: 2000,
      requestTimeout: 5000,
      retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1000 },
    });
  }

  start(): void {
    for (let i = 0; i < (this.o.producers ?? 1); i++) this.loops.push(this.loop(`ktx${i}`));
  }

  /** A connected producer of `name`'s transactional id, or undefined (its first transaction() fences the previous one). */
  private async producer(name: string): Promise<KafkaProducer | undefined> {
    const p = this.kafka.producer({ transactionalId: `chaos-${name}`, idempotent: true, maxInFlightRequests: 1, transactionTimeout: 10_000 });
    this.live.add(p);
    const ok = await within(p.connect().then(() => true, () => false), CALL_MS);
    if (ok) return p;
    await this.retire(p);
    return undefined;
  }

  private async loop(name: string): Promise<void> {
    const rng = Rng.derive(this.o.seed, name);
    let incarnation = 0;
    let txnNo = 0;
    let producer: KafkaProducer | undefined;
    while (!this.stopping) {
      if (!producer) {
        incarnation++;
        producer = await this.producer(name);
        if (!producer) {
          await sleep(500);
          continue;
        }
      }
      const process = `${name}.${incarnation}`;
      const begin = Date.now();
      const txn: Transaction | undefined = await within(producer.transaction(), CALL_MS).catch(() => undefined);
      if (!txn) {
        await this.retire(producer);
        producer = undefined;
        await sleep(200);
        continue;
      }
      const id = `${name}-${txnNo++}`;
      const values: string[] = [];
      let allSent = true;
      const count = rng.int(1, 4);
      for (let k = 0; k < count && allSent; k++) {
        const partition = rng.int(0, this.o.partitions - 1);
        const value = `${id}-${k}`;
        values.push(value);
        const op: SendOp = { f: 'send', process, producer: 'transactional', seq: this.seq++, partition, value, start: Date.now(), end: 0, outcome: 'info', txn: id };
        const t = this.pending.track(op);
        this.sent++;
        const sent = txn.send({ topic: this.o.topic, acks: -1, timeout: 5000, messages: [{ value, partition }] }).then(
          (meta) => {
            const offset = Number(meta.find((r) => r.partition === partition)?.baseOffset);
            // Acknowledged without an offset for the partition: nothing the checker could hold it to.
            if (!Number.isSafeInteger(offset)) {
              t.finish('info', { error: 'acknowledged without an offset' });
              return false;
            }
            t.finish('ok', { offset, partition });
            return true;
          },
          (err: unknown) => {
            t.finish('info', { error: kafkaCode(err) });
            return false;
          },
        );
        allSent = (await within(sent, CALL_MS)) === true;
      }
      const commit = allSent && rng.chance(0.75) && !this.stopping;
      const end = async (action: 'commit' | 'abort'): Promise<boolean> => {
        const op: TxnOp = { f: 'txn', process, txn: id, action, begin, start: Date.now(), end: 0, outcome: 'info', values };
        const t = this.pending.track(op);
        const done = (action === 'commit' ? txn.commit() : txn.abort()).then(
          () => {
            t.finish('ok');
            return true;
          },
          (err: unknown) => {
            t.finish('info', { error: kafkaCode(err) });
            return false;
          },
        );
        return (await within(done, CALL_MS)) === true;
      };
      const ended = allSent ? await end(commit ? 'commit' : 'abort') : false;
      if (!ended) {
        // The transaction's state is unknown: a new producer of the id fences this one and aborts it.
        await this.retire(producer);
        producer = undefined;
      }
      await sleep(rng.int(10, 80));
    }
    if (producer) await this.retire(producer);
  }

  private async retire(p: KafkaProducer): Promise<void> {
    await within(p.disconnect().catch(() => {}), 5000);
    this.live.delete(p);
  }

  /** Stops the loops (bounded), records what is still in flight as unknown, disconnects the producers. */
  stop(waitMs: number): Promise<{ abandoned: number }> {
    this.stopping = true;
    return stopLoops(this.loops, this.pending, () => [...this.live].map((p) => p.disconnect().catch(() => {})), waitMs);
  }
}
