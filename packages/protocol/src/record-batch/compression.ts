/**
 * The compression codecs of RecordBatch v2, by attribute value. gzip (node:zlib) is built in; snappy and
 * lz4 are slots the broker fills with registerCompressionCodec (their npm codecs are its dependencies, not
 * the SDK's); zstd is refused, since Node 20's zlib has no zstd.
 */
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import { RecordBatchError } from './errors.js';
import { COMPRESSION_NAMES, Compression } from './layout.js';

export interface CompressionCodec {
  compress(data: Buffer): Buffer;
  /** Must refuse (throw) output past `maxBytes`: a small batch must not inflate without bound. */
  decompress(data: Buffer, maxBytes: number): Buffer;
  /** Off-thread variants for the event loop's sake; the sync ones are used when absent. */
  compressAsync?(data: Buffer): Promise<Buffer>;
  decompressAsync?(data: Buffer, maxBytes: number): Promise<Buffer>;
}

/** Default bound on a batch's decompressed records: the broker's maximum message size is far below it. */
export const DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024;

const gzipAsync = promisify(zlib.gzip);
const gunzipAsync = promisify(zlib.gunzip) as (data: Buffer, opts: zlib.ZlibOptions) => Promise<Buffer>;

const gzip: CompressionCodec = {
  compress: (data) => zlib.gzipSync(data),
  decompress: (data, maxBytes) => zlib.gunzipSync(data, { maxOutputLength: maxBytes }),
  compressAsync: (data) => gzipAsync(data),
  decompressAsync: (data, maxBytes) => gunzipAsync(data, { maxOutputLength: maxBytes }),
};

const codecs: (CompressionCodec | undefined)[] = [undefined, gzip, undefined, undefined, undefined];

/** Registers the snappy (2) or lz4 (3) codec. gzip is built in, and zstd (4) cannot be registered. */
export function registerCompressionCodec(type: 'snappy' | 'lz4', codec: CompressionCodec): void {
  codecs[Compression[type]] = codec;
}

/** The codec of a compression attribute value (1-4); a precise error when there is none. */
export function compressionCodec(type: number): CompressionCodec {
  const codec = type >= 1 && type <= 4 ? codecs[type] : undefined;
  if (codec) return codec;
  if (type === Compression.zstd) {
    throw new RecordBatchError('unsupported_compression', 'zstd is not supported (Node 20 has no zstd in zlib)', { compression: 'zstd' });
  }
  if (type === Compression.snappy || type === Compression.lz4) {
    const name = COMPRESSION_NAMES[type]!;
    throw new RecordBatchError('unsupported_compression', `no ${name} codec is registered`, { compression: name });
  }
  throw new RecordBatchError('unknown_compression', `compression type ${type} is not defined`, { compression: type });
}

/** Runs a codec's decompress, turning its failure or an oversized output into a RecordBatchError. */
export function decompressWith(codec: CompressionCodec, type: number, data: Buffer, maxBytes: number): Buffer {
  try {
    const out = codec.decompress(data, maxBytes);
    if (out.length > maxBytes) throw new Error(`output larger than ${maxBytes} bytes`);
    return out;
  } catch (err) {
    throw decompressionFailed(type, err);
  }
}

export async function decompressWithAsync(codec: CompressionCodec, type: number, data: Buffer, maxBytes: number): Promise<Buffer> {
  if (!codec.decompressAsync) return decompressWith(codec, type, data, maxBytes);
  try {
    const out = await codec.decompressAsync(data, maxBytes);
    if (out.length > maxBytes) throw new Error(`output larger than ${maxBytes} bytes`);
    return out;
  } catch (err) {
    throw decompressionFailed(type, err);
  }
}

function decompressionFailed(type: number, err: unknown): RecordBatchError {
  const name = COMPRESSION_NAMES[type] ?? String(type);
  return new RecordBatchError('decompression_failed', `${name}: ${err instanceof Error ? err.message : String(err)}`, { compression: name });
}
