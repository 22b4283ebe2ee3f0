import diagnostics from 'node:diagnostics_channel';
import { EventEmitter } from 'node:events';

/** An EventEmitter whose event names and payloads are checked by the compiler. */
export class TypedEmitter<E extends { [K in keyof E]: unknown }> {
  private readonly emitter = new EventEmitter();

  on<K extends keyof E & string>(event: K, listener: (payload: E[K]) => void): this {
    this.emitter.on(event, listener);
    return this;
  }

  once<K extends keyof E & string>(event: K, listener: (payload: E[K]) => void): this {
    this.emitter.once(event, listener);
    return this;
  }

  off<K extends keyof E & string>(event: K, listener: (payload: E[K]) => void): this {
    this.emitter.off(event, listener);
    return this;
  }

  protected emit<K extends keyof E & string>(event: K, payload: E[K]): void {
    // A throwing listener must not break the client's own loops.
    try {
      this.emitter.emit(event, payload);
    } catch (err) {
      queueMicrotask(() => {
        throw err;
      });
    }
  }

  listenerCount(event: keyof E & string): number {
    return this.emitter.listenerCount(event);
  }
}

/** diagnostics_channel names, for tracing without wrapping the SDK (`diagnostics.subscribe(name, fn)`). */
export const channels = {
  consumerFetch: diagnostics.channel('tributary:consumer:fetch'),
  /** A paused partition's reader has stopped: nothing more comes from it until resume(). */
  consumerPaused: diagnostics.channel('tributary:consumer:paused'),
  consumerCommit: diagnostics.channel('tributary:consumer:commit'),
  consumerRebalance: diagnostics.channel('tributary:consumer:rebalance'),
  producerSend: diagnostics.channel('tributary:producer:send'),
};

export function publish(ch: diagnostics.Channel, message: object): void {
  if (ch.hasSubscribers) ch.publish(message);
}
