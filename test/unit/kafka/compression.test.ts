/**
 * snappy and lz4 on the Kafka port (packages/broker/src/kafka/compression.ts): batches in both framings
 * snappy comes in decode, and neither codec inflates past its bound, judged from the sizes the compressed
 * bytes declare before anything is inflated.
 */
import { describe, expect, it } from 'vitest';
import { compressSync } from 'snappy';
import { compressFrameSync } from 'lz4-napi';
import { encodeRecordBatch } from 'tributary-protocol/record-batch/encode.js';
import { RecordBatchView } from 'tributary-protocol/record-batch/view.js';
import { lz4Codec, registerKafkaCodecs, snappyCodec } from 'tributary-broker/kafka/compression.js';

const text = (n: number) => Buffer.from('the quick brown fox jumps over the lazy dog '.repeat(n));

function xerial(blocks: Buffer[]): Buffer {
  const header = Buffer.from([0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00, 0, 0, 0, 1, 0, 0, 0, 1]);
  return Buffer.concat([header, ...blocks.flatMap((b) => [Buffer.from([(b.length >>> 24) & 0xff, (b.length >>> 16) & 0xff, (b.length >>> 8) & 0xff, b.length & 0xff]), b])]);
}

describe('Kafka compression codecs', () => {
  it('snappy: raw blocks and the xerial framing of the Java clients decode', () => {
    const a = text(100);
    const b = text(50);
    expect(snappyCodec.decompress(compressSync(a), 1 << 20)).toEqual(a);
    expect(snappyCodec.decompress(xerial([compressSync(a), compressSync(b)]), 1 << 20)).toEqual(Buffer.concat([a, b]));
  });

  it('snappy: a block declaring more than the bound is refused before it is inflated', () => {
    const big = compressSync(Buffer.alloc(2 << 20));
    expect(big.length).toBeLessThan(200_000);
    expect(() => snappyCodec.decompress(big, 1 << 20)).toThrow(/larger than 1048576 bytes/);
    expect(() => snappyCodec.decompress(xerial([compressSync(text(20_000)), compressSync(text(20_000))]), 1_000_000)).toThrow(/larger than/);
  });

  it('lz4: frames decode, and a frame whose blocks could pass the bound is refused', () => {
    const a = text(1000);
    expect(lz4Codec.decompress(compressFrameSync(a), 1 << 20)).toEqual(a);
    // 8 MiB of zeros: a few KB compressed, in blocks of at most 4 MiB.
    const bomb = compressFrameSync(Buffer.alloc(8 << 20));
    expect(bomb.length).toBeLessThan(100_000);
    expect(() => lz4Codec.decompress(bomb, 1 << 20)).toThrow(/larger than/);
    expect(() => lz4Codec.decompress(Buffer.from('not a frame'), 1 << 20)).toThrow(/not an LZ4 frame/);
  });

  it('once registered, RecordBatch v2 batches compressed with either read back', () => {
    registerKafkaCodecs();
    for (const compression of ['snappy', 'lz4'] as const) {
      const batch = encodeRecordBatch({ records: [{ key: Buffer.from('k'), value: text(10) }, { key: null, value: Buffer.from('v2') }], compression });
      const decoded = new RecordBatchView(batch).validate().decode();
      expect(decoded.compression).toBe(compression);
      expect(decoded.records.map((r) => r.value!.toString())).toEqual([text(10).toString(), 'v2']);
    }
  });
});
