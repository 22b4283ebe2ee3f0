/**
 * Every append-like operation of a partition (appends, markers, replica appends) runs through track():
 * after a truncation in progress, and counted so a truncation can wait for those already begun. The
 * transaction index and the producer state are derived from the log; rebuilding them while an append
 * lands would leave the append out of both (a read_committed reader would then see an aborted record).
 */
export class AppendTracker {
  /** A truncation and index rebuild in progress: appends wait for it. */
  private rebuild: Promise<void> | null = null;
  /** Append-like operations begun and not settled. */
  private active = 0;
  private onDrained: Array<() => void> | null = null;
  /** settled() bound once, on the first append: a partition never written keeps no closure for it. */
  private settle: (() => void) | null = null;

  track<T>(start: () => Promise<T>): Promise<T> {
    if (this.rebuild) return this.rebuild.then(() => this.track(start));
    this.active++;
    let p: Promise<T>;
    try {
      p = start();
    } catch (err) {
      // Counted as settled like any failed append: a truncation waiting for drained() must not hang on it.
      p = Promise.reject(err);
    }
    const settle = (this.settle ??= () => this.settled());
    p.then(settle, settle);
    return p;
  }

  /** Runs `run` with no append begun meanwhile (those begun before may still land: see drained()). One at a time. */
  exclusive<T>(run: () => Promise<T>): Promise<T> {
    if (this.rebuild) return this.rebuild.then(() => this.exclusive(run));
    let release!: () => void;
    this.rebuild = new Promise<void>((r) => {
      release = r;
    });
    return run().finally(() => {
      this.rebuild = null;
      release();
    });
  }

  private settled(): void {
    if (--this.active === 0 && this.onDrained !== null) {
      const wake = this.onDrained;
      this.onDrained = null;
      for (const w of wake) w();
    }
  }

  /** Resolves once every operation begun so far has settled. */
  drained(): Promise<void> {
    if (this.active === 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      (this.onDrained ??= []).push(resolve);
    });
  }

  /** No append-like operation in flight and no truncation running. */
  get idle(): boolean {
    return this.active === 0 && this.rebuild === null;
  }

  /** Resolves once idle. */
  async quiesced(): Promise<void> {
    while (!this.idle) {
      if (this.rebuild) await this.rebuild;
      else await this.drained();
    }
  }
}
