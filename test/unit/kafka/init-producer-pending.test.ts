/**
 * InitProducerId while the id's decided transaction is not finished (kafka/apis/transactions.ts): the
 * coordinator's failure is CONCURRENT_TRANSACTIONS, so the client backs off and retries; a principal
 * without permission on the id, a bad timeout or a broker shutting down keep their own answers (a refusal
 * turned retriable would have the client retry for as long as the markers fail, and tell it the id's state).
 */
import { describe, expect, it } from 'vitest';
import { TributaryError } from 'tributary-protocol/errors.js';
import { initTransactional } from 'tributary-broker/kafka/apis/transactions.js';
import type { KafkaRequestContext } from 'tributary-broker/kafka/context.js';
import { kafkaErrorCode } from 'tributary-broker/kafka/protocol/error-codes.js';

/** A coordinator whose id `tx` is committing (its markers failing) and whose INIT_PRODUCER_ID fails with `failure`. */
function context(o: { denied?: boolean; failure: Error }): KafkaRequestContext {
  return {
    authorize: () => (o.denied ? new TributaryError('authorization_failed', { permission: 'transaction' }) : undefined),
    broker: {
      config: { maxTransactionTimeoutMs: 900_000 },
      // Authentication off: no caller, and every id may be used (docs/security.md, "Transactional ids").
      security: { txnCaller: () => undefined },
      transactions: {
        checkCaller: () => undefined,
        status: () => ({ producerId: '7', epoch: 0, state: 'committing' }),
        initProducerId: async () => {
          throw o.failure;
        },
      },
    },
  } as unknown as KafkaRequestContext;
}

const body = { transactionalId: 'tx', transactionTimeoutMs: 60_000, producerId: -1n, producerEpoch: -1 };
const storage = () => new TributaryError('storage_error', { reason: 'disk full' });

describe('InitProducerId while markers are pending', () => {
  it('answers the coordinator failure CONCURRENT_TRANSACTIONS', async () => {
    const r = await initTransactional(context({ failure: storage() }), 4, body);
    expect(r.errorCode).toBe(kafkaErrorCode('CONCURRENT_TRANSACTIONS'));
  });

  it('keeps a refusal a refusal', async () => {
    const r = await initTransactional(context({ denied: true, failure: storage() }), 4, body);
    expect(r.errorCode).toBe(kafkaErrorCode('TRANSACTIONAL_ID_AUTHORIZATION_FAILED'));
  });

  it('keeps a bad timeout and a broker shutting down their own answers', async () => {
    const bad = await initTransactional(context({ failure: storage() }), 4, { ...body, transactionTimeoutMs: 0 });
    expect(bad.errorCode).toBe(kafkaErrorCode('INVALID_TRANSACTION_TIMEOUT'));
    const stopping = await initTransactional(context({ failure: new TributaryError('shutting_down') }), 4, body);
    expect(stopping.errorCode).not.toBe(kafkaErrorCode('CONCURRENT_TRANSACTIONS'));
  });
});
