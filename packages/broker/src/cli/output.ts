/** Output helpers of the CLI: tables for people, `--format json` for scripts, the same on every command. */
import { Option } from 'commander';

/** Left-aligned columns, two spaces apart. */
export function table(header: string[], rows: string[][]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)];
}

/** `--format table|json` (default table). */
export function formatOption(): Option {
  return new Option('--format <format>', 'table for people, json for scripts').choices(['table', 'json']).default('table');
}
