/**
 * Topic names as the broker takes them (docs/protocol.md, CREATE): 1-238 of letters, digits, `.`, `_`, `-`.
 * At most 238 because a topic's directory is `<name>~<16 hex of its id>` and a file name has 255 bytes.
 * One definition for the broker's check and the SDK's (retry topic names), so they cannot drift apart.
 */
export const MAX_TOPIC_NAME_LENGTH = 238;
export const TOPIC_NAME_RE = new RegExp(`^[A-Za-z0-9._-]{1,${MAX_TOPIC_NAME_LENGTH}}$`);
