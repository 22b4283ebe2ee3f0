/** The file names of a segment: `<baseOffset padded to 20 digits>.log` and `.index`. */
export const LOG_SUFFIX = '.log';
export const INDEX_SUFFIX = '.index';
const NAME_RE = /^(\d{20})\.(log|index)$/;

export function segmentFileName(baseOffset: number, suffix: string = LOG_SUFFIX): string {
  return String(baseOffset).padStart(20, '0') + suffix;
}

/** Base offset and kind of a segment file name, or null for any other file. */
export function parseSegmentFileName(name: string): { baseOffset: number; kind: 'log' | 'index' } | null {
  const m = NAME_RE.exec(name);
  if (!m) return null;
  const baseOffset = Number(m[1]);
  if (!Number.isSafeInteger(baseOffset)) return null;
  return { baseOffset, kind: m[2] as 'log' | 'index' };
}
