/**
 * The message browser's CSV export, without the DOM (test/unit/console/csv.test.ts runs it under Node).
 * One row per message, RFC 4180 quoting, rows ending in \n; every key and value says its encoding.
 */

/**
 * What the export reads of a message: api.ts's Message, restated so that this module compiles without the
 * DOM types api.ts needs (the unit test compiles it for Node).
 */
export interface CsvMessage {
  partition: number;
  offset: number;
  timestamp: number;
  key: string | null;
  keyEncoding: 'utf8' | 'base64';
  value: string;
  valueEncoding: 'utf8' | 'base64';
  headers: ReadonlyArray<{ key: string; value: string; encoding: 'utf8' | 'base64' }>;
}

export const CSV_COLUMNS = ['partition', 'offset', 'timestamp', 'key', 'keyEncoding', 'value', 'valueEncoding', 'headers'] as const;

/**
 * A cell a spreadsheet could take for a formula (it starts with = + - @, a tab or a carriage return, as
 * OWASP's CSV injection page lists, or a NUL, as ASVS 5.0 1.2.10 adds) is written with a ' before it,
 * and so is one that starts with ', so that a cell starting with ' always has exactly one added: remove
 * it to get the value back. A cell holding a quote, comma or line end is then quoted, its quotes doubled.
 */
export function csvCell(v: string): string {
  const cell = /^[=+\-@\t\r\0']/.test(v) ? `'${v}` : v;
  return /[",\n\r]/.test(cell) ? `"${cell.replaceAll('"', '""')}"` : cell;
}

/**
 * A record timestamp as ISO 8601, or null for none: a negative one (a Kafka producer's -1, "no timestamp",
 * kept as given: docs/kafka.md) or one beyond what a Date holds (+-8.64e15 ms), which toISOString throws on.
 */
export function isoTimestamp(ms: number): string | null {
  const d = new Date(ms);
  return ms < 0 || Number.isNaN(d.getTime()) ? null : d.toISOString();
}

/**
 * Messages as CSV (a timestamp cell is empty for a record without one): keyEncoding and valueEncoding say utf8 or base64 (bytes that are not UTF-8 come
 * base64-encoded; a null key has both cells empty, an empty key is utf8), headers are a JSON array of
 * { key, value, encoding }.
 */
export function toCsv(messages: readonly CsvMessage[]): string {
  const rows = [CSV_COLUMNS.join(',')];
  for (const m of messages) {
    const headers = JSON.stringify(m.headers.map((h) => ({ key: h.key, value: h.value, encoding: h.encoding })));
    const key = m.key === null ? ['', ''] : [m.key, m.keyEncoding];
    rows.push([String(m.partition), String(m.offset), isoTimestamp(m.timestamp) ?? '', ...key, m.value, m.valueEncoding, headers].map(csvCell).join(','));
  }
  return `${rows.join('\n')}\n`;
}
