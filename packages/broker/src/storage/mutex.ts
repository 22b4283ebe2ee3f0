import { SETTLED } from '../common/settled.js';

/** Promise-chain mutex: runs callbacks one at a time in call order. */
export class Mutex {
  private tail: Promise<unknown> = SETTLED;
  run<T>(fn: () => T | PromiseLike<T>): Promise<T> {
    const r = this.tail.then(fn);
    this.tail = r.then(
      () => undefined,
      () => undefined,
    );
    return r;
  }
}
