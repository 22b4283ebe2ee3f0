/**
 * Shared helpers of the transaction tests: a raw transactional producer over one connection (the wire
 * commands, no SDK), and reads of a partition in either isolation.
 */
import type { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { RecordAttr } from 'tributary-protocol/record.js';

export function kv(reply: string): Map<string, string> {
  return parseLine(reply).params;
}

/** A transactional producer speaking the wire protocol: INIT, BEGIN, TXN_PUBLISH (seqNum from 1), END. */
export class RawTxnProducer {
  producerId = '';
  epoch = -1;
  seq = 0;

  constructor(
    readonly conn: Connection,
    readonly id: string,
  ) {}

  async init(extra: Record<string, number> = {}): Promise<void> {
    const r = kv(await this.conn.command('INIT_PRODUCER_ID', { transactional_id: this.id, ...extra }));
    this.producerId = r.get('producerId')!;
    this.epoch = Number(r.get('epoch'));
  }

  ids(): { transactional_id: string; producerId: string; epoch: number } {
    return { transactional_id: this.id, producerId: this.producerId, epoch: this.epoch };
  }

  async begin(): Promise<string> {
    const r = await this.conn.command('BEGIN_TXN', this.ids());
    this.seq = 0;
    return r;
  }

  /** Publishes with the next seqNum (or the given one, for retries and bad input); returns partition and offset. */
  async publish(topic: string, message: string, opts: { partition?: number; key?: string; seqNum?: number } = {}): Promise<{ partition: number; offset: number; duplicate: boolean }> {
    const seqNum = opts.seqNum ?? ++this.seq;
    const r = kv(await this.conn.command('TXN_PUBLISH', { ...this.ids(), topic, partition: opts.partition, key: opts.key, seqNum, message }));
    return { partition: Number(r.get('partition')), offset: Number(r.get('offset')), duplicate: r.get('duplicate') === 'true' };
  }

  async sendOffsets(topic: string, group: string, member: string, generation: number, entries: string): Promise<number> {
    const r = kv(await this.conn.command('SEND_OFFSETS_TO_TXN', { ...this.ids(), topic, group, member, generation }, [entries]));
    return Number(r.get('staged_offsets'));
  }

  async end(result: 'commit' | 'abort'): Promise<string> {
    return kv(await this.conn.command('END_TXN', { ...this.ids(), result })).get('state')!;
  }

  async status(): Promise<Map<string, string>> {
    return kv(await this.conn.command('TXN_STATUS', { transactional_id: this.id }));
  }
}

export interface ReadRecord {
  offset: number;
  value: string;
  control: boolean;
}

/** Every record of a partition from `from` up to where the isolation lets a reader go. */
export async function readAll(c: Connection, topic: string, partition: number, isolation: 'read_committed' | 'read_uncommitted', from = 0): Promise<ReadRecord[]> {
  const out: ReadRecord[] = [];
  let offset = from;
  for (let i = 0; i < 10_000; i++) {
    const b = await c.consume({ topic, partition, offset, isolation, batch: 1000 });
    if (b.records.length === 0) {
      if (b.trailer && b.trailer.nextOffset > offset) {
        offset = b.trailer.nextOffset;
        continue;
      }
      return out;
    }
    for (const r of b.records) out.push({ offset: r.offset, value: r.value.toString(), control: (r.attributes & RecordAttr.CONTROL) !== 0 });
    offset = b.trailer?.nextOffset ?? b.records[b.records.length - 1]!.offset + 1;
  }
  throw new Error('readAll did not reach the end');
}

/** `latest` of LIST_OFFSETS (the last stable offset) and the log end. */
export async function offsets(c: Connection, topic: string, partition: number): Promise<{ latest: number; leo: number }> {
  const csv = kv(await c.command('LIST_OFFSETS', { topic, partition })).get('offsets')!;
  return { latest: Number(/latest=(\d+)/.exec(csv)![1]), leo: Number(/leo=(\d+)/.exec(csv)![1]) };
}
