/**
 * A manual commit() still waiting for a coordinator that stopped answering when close() is called
 * (docs/sdk.md, "Consumer"): commits run one at a time, so close()'s final commit queued behind it and
 * close() waited out the manual commit's whole retry budget (35 s against a SIGSTOPped broker), and for
 * ever against one that keeps its connection but never answers. close() ends the manual commit
 * (`client_closed`); its own final commit gets the close deadline.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Consumer } from 'tributary-client/consumer.js';
import { type BatchRecord, encodeBatch } from 'tributary-protocol/batch.js';
import type { TributaryError } from 'tributary-protocol/errors.js';
import { ScriptedServer } from '../../helpers/scripted-server.js';
import { sleep } from '../../helpers/util.js';

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

describe('Consumer: a manual commit in flight at close() (scripted broker)', () => {
  const cleanup: Array<() => Promise<unknown> | unknown> = [];
  afterEach(async () => {
    for (const f of cleanup.splice(0).reverse()) await f();
  });

  it('close() ends the manual commit with client_closed', { timeout: 15_000 }, async () => {
    const s = await ScriptedServer.start();
    cleanup.push(() => s.close());
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
    s.on('FETCH_OFFSET', () => 'OK offset=0 committed=true');
    s.on('CONSUME', (l) => batchFrom(Number(l.params.get('offset')), 3));
    // The first commit is never answered (a coordinator that stopped answering; its connection stays up).
    s.on('BATCH_COMMIT', async (l) => {
      if (s.count('BATCH_COMMIT') === 1) await held;
      return `OK batched=${l.positional[0]!.split(',').length}`;
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
    cleanup.push(() => release()); // first, so that the close above ends without the fix too
    let commit: Promise<string> | undefined;
    let committedMessage = -1;
    for await (const m of c) {
      if (m.offset === 1) {
        committedMessage = m.offset;
        commit = c.commit({ message: m }).then(
          () => 'resolved',
          (e: TributaryError) => e.code,
        );
        break;
      }
    }
    // break closed the consumer: that returned while the first commit was still unanswered
    expect(c.state).toBe('closed');
    expect(await commit).toBe('client_closed');
    expect(committedMessage).toBe(1);
  });
});
