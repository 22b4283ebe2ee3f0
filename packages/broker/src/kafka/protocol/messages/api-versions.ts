import { api, arr, f } from '../schema.js';

/**
 * ApiVersions (key 18). v3 is flexible (client software name/version, tagged feature lists). Its response
 * always goes out with response header v0, even in v3: a client that sent a version the broker does not
 * know must still be able to read the reply (see headers.ts).
 */
export const ApiVersions = api(
  18,
  'ApiVersions',
  '0-3',
  '3+',
  [f('clientSoftwareName', 'string', '3+'), f('clientSoftwareVersion', 'string', '3+')],
  [
    f('errorCode', 'int16'),
    arr('apiKeys', [f('apiKey', 'int16'), f('minVersion', 'int16'), f('maxVersion', 'int16')]),
    f('throttleTimeMs', 'int32', '1+'),
    arr('supportedFeatures', [f('name', 'string', '3+'), f('minVersion', 'int16', '3+'), f('maxVersion', 'int16', '3+')], '3+', { tag: 0 }),
    f('finalizedFeaturesEpoch', 'int64', '3+', { tag: 1, default: -1 }),
    arr('finalizedFeatures', [f('name', 'string', '3+'), f('maxVersionLevel', 'int16', '3+'), f('minVersionLevel', 'int16', '3+')], '3+', { tag: 2 }),
    f('zkMigrationReady', 'bool', '3+', { tag: 3 }),
  ],
);
