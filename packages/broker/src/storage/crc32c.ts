// CRC-32C moved down to the protocol package (RecordBatch v2 needs it on the client side too); the
// storage layer keeps importing it from here.
export { type Crc32cFn, crc32c, crc32cImpl, crc32cNative, crc32cPure, crc32cRange } from 'tributary-protocol/record-batch/crc32c.js';
