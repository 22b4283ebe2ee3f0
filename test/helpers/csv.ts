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
