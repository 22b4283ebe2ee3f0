import { expect } from 'vitest';
/** CSV as RFC 4180 reads it: quoted cells may hold commas, quotes ("") and line ends; rows end with \n. */
export function parseCsv(csv: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < csv.length; i++) {
    const c = csv[i];
    if (quoted && c === '"' && csv[i + 1] === '"') {
      cell += '"';
      i++;
    } else if (c === '"') quoted = !quoted;
    else if (quoted || (c !== ',' && c !== '\n')) cell += c;
    else {
      row.push(cell);
      cell = '';
      if (c === '\n') {
        rows.push(row);
        row = [];
      }
    }
  }
  if (quoted || cell !== '' || row.length > 0) throw new Error('the CSV does not end with a whole row');
  return rows;
}

/** A message as the console's CSV export writes it (its api.ts Message, the fields the export has). */
export interface ExportedMessage {
  partition: number;
  offset: number;
  timestamp: number;
  key: string | null;
  keyEncoding: string;
  value: string;
  valueEncoding: string;
  headers: ReadonlyArray<{ key: string; value: string; encoding: string }>;
}

/**
 * The export's data rows (header row excluded) give `messages` back once the one ' the formula guard puts
 * before a cell is removed; a null key has empty key and encoding cells.
 */
export function expectRowsGiveBack(rows: string[][], messages: readonly ExportedMessage[]): void {
  const unguard = (cell: string) => (cell.startsWith("'") ? cell.slice(1) : cell);
  expect(rows.length).toBe(messages.length);
  for (const [i, m] of messages.entries()) {
    const [partition, offset, timestamp, key, keyEncoding, value, valueEncoding, headers] = rows[i]!.map(unguard);
    expect({ partition: Number(partition), offset: Number(offset), timestamp: Date.parse(timestamp!), value, valueEncoding, headers: JSON.parse(headers!) }).toEqual({
      partition: m.partition,
      offset: m.offset,
      timestamp: m.timestamp,
      value: m.value,
      valueEncoding: m.valueEncoding,
      headers: m.headers,
    });
    expect([key, keyEncoding]).toEqual(m.key === null ? ['', ''] : [m.key, m.keyEncoding]);
  }
}
