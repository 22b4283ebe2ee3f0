/**
 * ApiVersions: what the listener serves, each API with the range its handler honours. A request of a
 * version this broker does not know gets the KIP-511 downgrade reply from the connection instead. v3+
 * names the client software: a name or version Kafka's ApiVersionsRequest.isValid refuses is
 * INVALID_REQUEST (no API list), as Kafka answers; the connection stays open.
 */
import { apiByKey } from '../protocol/apis.js';
import { kafkaErrorCode } from '../protocol/error-codes.js';
import { ApiVersions } from '../protocol/messages/api-versions.js';
import { type KafkaHandler, handler } from './handler.js';

/** Kafka's SOFTWARE_NAME_VERSION_PATTERN, matched whole. */
const SOFTWARE_NAME_VERSION = /^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$/;

export function apiVersionsHandler(served: () => readonly KafkaHandler[]): KafkaHandler {
  return handler(apiByKey(ApiVersions.apiKey)!, (_ctx, version, body) => {
    if (version >= 3 && !(SOFTWARE_NAME_VERSION.test(body.clientSoftwareName as string) && SOFTWARE_NAME_VERSION.test(body.clientSoftwareVersion as string))) {
      return { errorCode: kafkaErrorCode('INVALID_REQUEST'), apiKeys: [], throttleTimeMs: 0 };
    }
    return {
      errorCode: 0,
      apiKeys: served().map((h) => ({ apiKey: h.api.key, minVersion: h.api.minVersion, maxVersion: h.api.maxVersion })),
      throttleTimeMs: 0,
    };
  });
}
