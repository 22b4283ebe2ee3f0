/**
 * Hand-built batch frames (docs/protocol.md section 5, record_extensions_v1 fields) with many headers, and a
 * broker process's memory as /proc shows it: what the tests of the broker's memory bounds for header-heavy
 * batches share (with RawClient, helpers/raw-client.ts, to send them).
 */
import fs from 'node:fs';
import type { BrokerProcess } from './launcher.js';
import { RawClient } from './raw-client.js';

/**
 * Starts a fresh peak for the broker's memory (VmHWM back to the current RSS, /proc/pid/clear_refs "5"),
 * and returns a function giving the growth of the peak over the RSS at this call, in MiB.
 */
export function peakGrowth(b: BrokerProcess): () => number {
  const pid = b.proc!.pid!;
  const read = (field: string): number => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? Number.NaN);
  fs.writeFileSync(`/proc/${pid}/clear_refs`, '5');
  const before = read('VmRSS');
  return () => (read('VmHWM') - before) / 1024;
}

export function alive(b: BrokerProcess): boolean {
  return b.proc !== undefined && b.proc.exitCode === null && b.proc.signalCode === null;
}

/** A batch frame's header (acks 1); with `txn`, acks all, flags 2 and its transaction section (coordinator partition and epoch -1). */
export function batchFrame(
  topic: string,
  partition: number,
  records: Buffer[],
  opts: { flags?: number; firstSequence?: number; lastSequence?: number; txn?: { id: string; producerId: string; epoch: number } } = {},
): Buffer {
  const t = Buffer.from(topic);
  // A transactional batch needs acks=all (docs/protocol.md 5.3); a plain one takes 1.
  const acks = opts.txn ? 'all' : '1';
  const h = Buffer.alloc(2 + 2 + t.length + 4 + 1 + acks.length + 1 + 16 + 4);
  let at = h.writeUInt16BE(0xba7c, 0);
  at = h.writeUInt16BE(t.length, at);
  at += t.copy(h, at);
  at = h.writeInt32BE(partition, at);
  at = h.writeUInt8(acks.length, at);
  at += h.write(acks, at);
  at = h.writeUInt8(opts.txn ? 2 : (opts.flags ?? 0), at);
  at = h.writeBigUInt64BE(BigInt(opts.firstSequence ?? 0), at);
  at = h.writeBigUInt64BE(BigInt(opts.lastSequence ?? 0), at);
  h.writeInt32BE(records.length, at);
  const parts = [h];
  if (opts.txn) {
    const id = Buffer.from(opts.txn.id);
    const pid = Buffer.from(opts.txn.producerId);
    const s = Buffer.alloc(2 + id.length + 2 + pid.length + 12);
    let p = s.writeUInt16BE(id.length, 0);
    p += id.copy(s, p);
    p = s.writeUInt16BE(pid.length, p);
    p += pid.copy(s, p);
    p = s.writeInt32BE(opts.txn.epoch, p);
    p = s.writeInt32BE(-1, p);
    s.writeInt32BE(-1, p);
    parts.push(s);
  }
  return Buffer.concat([...parts, ...records]);
}

/**
 * One record (record_extensions_v1 layout) with `count` headers of empty values, the first header's key
 * `key0` and the others empty: 43 bytes plus 6 per header, so a 64 MiB frame holds about 11M headers.
 */
export function recordWithHeaders(count: number, opts: { key0?: Buffer; producerId?: string | Buffer; epoch?: number; value?: Buffer } = {}): Buffer {
  const key0 = opts.key0 ?? Buffer.alloc(0);
  const pid = typeof opts.producerId === 'string' || opts.producerId === undefined ? Buffer.from(opts.producerId ?? '') : opts.producerId;
  const value = opts.value ?? Buffer.alloc(0);
  const r = Buffer.alloc(16 + 2 + pid.length + 2 + 8 + 4 + value.length + 11 + count * 6 + (count > 0 ? key0.length : 0));
  // offset and sequence 0
  let at = r.writeUInt16BE(pid.length, 16);
  at += pid.copy(r, at);
  at = r.writeUInt16BE(0, at); // no key
  at = r.writeBigInt64BE(BigInt(opts.epoch ?? -1), at);
  at = r.writeUInt32BE(value.length, at);
  at += value.copy(r, at);
  at += 8; // timestamp 0: stamped on append
  at = r.writeUInt8(0, at);
  at = r.writeUInt16BE(count, at);
  for (let i = 0; i < count; i++) {
    const k = i === 0 ? key0 : Buffer.alloc(0);
    at = r.writeUInt16BE(k.length, at);
    at += k.copy(r, at);
    at = r.writeUInt32BE(0, at);
  }
  if (at !== r.length) throw new Error(`record size ${at} != ${r.length}`);
  return r;
}

/** The largest header count a record of the protocol can carry (u16). */
export const MAX_HEADERS = 65_535;

/** Records of MAX_HEADERS empty headers that fill a 64 MiB frame (63.8 MiB with the header). */
export const FULL_FRAME_RECORDS = 170;

/** A second connection is served: it publishes a record to `topic` partition 0 and reads it back. */
export async function servesAnother(b: BrokerProcess, topic: string): Promise<void> {
  const c = await RawClient.connect(b.port);
  try {
    const published = await c.command(`PUBLISH topic=${topic} partition=0 message=still-here`);
    const offset = Number(/"offset":(\d+)/.exec(published)?.[1]);
    if (!Number.isSafeInteger(offset)) throw new Error(`PUBLISH answered ${published.slice(0, 200)}`);
    const read = await c.command(`CONSUME topic=${topic} partition=0 offset=${offset} batch=1`);
    if (!read.includes('still-here')) throw new Error(`CONSUME answered ${read.slice(0, 200)}`);
  } finally {
    c.destroy();
  }
}
