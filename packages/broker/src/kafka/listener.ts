/**
 * The Kafka listener (docs/kafka.md): a second port that speaks the Kafka wire protocol over the same
 * topics as the main port. It listens once the broker is ready and stops first at shutdown, so a Kafka
 * client never sees a half-recovered broker.
 */
import net from 'node:net';
import type { KafkaBrokerContext } from './context.js';
import { KafkaConnection } from './kafka-connection.js';
import { apiVersionsHandler } from './apis/api-versions.js';
import { createTopicsHandler } from './apis/create-topics.js';
import { fetchHandler } from './apis/fetch.js';
import type { KafkaHandler } from './apis/handler.js';
import { listOffsetsHandler } from './apis/list-offsets.js';
import { metadataHandler } from './apis/metadata.js';
import { produceHandler } from './apis/produce.js';
import { initProducerIdHandler } from './apis/producer-id.js';
import { createPartitionsHandler, deleteTopicsHandler } from './apis/topics-admin.js';

export interface KafkaListenerOptions {
  host: string;
  /** 0: any free port. */
  port: number;
  /** What Metadata tells clients to connect to; the bound host when absent. */
  advertisedHost?: string;
  /**
   * The broker's per-address connection limit (`--max-connections-per-address`), shared with the main
   * port so a client cannot double its share through the second one.
   */
  perAddress?: { tryAcquire(address: string): boolean; release(address: string): void };
}

/** The APIs the listener serves, by key (ApiVersions lists exactly these). */
export function kafkaHandlers(): Map<number, KafkaHandler> {
  const served: KafkaHandler[] = [];
  served.push(
    apiVersionsHandler(() => served),
    metadataHandler,
    produceHandler,
    fetchHandler,
    listOffsetsHandler,
    createTopicsHandler,
    deleteTopicsHandler,
    createPartitionsHandler,
    initProducerIdHandler,
  );
  served.sort((a, b) => a.api.key - b.api.key);
  return new Map(served.map((h) => [h.api.key, h]));
}

export class KafkaListener {
  private readonly server: net.Server;
  private readonly connections = new Set<KafkaConnection>();
  private readonly handlers = kafkaHandlers();
  private boundPort = 0;

  constructor(
    private readonly broker: KafkaBrokerContext,
    private readonly o: KafkaListenerOptions,
  ) {
    this.server = net.createServer((socket) => this.accept(socket));
  }

  get port(): number {
    return this.boundPort;
  }

  get advertised(): { host: string; port: number } {
    return { host: this.o.advertisedHost ?? this.o.host, port: this.boundPort };
  }

  start(): Promise<number> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.o.port, this.o.host, () => {
        this.server.off('error', reject);
        const addr = this.server.address();
        this.boundPort = typeof addr === 'object' && addr ? addr.port : 0;
        resolve(this.boundPort);
      });
    });
  }

  /** Stops accepting, lets responses in progress go out (bounded), closes every connection. */
  async stop(timeoutMs: number): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    await Promise.all([...this.connections].map((c) => c.drain(timeoutMs)));
    await closed;
  }

  private accept(socket: net.Socket): void {
    const c = this.broker.config;
    const address = socket.remoteAddress ?? '';
    if (this.connections.size >= c.maxConnections || (this.o.perAddress && !this.o.perAddress.tryAcquire(address))) {
      socket.on('error', () => {});
      socket.destroy();
      return;
    }
    if (this.o.perAddress) socket.once('close', () => this.o.perAddress!.release(address));
    const conn = new KafkaConnection(socket, {
      handlers: this.handlers,
      context: { broker: this.broker, advertised: this.advertised },
      logger: this.broker.logger,
      maxFrameBytes: c.maxFrameBytes,
      idleTimeoutMs: c.idleTimeoutMs,
      frameTimeoutMs: c.frameTimeoutMs,
      maxPendingReplyBytes: c.maxPendingReplyBytes,
      onClose: (x) => this.connections.delete(x),
    });
    this.connections.add(conn);
  }
}
