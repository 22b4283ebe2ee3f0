/** Tributary's wire protocol: framing, commands, batches, errors, assignors and the connection transport (docs/protocol.md). */
export * from './address.js';
export * from './assignors.js';
export * from './batch.js';
export * from './command.js';
export * from './connect-errors.js';
export * from './connection.js';
export * from './errors.js';
export * from './features.js';
export * from './frame.js';
export * from './names.js';
export * from './partitioner.js';
export * from './record.js';
