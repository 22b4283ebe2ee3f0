/**
 * Units in the log files of `dir`: [per-record layout records, append blocks], told apart by bit 31 of each
 * unit's length (docs/architecture.md "Stored batches").
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';

export async function countUnits(dir: string): Promise<[number, number]> {
  let recs = 0;
  let blocks = 0;
  for (const f of (await readdir(dir)).filter((n) => n.endsWith('.log'))) {
    const b = await readFile(join(dir, f));
    for (let p = 0; p < b.length; ) {
      const w = b.readUInt32BE(p);
      if (w >= 0x80000000) {
        blocks++;
        p += 4 + (w - 0x80000000);
      } else {
        recs++;
        p += 4 + w;
      }
    }
  }
  return [recs, blocks];
}
