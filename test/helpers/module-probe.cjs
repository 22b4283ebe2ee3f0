// Preloaded into a broker (NODE_OPTIONS="--require <this file>"): on SIGUSR2, `packages <json>` on stdout,
// the npm packages of the CommonJS modules the process has loaded so far (an ESM import of a CommonJS
// package loads it through the same cache), for tests of what a broker loads.
const path = require('node:path');
process.on('SIGUSR2', () => {
  const names = new Set();
  for (const file of Object.keys(require.cache)) {
    const parts = file.split(path.sep);
    const at = parts.lastIndexOf('node_modules');
    if (at < 0) continue;
    const first = parts[at + 1];
    names.add(first.startsWith('@') ? `${first}/${parts[at + 2]}` : first);
  }
  process.stdout.write(`packages ${JSON.stringify([...names].sort())}\n`);
});
