/**
 * The SDK producers a test file makes against one broker, each closed (bounded) when the file ends, so a
 * failed test leaves no producer retrying against a stopped broker.
 */
import { afterAll, beforeAll } from 'vitest';
import { Producer, type ProducerOptions } from 'tributary-client/producer.js';
import type { BatchRecord } from 'tributary-protocol/batch.js';
import type { Connection } from 'tributary-protocol/connection.js';
import { BrokerProcess } from './launcher.js';

export class TestProducers {
  private readonly all: Producer[] = [];

  constructor(private readonly address: () => string) {}

  make(opts: Partial<ProducerOptions> = {}): Producer {
    const p = new Producer({ brokers: [this.address()], ...opts });
    this.all.push(p);
    return p;
  }

  async closeAll(): Promise<void> {
    await Promise.all(this.all.splice(0).map((p) => p.close({ signal: AbortSignal.timeout(5000) }).catch(() => {})));
  }
}

/** A test file's broker process, an admin connection to it and the SDK producers made against it. */
export interface ProducerSuite {
  readonly broker: BrokerProcess;
  readonly admin: Connection;
  readonly producers: TestProducers;
  /** Every record of a partition, from offset 0, read by the admin connection. */
  readonly readAll: (topic: string, partition: number) => Promise<BatchRecord[]>;
}

/**
 * Starts a broker (with `args`) and connects an admin before the file's tests (then runs `setup`), and
 * closes the producers and stops the broker after them. Read the fields inside tests.
 */
export function useProducerSuite(args: string[] = [], setup?: (admin: Connection) => Promise<void>): ProducerSuite {
  let broker: BrokerProcess | undefined;
  let admin: Connection | undefined;
  const producers = new TestProducers(() => suite.broker.address);
  const suite: ProducerSuite = {
    get broker() {
      if (!broker) throw new Error('the broker is not started yet (use it inside a test)');
      return broker;
    },
    get admin() {
      if (!admin) throw new Error('the broker is not started yet (use it inside a test)');
      return admin;
    },
    producers,
    async readAll(topic, partition) {
      const out: BatchRecord[] = [];
      for (;;) {
        const batch = await suite.admin.consume({ topic, partition, offset: out.length, batch: 10_000, max_bytes: 8 * 1024 * 1024 });
        if (batch.records.length === 0) return out;
        out.push(...batch.records);
      }
    },
  };
  beforeAll(async () => {
    broker = await BrokerProcess.start({ args });
    admin = await broker.connect();
    await setup?.(admin);
  });
  afterAll(async () => {
    await producers.closeAll();
    await broker?.dispose();
  });
  return suite;
}
