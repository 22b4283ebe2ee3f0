/** A one-line progress bar redrawn in place on a TTY stream; a no-op elsewhere so logs and pipes stay clean. */

export interface ProgressStream {
  isTTY?: boolean;
  columns?: number;
  write(chunk: string): boolean;
}

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v.toFixed(1)} ${units[u]}`;
}

export class ProgressBar {
  private readonly enabled: boolean;
  private lastDraw = 0;
  private drawn = false;

  constructor(
    private readonly total: number,
    private readonly stream: ProgressStream = process.stderr,
    /** Minimum time between redraws: redrawing per record would cost more than producing. */
    private readonly intervalMs = 100,
  ) {
    this.enabled = stream.isTTY === true;
  }

  /** `done` bytes of `total`, plus a record count for the label. */
  update(done: number, records: number, force = false): void {
    if (!this.enabled) return;
    const now = Date.now();
    if (!force && now - this.lastDraw < this.intervalMs) return;
    this.lastDraw = now;
    this.stream.write(`\r${this.render(done, records)}\x1b[K`);
    this.drawn = true;
  }

  render(done: number, records: number): string {
    const frac = this.total > 0 ? Math.min(1, done / this.total) : 1;
    const pct = `${Math.floor(frac * 100)}`.padStart(3);
    const label = ` ${pct}% ${formatBytes(done)}/${formatBytes(this.total)} ${records} records`;
    const width = Math.max(10, Math.min(40, (this.stream.columns || 80) - label.length - 3));
    const filled = Math.round(frac * width);
    return `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}]${label}`;
  }

  /** Erase the bar so the summary line that follows starts on a clean line. */
  finish(): void {
    if (!this.enabled || !this.drawn) return;
    this.stream.write('\r\x1b[K');
    this.drawn = false;
  }
}
