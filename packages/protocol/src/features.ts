/** Protocol features a connection can negotiate (NEGOTIATE features=...). */
export const PROTOCOL_VERSION = 1;

export const FEATURES = [
  'structured_errors_v1',
  'stream_control_v1',
  'offset_resume_v1',
  // Timestamps, attributes and headers per record in batch frames, plus a trailer on CONSUME replies.
  'record_extensions_v1',
] as const;

export type Feature = (typeof FEATURES)[number];
