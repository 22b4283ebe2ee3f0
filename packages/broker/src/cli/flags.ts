/**
 * Launchers (dev-cluster, test and benchmark helpers) build `broker start` command lines from defaults and
 * the caller's flags. The CLI refuses an option given twice (program.ts), so a flag the caller gives
 * replaces the default one instead of following it.
 */
export function withOverrides(defaults: readonly string[], extra: readonly string[]): string[] {
  const given = new Set(extra.filter((a) => a.startsWith('--')).map((a) => a.split('=')[0]!));
  const out: string[] = [];
  for (let i = 0; i < defaults.length; i++) {
    const a = defaults[i]!;
    // A flag's value is the next element unless that is a flag itself (every default value is: none starts with --).
    const takesValue = a.startsWith('--') && !a.includes('=') && i + 1 < defaults.length && !defaults[i + 1]!.startsWith('--');
    if (a.startsWith('--') && given.has(a.split('=')[0]!)) {
      if (takesValue) i++;
      continue;
    }
    out.push(a);
    if (takesValue) out.push(defaults[++i]!);
  }
  return [...out, ...extra];
}
