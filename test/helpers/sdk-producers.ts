/**
 * The SDK producers a test file makes against one broker, each closed (bounded) when the file ends, so a
 * failed test leaves no producer retrying against a stopped broker.
 */
import { Producer, type ProducerOptions } from 'tributary-client/producer.js';

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
