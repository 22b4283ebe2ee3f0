/**
 * The Kafka listener (docs/kafka.md): a second port that speaks the Kafka wire protocol over the same
 * topics as the main port. It listens once the broker is ready and stops first at shutdown, so a Kafka
 * client never sees a half-recovered broker.
 */
import net from 'node:net';
import tls from 'node:tls';
import { registerKafkaCodecs } from './compression.js';
import type { KafkaBrokerContext } from './context.js';
import { KafkaConnection } from './kafka-connection.js';
import { alterConfigsHandler, incrementalAlterConfigsHandler } from './apis/alter-configs.js';
import { apiVersionsHandler } from './apis/api-versions.js';
import { createTopicsHandler } from './apis/create-topics.js';
import { describeConfigsHandler } from './apis/describe-configs.js';
import { fetchHandler } from './apis/fetch.js';
import type { KafkaHandler } from './apis/handler.js';
import { listOffsetsHandler } from './apis/list-offsets.js';
import { metadataHandler } from './apis/metadata.js';
import { produceHandler } from './apis/produce.js';
import { initProducerIdHandler } from './apis/producer-id.js';
import { saslAuthenticateHandler, saslHandshakeHandler } from './apis/sasl.js';
import { createPartitionsHandler, deleteTopicsHandler } from './apis/topics-admin.js';
import { offsetCommitHandler, offsetFetchHandler } from './apis/group-offsets.js';
import { addOffsetsToTxnHandler, addPartitionsToTxnHandler, endTxnHandler, txnOffsetCommitHandler } from './apis/transactions.js';
import {
  describeGroupsHandler,
  findCoordinatorHandler,
  heartbeatHandler,
  joinGroupHandler,
  leaveGroupHandler,
  listGroupsHandler,
  syncGroupHandler,
} from './apis/groups.js';

export interface KafkaListenerOptions {
  host: string;
  /** 0: any free port. */
  port: number;
  /** What Metadata tells clients to connect to; the bound host when absent. */
  advertisedHost?: string;
  /** The port Kafka clients are told to use; the bound port when absent. */
  advertisedPort?: number;
  /**
   * The broker's per-address connection limit (`--max-connections-per-address`), shared with the main
   * port so a client cannot double its share through the second one.
   */
  perAddress?: { tryAcquire(address: string): boolean; release(address: string): void };
  /** The main port's open connections: `--max-connections` counts both ports together. */
  otherConnections?: () => number;
  /** TLS as on the main port (the same certificate, CA and client-certificate rule); plain TCP when absent. */
  tls?: tls.TlsOptions;
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
    describeConfigsHandler,
    alterConfigsHandler,
    incrementalAlterConfigsHandler,
    initProducerIdHandler,
    addPartitionsToTxnHandler,
    addOffsetsToTxnHandler,
    endTxnHandler,
    txnOffsetCommitHandler,
    findCoordinatorHandler,
    joinGroupHandler,
    syncGroupHandler,
    heartbeatHandler,
    leaveGroupHandler,
    describeGroupsHandler,
    listGroupsHandler,
    offsetCommitHandler,
    offsetFetchHandler,
    saslHandshakeHandler,
    saslAuthenticateHandler,
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
    registerKafkaCodecs();
    this.server = o.tls ? this.tlsServer(o.tls) : net.createServer((socket) => this.accept(socket));
  }

  /**
   * A plain TCP server in front of the TLS one, as on the main port: the connection limits are checked on
   * the raw connection, before a handshake runs. A client that does not speak TLS fails the handshake.
   */
  private tlsServer(options: tls.TlsOptions): net.Server {
    const secure = tls.createServer({ ...options, handshakeTimeout: Math.min(this.broker.config.frameTimeoutMs, 10_000) }, (socket) => this.serve(socket));
    secure.on('tlsClientError', (err, socket) => this.broker.logger.debug({ remote: `${socket.remoteAddress}:${socket.remotePort}`, reason: err.message }, 'Kafka TLS handshake failed'));
    return net.createServer((raw) => {
      if (this.admit(raw)) secure.emit('connection', raw);
    });
  }

  /** Open Kafka connections, for the broker's shared `--max-connections`. */
  get connectionCount(): number {
    return this.connections.size;
  }

  get port(): number {
    return this.boundPort;
  }

  get advertised(): { host: string; port: number } {
    return { host: this.o.advertisedHost ?? this.o.host, port: this.o.advertisedPort ?? this.boundPort };
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
  /** Drains every connection within `timeoutMs`; returns how many the timeout cut. */
  async stop(timeoutMs: number): Promise<number> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    const cut = await Promise.all([...this.connections].map((c) => c.drain(timeoutMs)));
    await closed;
    return cut.filter(Boolean).length;
  }

  private accept(socket: net.Socket): void {
    if (this.admit(socket)) this.serve(socket);
  }

  /** The connection limits, on the raw connection: false (and closed) when over one. */
  private admit(socket: net.Socket): boolean {
    const address = socket.remoteAddress ?? '';
    const open = this.connections.size + (this.o.otherConnections?.() ?? 0);
    if (open >= this.broker.config.maxConnections || (this.o.perAddress && !this.o.perAddress.tryAcquire(address))) {
      socket.on('error', () => {});
      socket.destroy();
      return false;
    }
    if (this.o.perAddress) socket.once('close', () => this.o.perAddress!.release(address));
    return true;
  }

  private serve(socket: net.Socket): void {
    const c = this.broker.config;
    const conn = new KafkaConnection(socket, {
      handlers: this.handlers,
      context: { broker: this.broker, advertised: this.advertised },
      logger: this.broker.logger,
      maxFrameBytes: c.maxFrameBytes,
      idleTimeoutMs: c.idleTimeoutMs,
      frameTimeoutMs: c.frameTimeoutMs,
      maxPendingReplyBytes: c.maxPendingReplyBytes,
      maxRequestsPerSecond: c.maxRequestsPerSecondPerConnection,
      writeStallTimeoutMs: c.writeStallTimeoutMs,
      onClose: (x) => {
        this.connections.delete(x);
        this.countConnections();
      },
    });
    this.connections.add(conn);
    this.countConnections();
  }

  /** `tributary_connections` counts both ports, as `--max-connections` does. */
  private countConnections(): void {
    this.broker.metrics.connections.set(this.connections.size + (this.o.otherConnections?.() ?? 0));
  }
}
