import { existsSync } from 'node:fs';

/**
 * Fault points for fault tests, armed by `TRIBUTARY_FAILPOINTS=name,...`:
 * - a crash point (`txn.after_decision`) makes the broker kill itself with SIGKILL when it reaches it, so a
 *   test can crash it exactly between two durable steps;
 * - a delay point armed as `name@ms` (`replica.append:orders@3000`) makes failpointDelay(name) wait that
 *   long, as a slow disk would, so a test can act while the step is in flight. It says so on stderr;
 * - a refusal point armed as `name!n` (`isr.expand:orders!1`) makes failpointRefuse(name) true its first n
 *   times, as a lost compare-and-set would be, so a test can check what retries it. It says so on stderr;
 * - a refusal point armed as `name?path` (`partition.marker:orders?/tmp/full`) makes failpointRefuse(name)
 *   true while that file exists, as a full disk until it is freed, so a test chooses when the fault ends;
 *   `disk.full?path` makes every segment write fail with ENOSPC while the file exists (storage/segment.ts),
 *   `journal.full?path` every journal write, after a short write of half of it (storage/journal-files.ts);
 * - a delay point may also set a timer that is not a sleep (`replica.park_fallback@600000` raises the
 *   parked-fetch fallback), so a test can show that something happened without that timer: failpointMs.
 * Unset (always, outside tests), both are a map lookup that does nothing.
 */
const crashes = new Set<string>();
const delays = new Map<string, number>();
const refusals = new Map<string, number>();
const refusedWhile = new Map<string, string>();
for (const entry of (process.env.TRIBUTARY_FAILPOINTS ?? '').split(',')) {
  const s = entry.trim();
  if (!s) continue;
  const q = s.indexOf('?');
  if (q > 0) {
    refusedWhile.set(s.slice(0, q), s.slice(q + 1));
    continue;
  }
  const bang = s.lastIndexOf('!');
  const n = bang > 0 ? Number(s.slice(bang + 1)) : NaN;
  if (Number.isSafeInteger(n) && n > 0) {
    refusals.set(s.slice(0, bang), n);
    continue;
  }
  const at = s.lastIndexOf('@');
  const ms = at > 0 ? Number(s.slice(at + 1)) : NaN;
  if (Number.isSafeInteger(ms) && ms >= 0) delays.set(s.slice(0, at), ms);
  else crashes.add(s);
}

export function failpoint(name: string): void {
  if (crashes.size > 0 && crashes.has(name)) process.kill(process.pid, 'SIGKILL');
}

export function failpointDelay(name: string): Promise<void> | undefined {
  const ms = delays.size > 0 ? delays.get(name) : undefined;
  if (ms === undefined) return undefined;
  process.stderr.write(`failpoint ${name}: delaying ${ms} ms\n`);
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The ms delay point `name` is armed with, without waiting (undefined when unarmed). It says so on stderr. */
export function failpointMs(name: string): number | undefined {
  const ms = delays.size > 0 ? delays.get(name) : undefined;
  if (ms !== undefined) process.stderr.write(`failpoint ${name}: ${ms} ms\n`);
  return ms;
}

export function failpointRefuse(name: string): boolean {
  const file = refusedWhile.size > 0 ? refusedWhile.get(name) : undefined;
  if (file !== undefined && existsSync(file)) {
    process.stderr.write(`failpoint ${name}: refusing while ${file} exists\n`);
    return true;
  }
  const left = refusals.size > 0 ? refusals.get(name) : undefined;
  if (!left) return false;
  refusals.set(name, left - 1);
  process.stderr.write(`failpoint ${name}: refusing (${left - 1} more)\n`);
  return true;
}
