/**
 * Transactional batch frames (flags 2) of 64 MiB holding 11M empty headers against a real broker: refused
 * from the frame's header when that says enough, else decoded within the frame's object budget. Decoded
 * first, a frame with an unknown transactional id took 1.9 GB to be refused.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { BrokerProcess } from '../../helpers/launcher.js';
import { FULL_FRAME_RECORDS, MAX_HEADERS, alive, batchFrame, peakGrowth, recordWithHeaders, servesAnother } from '../../helpers/raw-batch.js';
import { RawClient } from '../../helpers/raw-client.js';

let broker: BrokerProcess;
let c: RawClient;
let producerId = '';
let epoch = 0;
/** The next seqNum of the open transaction. */
let seq = 1;

beforeAll(async () => {
  broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--transaction-state-partitions', '1'] });
  c = await RawClient.connect(broker.port);
  expect(await c.command('NEGOTIATE version=1 features=record_extensions_v1')).toMatch(/^OK/);
  expect(await c.command('CREATE topic=t partitions=1')).toMatch(/^OK/);
  const init = await c.command('INIT_PRODUCER_ID transactional_id=heavy');
  producerId = /producerId=(\S+)/.exec(init)![1]!;
  epoch = Number(/epoch=(\d+)/.exec(init)![1]);
  expect(await c.command(`BEGIN_TXN transactional_id=heavy producerId=${producerId} epoch=${epoch}`)).toMatch(/^OK/);
});

afterAll(async () => {
  c?.destroy();
  await broker?.dispose();
});

const fullFrame = (id: string) =>
  batchFrame(
    't',
    0,
    Array.from({ length: FULL_FRAME_RECORDS }, () => recordWithHeaders(MAX_HEADERS)),
    { txn: { id, producerId, epoch }, firstSequence: seq, lastSequence: seq + FULL_FRAME_RECORDS - 1 },
  );

it('refuses a frame of an unknown transactional id from its header, before decoding its records', async () => {
  const growth = peakGrowth(broker);
  const reply = await c.command(fullFrame('no-such-id'), 120_000);
  expect(reply).toMatch(/^ERROR: transactional_id_not_found/);
  expect(growth()).toBeLessThan(512);
  expect(alive(broker)).toBe(true);
  await servesAnother(broker, 't');
}, 180_000);

it('refuses a frame of the open transaction past its object budget (671,088 records and headers at 64 MiB)', async () => {
  const growth = peakGrowth(broker);
  const reply = await c.command(fullFrame('heavy'), 120_000);
  expect(reply).toMatch(/^ERROR: invalid_batch .*more than 671088 records and headers/);
  expect(growth()).toBeLessThan(512);
  expect(alive(broker)).toBe(true);
  await servesAnother(broker, 't');
}, 180_000);

it('takes a frame within the budget, headers and all, and the transaction goes on', async () => {
  // 10 records of 65,535 headers: 655,360 objects.
  const records = Array.from({ length: 10 }, () => recordWithHeaders(MAX_HEADERS));
  const frame = batchFrame('t', 0, records, { txn: { id: 'heavy', producerId, epoch }, firstSequence: seq, lastSequence: seq + 9 });
  const reply = await c.command(frame, 120_000);
  expect(JSON.parse(reply)).toMatchObject({ status: 'OK', transactional_id: 'heavy', topic: 't' });
  seq += 10;
  expect(await c.command(`END_TXN transactional_id=heavy producerId=${producerId} epoch=${epoch} result=commit`)).toMatch(/^OK/);
}, 180_000);
