/**
 * InitProducerId. Without a transactional id (idempotent producers): a producer id from the same
 * allocator as Tributary's own (docs/architecture.md, "Producer ids") at epoch 0; a producer that asks
 * again with its id and epoch (v3+, KIP-360) gets a new id: its sequences start over either way (half a
 * pair, -1 on one side only, is INVALID_REQUEST). With a
 * transactional id: the transaction coordinator's INIT_PRODUCER_ID (apis/transactions.ts,
 * docs/kafka.md "Transactions"), standalone only.
 */
import { apiByKey } from '../protocol/apis.js';
import { kafkaErrorCode } from '../protocol/error-codes.js';
import { InitProducerId } from '../protocol/messages/transactions.js';
import { errorCodeOf, handler, refusal } from './handler.js';
import { initTransactional } from './transactions.js';

export const initProducerIdHandler = handler(apiByKey(InitProducerId.apiKey)!, async (ctx, version, body) => {
  if (body.transactionalId !== null && body.transactionalId !== undefined) return initTransactional(ctx, version, body);
  try {
    // As the main port's INIT_PRODUCER_ID without a transactional id: whoever may write topics.
    const denied = ctx.authorize('INIT_PRODUCER_ID');
    if (denied) throw refusal(denied, 'cluster');
    // v3+: a producer id without an epoch, or the other way round, is INVALID_REQUEST, as Kafka's KafkaApis answers.
    if (version >= 3 && ((body.producerId as bigint) === -1n) !== ((body.producerEpoch as number) === -1)) {
      return { throttleTimeMs: 0, errorCode: kafkaErrorCode('INVALID_REQUEST'), producerId: -1n, producerEpoch: -1 };
    }
    const id = await ctx.broker.producerIds.allocate();
    return { throttleTimeMs: 0, errorCode: 0, producerId: BigInt(id), producerEpoch: 0 };
  } catch (err) {
    return { throttleTimeMs: 0, errorCode: errorCodeOf(err), producerId: -1n, producerEpoch: -1 };
  }
});
