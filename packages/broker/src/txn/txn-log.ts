import type { Partition } from '../partition/partition.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { partitionForKey } from 'tributary-protocol/partitioner.js';
import { type InternalAppend, localAppend, replayJson, replicatedPast, waitReplicated } from '../partition/internal-log.js';

export const TXN_STATE_TOPIC = '__transaction_state';

/**
 * Where a transactional id stands. `prepare_commit` / `prepare_abort` are the durable decisions: once
 * written, the transaction ends that way even across a crash (recovery finishes it).
 */
export type TxnState = 'empty' | 'open' | 'prepare_commit' | 'prepare_abort' | 'committed' | 'aborted';

export interface TxnPartition {
  topic: string;
  partition: number;
}

export interface TxnOffset {
  group: string;
  topic: string;
  partition: number;
  /** The next offset to read. */
  offset: number;
}

/** One transactional id's state, as written to `__transaction_state` (latest record per id wins). */
export interface TxnMetadata {
  transactionalId: string;
  producerId: string;
  epoch: number;
  state: TxnState;
  timeoutMs: number;
  /** When the current transaction began (BEGIN_TXN), ms since the epoch; 0 when none is open. */
  startedMs: number;
  /** Data partitions the transaction wrote to: the ones that get its markers. */
  partitions: TxnPartition[];
  /** Consumer offsets sent to the transaction: applied only if it commits. */
  offsets: TxnOffset[];
  /** Why the last transaction was aborted by the coordinator, if it was (timeout, fenced). */
  abortReason?: string;
  updatedMs: number;
  /**
   * The principal that initialized the id (authentication on): only it, or an `admin`, may use the id
   * (docs/security.md, "Transactional ids"). Absent in records of earlier versions: the next to initialize claims it.
   */
  owner?: string;
  /**
   * The producer id and epoch the last INIT_PRODUCER_ID that named its producer's pair (Kafka's
   * InitProducerId v3+, KIP-360) bumped from: the same request sent again (its answer lost) gets the
   * current pair without another bump. Only while `producerId`/`epoch` are that bump's: any other move of
   * the epoch removes them. Absent in records of earlier versions: no previous pair.
   */
  lastProducerId?: string;
  lastEpoch?: number;
  /**
   * Only while an abort the coordinator decided at the last epoch (MAX_PRODUCER_EPOCH) is finished: the
   * id already moved to a new producer id, but the transaction's records carry this pair, so its markers
   * must name it (a marker of the new producer id would leave it open on every partition, the LSO stuck).
   */
  markerProducerId?: string;
  markerEpoch?: number;
}

function encodeKey(id: string): Buffer {
  return Buffer.from(JSON.stringify(['t', id]), 'utf8');
}

function validMetadata(v: unknown): v is TxnMetadata {
  const m = v as TxnMetadata;
  return (
    typeof m === 'object' &&
    m !== null &&
    typeof m.transactionalId === 'string' &&
    typeof m.producerId === 'string' &&
    Number.isSafeInteger(m.epoch) &&
    ['empty', 'open', 'prepare_commit', 'prepare_abort', 'committed', 'aborted'].includes(m.state) &&
    Array.isArray(m.partitions) &&
    Array.isArray(m.offsets) &&
    (m.owner === undefined || typeof m.owner === 'string') &&
    (m.lastProducerId === undefined || typeof m.lastProducerId === 'string') &&
    (m.lastEpoch === undefined || Number.isSafeInteger(m.lastEpoch)) &&
    (m.markerProducerId === undefined || typeof m.markerProducerId === 'string') &&
    (m.markerEpoch === undefined || Number.isSafeInteger(m.markerEpoch))
  );
}

/**
 * The transaction coordinator's durable state: one record per change of a transactional id, keyed
 * `["t", id]` with the whole TxnMetadata as JSON, so the compacted topic keeps just the latest.
 */
export class TxnLog {
  constructor(
    private readonly partitionsOf: () => Partition[],
    private readonly appendTo: InternalAppend = localAppend,
  ) {}

  get partitionCount(): number {
    return this.partitionsOf().length;
  }

  partitionFor(id: string): number {
    return partitionForKey(Buffer.from(id, 'utf8'), this.partitionCount);
  }

  /**
   * Durable when resolved. Appends to one partition are queued in call order, so the last write of an id
   * is the latest state even when writes overlap.
   */
  async write(meta: TxnMetadata): Promise<void> {
    const part = this.partitionsOf()[this.partitionFor(meta.transactionalId)]!;
    try {
      await this.appendTo(part, [{ key: encodeKey(meta.transactionalId), value: Buffer.from(JSON.stringify(meta), 'utf8') }]);
    } catch (err) {
      if (err instanceof TributaryError) throw err;
      throw new TributaryError('storage_error', { reason: (err as Error).message });
    }
  }

  /** Forgets an id: a tombstone, durable when resolved (compaction drops it later). */
  async remove(id: string): Promise<void> {
    const part = this.partitionsOf()[this.partitionFor(id)]!;
    try {
      await this.appendTo(part, [{ key: encodeKey(id), value: Buffer.alloc(0) }]);
    } catch (err) {
      if (err instanceof TributaryError) throw err;
      throw new TributaryError('storage_error', { reason: (err as Error).message });
    }
  }

  /**
   * The latest state of every id in one partition, to the log end (replayJson), and the offset of the
   * latest record of each id whose record lies at or past the HWM (`unreplicated`): cluster mode, not on
   * the in-sync replicas yet, so another change of leader may still lose it. A record that does not parse
   * stops the replay: the broker stays unready rather than forget a transaction it must finish.
   */
  async replay(partitionIndex: number): Promise<{ states: Map<string, TxnMetadata>; unreplicated: Map<string, number> }> {
    const part = this.partitionsOf()[partitionIndex]!;
    const states = new Map<string, TxnMetadata>();
    const unreplicated = new Map<string, number>();
    await replayJson(part, `${TXN_STATE_TOPIC}[${partitionIndex}]`, (key, value, at, offset, confirmed) => {
      if (!Array.isArray(key) || key[0] !== 't' || typeof key[1] !== 'string') throw new Error(`${at}: bad key`);
      if (value === null) states.delete(key[1]);
      else if (validMetadata(value) && value.transactionalId === key[1]) states.set(key[1], value);
      else throw new Error(`${at}: bad transaction state`);
      if (!confirmed) unreplicated.set(key[1], offset);
      else unreplicated.delete(key[1]);
    });
    return { states, unreplicated };
  }

  /** Whether the id's partition's HWM has passed `offset`: the record there is on every in-sync replica. */
  replicatedPast(id: string, offset: number): boolean {
    return replicatedPast(this.partitionsOf()[this.partitionFor(id)]!, offset);
  }

  /** internal-log.ts waitReplicated on the id's partition. */
  waitReplicated(id: string, offset: number, timeoutMs: number): Promise<boolean> {
    return waitReplicated(this.partitionsOf()[this.partitionFor(id)]!, offset, timeoutMs);
  }
}
