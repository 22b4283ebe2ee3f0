// Preloaded into a broker (NODE_OPTIONS="--require <this file>"): on SIGUSR2, `busy` on stdout, then 2 s of
// synchronous work on the event loop (a 50 MiB append of 1.7M small records took over a second on a loaded
// machine), then `idle`. For tests of what a broker does after seconds of its own work.
const fs = require('node:fs');
process.on('SIGUSR2', () => {
  fs.writeSync(1, 'busy\n');
  const end = performance.now() + 2000;
  let spins = 0;
  while (performance.now() < end) spins++;
  fs.writeSync(1, `idle ${spins > 0}\n`);
});
