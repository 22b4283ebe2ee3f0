/**
 * An idempotent producer's id (docs/sdk.md, "Producer"): INIT_PRODUCER_ID once, before its first record
 * is queued. Sends wait for it outside the producer's admission queue, woken in call order as the sends
 * waiting for a topic's METADATA are (topic-wait.ts): in that queue, whose wait is bounded as a wait for
 * buffer room, the sends behind the first failed with buffer_full while the id took longer than
 * requestTimeoutMs, with nothing buffered.
 */
import { parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import type { Cluster } from './cluster.js';
import type { RecordAccumulator } from './record-accumulator.js';
import { newTopicWait, settleTopicWait, type TopicWait } from './topic-wait.js';

export class ProducerId {
  /** The id INIT_PRODUCER_ID gave; '' until then. */
  id = '';
  private request: Promise<void> | undefined;
  /** Sends waiting for the id (undefined: none); while one waits, later sends wait behind it, none overtakes. */
  wait: TopicWait | undefined;

  constructor(
    private readonly cluster: Cluster,
    private readonly accumulator: RecordAccumulator,
    /** The producer's: the request stops only with the producer, each send stops waiting on its own signal. */
    private readonly signal: AbortSignal,
  ) {}

  /** A send may queue its records without waiting: the id is known and no send waits for it. */
  get ready(): boolean {
    return this.id !== '' && this.wait === undefined;
  }

  /** A send's place among the sends waiting for the id (undefined: it need not wait); leave() it once passed. */
  join(): TopicWait | undefined {
    if (this.ready) return undefined;
    let wait = this.wait;
    if (!wait) {
      const w = newTopicWait();
      this.wait = wait = w;
      this.ask().then(
        () => settleTopicWait(w, null),
        (err: unknown) => settleTopicWait(w, err as Error),
      );
    }
    wait.pending++;
    return wait;
  }

  leave(wait: TopicWait): void {
    if (--wait.pending > 0) return;
    if (this.wait === wait) this.wait = undefined;
    wait.markDrained();
  }

  /** INIT_PRODUCER_ID, once (again after a failure), shared by every send waiting for it. */
  private ask(): Promise<void> {
    if (this.id !== '') return Promise.resolve();
    if (!this.request) {
      const request = this.cluster.lookup('INIT_PRODUCER_ID', {}, this.signal).then((reply) => {
        const id = parseLine(reply).params.get('producerId');
        if (!id) throw new TributaryError('internal_error', { reason: `INIT_PRODUCER_ID answered without a producer id: ${reply}` });
        this.accumulator.setProducerId(id);
        this.id = id;
      });
      this.request = request;
      request.catch(() => {
        if (this.request === request) this.request = undefined;
      });
    }
    return this.request;
  }
}
