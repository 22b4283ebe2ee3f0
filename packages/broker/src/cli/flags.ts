/**
 * Launchers (dev-cluster, test and benchmark helpers) build `broker start` command lines from defaults and
 * the caller's flags. The CLI refuses an option given twice (program.ts), so a flag the caller gives
 * replaces the default one instead of following it, and of a flag the caller gives twice the last stands.
 */
export function withOverrides(defaults: readonly string[], extra: readonly string[]): string[] {
  return [...without(defaults, flagsOf(extra)), ...lastOnly(extra)];
}

/** `--flag value` or `--flag` (a flag's value is the next element unless that is a flag itself). */
function split(args: readonly string[]): string[][] {
  const out: string[][] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    const takesValue = a.startsWith('--') && !a.includes('=') && i + 1 < args.length && !args[i + 1]!.startsWith('--');
    out.push(takesValue ? [a, args[++i]!] : [a]);
  }
  return out;
}

const nameOf = (a: string) => a.split('=')[0]!;

function flagsOf(args: readonly string[]): Set<string> {
  return new Set(args.filter((a) => a.startsWith('--')).map(nameOf));
}

function without(args: readonly string[], names: Set<string>): string[] {
  return split(args)
    .filter((g) => !(g[0]!.startsWith('--') && names.has(nameOf(g[0]!))))
    .flat();
}

function lastOnly(args: readonly string[]): string[] {
  const groups = split(args);
  return groups.filter((g, i) => !g[0]!.startsWith('--') || !groups.slice(i + 1).some((h) => nameOf(h[0]!) === nameOf(g[0]!))).flat();
}
