/** Pauses a loop until woken (or aborted); wakes that arrive early are not lost. */
export class Signal {
  private waiter: (() => void) | undefined;
  private pending = false;

  wake(): void {
    this.pending = true;
    this.waiter?.();
  }

  wait(abort: AbortSignal, timeoutMs?: number): Promise<void> {
    if (this.pending || abort.aborted) {
      this.pending = false;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        abort.removeEventListener('abort', done);
        this.waiter = undefined;
        this.pending = false;
        resolve();
      };
      const timer = timeoutMs === undefined ? undefined : setTimeout(done, timeoutMs);
      abort.addEventListener('abort', done, { once: true });
      this.waiter = done;
    });
  }
}
