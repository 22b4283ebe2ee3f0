/**
 * One runner at a time per key, in call order; different keys run concurrently. Coordinators hold it
 * for a group or transactional id while they check and change its state, so checks and writes never
 * interleave with another request's.
 */
export class KeyedLock {
  private readonly tails = new Map<string, Promise<void>>();

  async run<T>(key: string, fn: () => Promise<T> | T): Promise<T> {
    const prev = this.tails.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((r) => {
      release = r;
    });
    const tail = prev.then(() => mine);
    this.tails.set(key, tail);
    await prev;
    try {
      return await fn();
    } finally {
      release();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }

  /** Resolves when every runner queued so far has finished. */
  async idle(): Promise<void> {
    await Promise.all([...this.tails.values()]).catch(() => {});
  }
}
