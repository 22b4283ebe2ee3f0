/**
 * A scripted broker (scripted-server.ts) as one consumer group's coordinator and its topic's only
 * partition leader: member m-1 of generation 1 owns partition 0 of topic `t`, reads are answered from
 * `read` (default: 5 records from the requested offset), and the tests add what they are about
 * (FETCH_OFFSET, BATCH_COMMIT, ...).
 */
import { afterEach } from 'vitest';
import { type BatchRecord, encodeBatch } from 'tributary-protocol/batch.js';
import type { ParsedLine } from 'tributary-protocol/command.js';
import { Consumer } from 'tributary-client/consumer.js';
import { ScriptedServer } from './scripted-server.js';
import { sleep } from './util.js';

export const TOPIC = 't';

/** A reply batch of `n` records of `partition` (default 0) from `offset`, valued `value(offset)` (default `v<offset>`). */
export function batchFrom(offset: number, n: number, partition = 0, value: (offset: number) => string = (o) => `v${o}`): Buffer {
  const records: BatchRecord[] = Array.from({ length: n }, (_, i) => ({
    offset: offset + i,
    sequence: 0,
    producerId: '',
    key: null,
    epoch: -1,
    value: Buffer.from(value(offset + i)),
    timestamp: 0,
    attributes: 0,
    headers: [],
  }));
  return encodeBatch({ topic: TOPIC, partition, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records });
}

/** The scripted broker with the group's membership and the topic's metadata answered. */
export async function scriptedGroup(): Promise<ScriptedServer> {
  const s = await ScriptedServer.start();
  s.on('FIND_COORDINATOR', () => `OK coordinator_id=0 host=127.0.0.1 port=${s.port} partition=0`);
  s.on('METADATA', () => `OK topic=${TOPIC} partitions=1 leaders=${s.address} epochs=0`);
  s.on('JOIN_GROUP', () => 'OK generation=1 member=m-1 leader=m-1 assignments=[0]');
  s.on('SYNC_GROUP', () => 'OK generation=1 member=m-1 leader=m-1 assignments=[0]');
  s.on('HEARTBEAT', async (l) => {
    await sleep(Math.min(Number(l.params.get('wait_ms') ?? 0), 30));
    return 'OK member=m-1 generation=1';
  });
  s.on('LEAVE_GROUP', () => 'OK group=g member=m-1 left=true');
  return s;
}

/** Consumer options for `s` that keep a test's rebalances and retries short. */
export function quickConsumer(s: ScriptedServer) {
  return {
    brokers: [s.address],
    groupId: 'g',
    topic: TOPIC,
    autoCommit: false,
    sessionTimeoutMs: 1000,
    heartbeatIntervalMs: 50,
    maxWaitMs: 30,
    retry: { initialDelayMs: 1, maxDelayMs: 10 },
  };
}

/** Clean-ups a test registers (closers of scripted servers and consumers), run last-first after each test. */
export function useCleanup(): Array<() => Promise<unknown> | unknown> {
  const cleanup: Array<() => Promise<unknown> | unknown> = [];
  afterEach(async () => {
    for (const f of cleanup.splice(0).reverse()) await f();
  });
  return cleanup;
}

/**
 * A quickConsumer of `s` whose first BATCH_COMMIT is not answered until release() (a coordinator that
 * stopped answering; its connection stays up); every commit is answered with `answer`. The clean-ups
 * release it before closing the consumer, so that the close is not held.
 */
export function consumerWithHeldCommit(
  s: ScriptedServer,
  cleanup: Array<() => Promise<unknown> | unknown>,
  answer: (l: ParsedLine) => string = () => 'OK batched=1',
): { c: Consumer; release: () => void } {
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  s.on('BATCH_COMMIT', async (l) => {
    if (s.count('BATCH_COMMIT') === 1) await held;
    return answer(l);
  });
  const c = new Consumer(quickConsumer(s));
  cleanup.push(() => c.close());
  cleanup.push(() => release());
  return { c, release };
}
