/**
 * The high watermark checkpoint of a partition log (docs/architecture.md, "Storage"): one small file, written
 * atomically on the flush timer (unless checkpointHwmOnTimer is false), on flush(), on close and after a
 * truncation, read back on open.
 */
import { join } from 'node:path';
import type { Logger } from 'pino';
import { readSmallFile, writeFileAtomic } from './atomic-file.js';

export const HWM_CHECKPOINT_FILE = 'hwm.checkpoint';

const HWM_RE = /^tributary-hwm 1 (\d+)\n$/;

/** The checkpointed HWM, or 0 when there is none (or it cannot be read). */
export async function readHwmCheckpoint(dir: string, logger: Logger): Promise<number> {
  try {
    const m = HWM_RE.exec(await readSmallFile(join(dir, HWM_CHECKPOINT_FILE), 'utf8'));
    if (m) return Number(m[1]);
    logger.warn('ignoring malformed HWM checkpoint');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') logger.warn({ err }, 'could not read HWM checkpoint');
  }
  return 0;
}

/** Writes the checkpoint of the log's HWM, one write at a time, skipping a value already on disk. */
export class HwmCheckpoint {
  /** The value last written (or read on open). */
  checkpointed = -1;
  private checkpointing: Promise<void> | null = null;

  constructor(private readonly log: { readonly dir: string; readonly hwm: number }) {}

  async write(): Promise<void> {
    while (this.checkpointing) await this.checkpointing;
    const v = this.log.hwm;
    if (v === this.checkpointed) return;
    const p = writeFileAtomic(join(this.log.dir, HWM_CHECKPOINT_FILE), `tributary-hwm 1 ${v}\n`, { syncDir: false }).then(() => {
      this.checkpointed = v;
    });
    this.checkpointing = p.then(
      () => undefined,
      () => undefined,
    );
    try {
      await p;
    } finally {
      this.checkpointing = null;
    }
  }

  /** The write in flight (settled either way), or null. */
  get inFlight(): Promise<void> | null {
    return this.checkpointing;
  }
}
