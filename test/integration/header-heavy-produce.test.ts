/**
 * Batch frames of 64 MiB holding 11M empty headers against a real broker: whatever the broker answers, it
 * builds no object per header. A batch that took a decoding path (a header key not valid UTF-8, an
 * idempotent batch naming two producer ids) peaked at 2 GB, and five at once killed the broker.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BrokerProcess } from '../helpers/launcher.js';
import { FULL_FRAME_RECORDS, MAX_HEADERS, alive, batchFrame, peakGrowth, recordWithHeaders, servesAnother } from '../helpers/raw-batch.js';
import { RawClient } from '../helpers/raw-client.js';

let broker: BrokerProcess;

beforeAll(async () => {
  broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1'] });
  const c = await RawClient.connect(broker.port);
  expect(await c.command('CREATE topic=t partitions=1')).toMatch(/^OK/);
  c.destroy();
});

afterAll(async () => {
  await broker?.dispose();
});

/** Sends `body` on a record_extensions_v1 connection; the reply and the growth of the broker's peak RSS (MiB). */
async function produce(body: Buffer): Promise<{ reply: string; growthMiB: number }> {
  const c = await RawClient.connect(broker.port);
  try {
    expect(await c.command('NEGOTIATE version=1 features=record_extensions_v1')).toMatch(/^OK/);
    const growth = peakGrowth(broker);
    const reply = await c.command(body, 120_000);
    return { reply, growthMiB: growth() };
  } finally {
    c.destroy();
  }
}

it('refuses a batch with a header key that is not valid UTF-8 (invalid_batch), without decoding it', async () => {
  const records = Array.from({ length: FULL_FRAME_RECORDS }, (_, i) => recordWithHeaders(MAX_HEADERS, { key0: i === 0 ? Buffer.from([0xff]) : undefined }));
  const { reply, growthMiB } = await produce(batchFrame('t', 0, records));
  expect(reply).toMatch(/^ERROR: invalid_batch .*header key is not valid UTF-8/);
  // Decoded it took 2 GB; the frame itself is 64 MiB.
  expect(growthMiB).toBeLessThan(512);
  expect(alive(broker)).toBe(true);
  await servesAnother(broker, 't');
}, 180_000);

it('refuses an idempotent batch whose records name two producer ids from its bytes, without decoding it', async () => {
  const records = Array.from({ length: FULL_FRAME_RECORDS }, (_, i) => recordWithHeaders(MAX_HEADERS, { producerId: i === 0 ? '1' : '2', epoch: 0 }));
  const { reply, growthMiB } = await produce(batchFrame('t', 0, records, { flags: 1, firstSequence: 0, lastSequence: FULL_FRAME_RECORDS - 1 }));
  expect(reply).toMatch(/^ERROR: invalid_batch .*share one producer id and epoch/);
  expect(growthMiB).toBeLessThan(512);
  expect(alive(broker)).toBe(true);
  await servesAnother(broker, 't');
}, 180_000);

it('refuses an idempotent batch whose producer id is not valid UTF-8 as not issued, from its bytes', async () => {
  const raw = recordWithHeaders(0, { producerId: Buffer.from([0xff, 0x31]), epoch: 0 });
  const { reply } = await produce(batchFrame('t', 0, [raw], { flags: 1 }));
  expect(reply).toMatch(/^ERROR: unknown_producer_id/);
});
