/**
 * Crash points for fault tests: `TRIBUTARY_FAILPOINTS=txn.after_decision,...` makes the broker kill itself
 * with SIGKILL when it reaches a named point, so a test can crash it exactly between two durable steps.
 * Unset (always, outside tests), failpoint() is a set lookup that does nothing.
 */
const armed = new Set(
  (process.env.TRIBUTARY_FAILPOINTS ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean),
);

export function failpoint(name: string): void {
  if (armed.size > 0 && armed.has(name)) process.kill(process.pid, 'SIGKILL');
}
