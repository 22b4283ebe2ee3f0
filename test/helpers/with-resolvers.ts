/**
 * @platformatic/kafka declares Node 22 and calls Promise.withResolvers; on Node 20 it runs once this
 * stand-in exists. Import this module before importing it.
 */
type Resolvers<T> = { promise: Promise<T>; resolve: (v: T | PromiseLike<T>) => void; reject: (e: unknown) => void };
const P = Promise as unknown as { withResolvers?: <T>() => Resolvers<T> };
P.withResolvers ??= <T>(): Resolvers<T> => {
  let resolve!: Resolvers<T>['resolve'];
  let reject!: Resolvers<T>['reject'];
  const promise = new Promise<T>((a, b) => {
    resolve = a;
    reject = b;
  });
  return { promise, resolve, reject };
};

export {};
