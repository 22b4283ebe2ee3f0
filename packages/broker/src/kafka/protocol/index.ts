/** Kafka wire-protocol codecs: schemas as data, one generic codec, headers, the API and error tables. */
export * from './apis.js';
export * from './codec.js';
export * from './consumer-protocol.js';
export * from './error-codes.js';
export * from './errors.js';
export * from './frame.js';
export * from './headers.js';
export * from './reader.js';
export * from './schema.js';
export * from './writer.js';
