// Preloaded into a broker (NODE_OPTIONS="--expose-gc --require <this file>"): on SIGUSR2, two full
// collections, then `heap-used <bytes> <n>` on stdout, n counting the probes, for tests of retained heap.
let n = 0;
process.on('SIGUSR2', () => {
  globalThis.gc();
  globalThis.gc();
  process.stdout.write(`heap-used ${process.memoryUsage().heapUsed} ${++n}\n`);
});
