// Preloaded into a broker process (NODE_OPTIONS=--require) by tests of wall-clock steps: Date.now() (and
// so `new Date()`) returns real time plus the offset in ms written to $WALL_CLOCK_SHIFT_FILE, re-read every
// 20 ms. Timers and performance.now() are left alone, as an NTP step of the system clock leaves them.
const fs = require('node:fs');
const file = process.env.WALL_CLOCK_SHIFT_FILE;
const realNow = Date.now.bind(Date);
let offset = 0;
const read = () => {
  try {
    offset = Number(fs.readFileSync(file, 'utf8').trim()) || 0;
  } catch {
    offset = 0;
  }
};
read();
setInterval(read, 20).unref();
Date.now = () => realNow() + offset;
