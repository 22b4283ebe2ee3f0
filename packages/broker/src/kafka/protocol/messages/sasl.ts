import { api, arr, f } from '../schema.js';

/**
 * SaslHandshake (key 17): the client names the mechanism it wants; the broker answers with the mechanisms
 * it has enabled. v0 is followed by raw SASL tokens (no Kafka framing), v1 by SaslAuthenticate requests.
 * Never flexible.
 */
export const SaslHandshake = api(17, 'SaslHandshake', '0-1', 'none', [f('mechanism', 'string')], [f('errorCode', 'int16'), arr('mechanisms', 'string')]);

/**
 * SaslAuthenticate (key 36): one SASL token each way. v1 adds the session lifetime (0: the session does not
 * expire, no re-authentication), v2 is flexible.
 */
export const SaslAuthenticate = api(
  36,
  'SaslAuthenticate',
  '0-2',
  '2+',
  [f('authBytes', 'bytes')],
  [f('errorCode', 'int16'), f('errorMessage', 'string', '0+', { nullable: '0+', default: null }), f('authBytes', 'bytes'), f('sessionLifetimeMs', 'int64', '1+')],
);
