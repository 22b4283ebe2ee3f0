/**
 * The connection tells TurnWrites which replies are produce acknowledgements (src/broker/turn-writes.ts):
 * a binary batch's and a PUBLISH's reply are, refusals included; a HELP's or a CONSUME's is not. With the
 * wrong flag, a consumer's delivery would wait behind the producers' acks of its turn, or an ack go first.
 */
import { describe, expect, it } from 'vitest';
import { type ConnectionBroker, FakeClientSocket, connectFake } from '../../helpers/fake-client-socket.js';
import { encodeBatch } from 'tributary-protocol/batch.js';
import { encodeFrame } from 'tributary-protocol/frame.js';
import { batchRec, until } from '../../helpers/util.js';

describe.each(['chunks', 'direct'] as const)('ClientConnection: produce acks flagged for TurnWrites (%s reads)', (reads) => {
  it('flags the replies of BATCH and PUBLISH as acks, and those of HELP and CONSUME not', async () => {
    const socket = new FakeClientSocket();
    const corks: boolean[] = [];
    // A broker without topics: PUBLISH, the batch and CONSUME are refused, which is still their reply.
    const broker = {
      config: { maxFrameBytes: 64 * 1024 * 1024, idleTimeoutMs: 600_000, frameTimeoutMs: 60_000, maxPendingReplyBytes: 16 * 1024 * 1024, writeStallTimeoutMs: 60_000, maxMessageBytes: 1024 * 1024 },
      logger: { debug() {}, info() {}, warn() {}, error() {} },
      metrics: { connectionsRejected: { inc() {} }, pendingRequestBytes: { inc() {}, dec() {} }, errors: { inc() {} }, requestDuration: { child: () => ({ observe() {} }) } },
      turnWrites: {
        corkFor(s: unknown, ack: boolean) {
          expect(s).toBe(socket);
          corks.push(ack);
        },
      },
    } as unknown as ConnectionBroker;
    connectFake(socket, broker, reads);
    const requests: Array<[string, Buffer]> = [
      ['HELP', encodeFrame('HELP')],
      ['BATCH', encodeFrame(encodeBatch({ topic: 'nowhere', partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records: [batchRec(Buffer.from('v'))] }))],
      ['CONSUME', encodeFrame('CONSUME topic=nowhere partition=0 offset=0')],
      ['PUBLISH', encodeFrame('PUBLISH topic=nowhere partition=0 message=v')],
    ];
    for (const [name, frame] of requests) {
      const before = corks.length;
      socket.arrive(frame);
      await until(() => corks.length > before, 10_000, `${name}'s reply`);
    }
    expect(corks).toEqual([false, true, false, true]);
    const replies = socket.replies();
    expect(replies).toHaveLength(4);
    expect(replies[0]).toMatch(/^OK /);
    for (const r of replies.slice(1)) expect(r).toMatch(/^ERROR: /);
  });
});
