/**
 * snappy and lz4 for RecordBatch v2 on the Kafka port (docs/kafka.md, "Compression"), through the napi-rs
 * bindings `snappy` and `lz4-napi` (broker dependencies only: the SDK does not compress). Both decoders
 * bound their output before inflating anything, from sizes the compressed bytes declare, so a small batch
 * cannot balloon (the codec contract of tributary-protocol/record-batch/compression.ts):
 * - snappy: raw blocks (librdkafka, kafkajs) or the xerial framing of the Java clients (magic, version,
 *   then length-prefixed raw blocks); each raw block starts with its uncompressed length as a varint.
 * - lz4: the LZ4 frame format (Kafka's from RecordBatch v1 on); its block count times its block maximum.
 */
import { compressFrameSync, decompressFrameSync } from 'lz4-napi';
import { compressSync as snappyCompress, uncompressSync as snappyUncompress } from 'snappy';
import { type CompressionCodec, registerCompressionCodec } from 'tributary-protocol/record-batch/compression.js';

const XERIAL_MAGIC = Buffer.from([0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00]);
/** Magic, version and compatible version. */
const XERIAL_HEADER = 16;

function tooLarge(max: number): Error {
  // The wording the produce path recognises as "past the size limit" (kafka/apis/produce.ts).
  return new Error(`output larger than ${max} bytes`);
}

/** The uncompressed length a raw snappy block declares (a varint at its start). */
function snappyLength(block: Buffer): number {
  let n = 0;
  for (let i = 0, shift = 0; i < Math.min(block.length, 5); i++, shift += 7) {
    const b = block[i]!;
    n += (b & 0x7f) * 2 ** shift;
    if ((b & 0x80) === 0) return n;
  }
  throw new Error('snappy block without a valid length');
}

function snappyBlocks(data: Buffer): Buffer[] {
  if (data.length < XERIAL_HEADER || !data.subarray(0, 8).equals(XERIAL_MAGIC)) return [data];
  const blocks: Buffer[] = [];
  for (let at = XERIAL_HEADER; at < data.length; ) {
    if (at + 4 > data.length) throw new Error('xerial snappy block length cut short');
    const len = data.readInt32BE(at);
    if (len < 0 || at + 4 + len > data.length) throw new Error('xerial snappy block past the end');
    blocks.push(data.subarray(at + 4, at + 4 + len));
    at += 4 + len;
  }
  return blocks;
}

export const snappyCodec: CompressionCodec = {
  compress: (data) => snappyCompress(data),
  decompress: (data, maxBytes) => {
    const blocks = snappyBlocks(data);
    let total = 0;
    for (const b of blocks) {
      total += snappyLength(b);
      if (total > maxBytes) throw tooLarge(maxBytes);
    }
    const out = blocks.map((b) => snappyUncompress(b, { asBuffer: true }) as Buffer);
    return out.length === 1 ? out[0]! : Buffer.concat(out, total);
  },
};

/** Block maximum sizes of the frame descriptor's BD byte (bits 4-6). */
const LZ4_BLOCK_MAX: Record<number, number> = { 4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20 };

/** The most an LZ4 frame can inflate to, from its header and block sizes. */
function lz4Bound(data: Buffer): number {
  if (data.length < 7 || data.readUInt32LE(0) !== 0x184d2204) throw new Error('not an LZ4 frame');
  const flg = data[4]!;
  const blockMax = LZ4_BLOCK_MAX[(data[5]! >> 4) & 0x07];
  if (blockMax === undefined) throw new Error('LZ4 frame with an invalid block maximum');
  // The block sizes bound what the frame inflates to; a declared content size is the sender's word only.
  const blockChecksum = (flg & 0x10) !== 0;
  let at = 6 + ((flg & 0x08) !== 0 ? 8 : 0) + ((flg & 0x01) !== 0 ? 4 : 0) + 1; // content size, dictionary id, header checksum
  let blocks = 0;
  for (;;) {
    if (at + 4 > data.length) throw new Error('LZ4 frame cut short');
    const size = data.readUInt32LE(at) & 0x7fffffff;
    at += 4;
    if (size === 0) return blocks * blockMax;
    at += size + (blockChecksum ? 4 : 0);
    blocks++;
  }
}

export const lz4Codec: CompressionCodec = {
  compress: (data) => compressFrameSync(data),
  decompress: (data, maxBytes) => {
    if (lz4Bound(data) > maxBytes) throw tooLarge(maxBytes);
    return decompressFrameSync(data);
  },
};

/** Makes snappy and lz4 batches readable (and writable) in this process. */
export function registerKafkaCodecs(): void {
  registerCompressionCodec('snappy', snappyCodec);
  registerCompressionCodec('lz4', lz4Codec);
}
