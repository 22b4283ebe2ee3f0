/**
 * seek() below an offset whose commit is on its way (docs/sdk.md, "Offsets"): the broker starts a
 * group's reads at max(requested, committed), so once that commit lands a read from the sought offset
 * starts at the commit instead, and the seek is silently lost (seen under a SIGSTOPped coordinator,
 * whose auto-commit stayed in flight for seconds). seek() refuses it with seek_below_committed, as it
 * does below the committed offset; once the commit settled, the committed offset is the bound.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Consumer } from 'tributary-client/consumer.js';
import { type BatchRecord, encodeBatch } from 'tributary-protocol/batch.js';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { ScriptedServer } from '../../helpers/scripted-server.js';
import { sleep, until } from '../../helpers/util.js';

const TOPIC = 't';

function batchFrom(offset: number, n: number): Buffer {
  const records: BatchRecord[] = Array.from({ length: n }, (_, i) => ({
    offset: offset + i,
    sequence: 0,
    producerId: '',
    key: null,
    epoch: -1,
    value: Buffer.from(`v${offset + i}`),
    timestamp: 0,
    attributes: 0,
    headers: [],
  }));
  return encodeBatch({ topic: TOPIC, partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records });
}

describe('Consumer: seek() while a commit is in flight (scripted broker)', () => {
  const cleanup: Array<() => Promise<unknown> | unknown> = [];
  afterEach(async () => {
    for (const f of cleanup.splice(0).reverse()) await f();
  });

  it('refuses a seek below the offset being committed; the seek it allows is read from', async () => {
    const s = await ScriptedServer.start();
    cleanup.push(() => s.close());
    let committed = 0;
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    s.on('FIND_COORDINATOR', () => `OK coordinator_id=0 host=127.0.0.1 port=${s.port} partition=0`);
    s.on('METADATA', () => `OK topic=${TOPIC} partitions=1 leaders=${s.address} epochs=0`);
    s.on('JOIN_GROUP', () => 'OK generation=1 member=m-1 leader=m-1 assignments=[0]');
    s.on('SYNC_GROUP', () => 'OK generation=1 member=m-1 leader=m-1 assignments=[0]');
    s.on('HEARTBEAT', async (l) => {
      await sleep(Math.min(Number(l.params.get('wait_ms') ?? 0), 30));
      return 'OK member=m-1 generation=1';
    });
    s.on('FETCH_OFFSET', () => `OK offset=${committed} committed=true`);
    // As the broker does: a group's read starts at max(requested, committed).
    s.on('CONSUME', (l) => batchFrom(Math.max(Number(l.params.get('offset')), committed), 5));
    // The first commit is answered only when the test says so (a coordinator slow to answer).
    s.on('BATCH_COMMIT', async (l) => {
      if (s.count('BATCH_COMMIT') === 1) await held;
      committed = Number(/P0:(\d+)/.exec(l.positional[0]!)![1]);
      return 'OK batched=1';
    });
    s.on('LEAVE_GROUP', () => 'OK group=g member=m-1 left=true');

    const c = new Consumer({
      brokers: [s.address],
      groupId: 'g',
      topic: TOPIC,
      autoCommit: false,
      sessionTimeoutMs: 1000,
      heartbeatIntervalMs: 50,
      maxWaitMs: 30,
      retry: { initialDelayMs: 1, maxDelayMs: 10 },
    });
    cleanup.push(() => c.close());
    cleanup.push(() => release()); // first, so that the close above is not held
    const it = c[Symbol.asyncIterator]();
    const next = async () => ((await it.next()).value as { offset: number }).offset;
    for (let i = 0; i < 8; i++) expect(await next()).toBe(i);
    const commit = c.commit(); // offsets 0..6 processed: P0:7, unanswered for now
    commit.catch(() => {}); // awaited below; a failing assertion must not leave it unhandled
    await until(() => s.count('BATCH_COMMIT') === 1, 5000, 'the commit sent');
    let refused: string | undefined;
    try {
      c.seek(0, 3);
    } catch (err) {
      refused = (err as TributaryError).code;
    }
    expect(refused).toBe('seek_below_committed');
    release();
    await commit;
    expect(committed).toBe(7);
    // At or above the committed offset a seek is taken, and read from.
    c.seek(0, 7);
    expect(await next()).toBe(7);
    await it.return!();
  });
});
