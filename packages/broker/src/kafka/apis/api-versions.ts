/**
 * ApiVersions: what the listener serves, each API with the range its handler honours. A request of a
 * version this broker does not know gets the KIP-511 downgrade reply from the connection instead.
 */
import { apiByKey } from '../protocol/apis.js';
import { ApiVersions } from '../protocol/messages/api-versions.js';
import { type KafkaHandler, handler } from './handler.js';

export function apiVersionsHandler(served: () => readonly KafkaHandler[]): KafkaHandler {
  return handler(apiByKey(ApiVersions.apiKey)!, () => ({
    errorCode: 0,
    apiKeys: served().map((h) => ({ apiKey: h.api.key, minVersion: h.api.minVersion, maxVersion: h.api.maxVersion })),
    throttleTimeMs: 0,
  }));
}
