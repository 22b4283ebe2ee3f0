/**
 * The import layering of docs/architecture.md ("Packages and layers"), checked on the sources: packages
 * import one way (protocol ← client, protocol ← broker), and inside the broker each folder imports only
 * folders below it, so there is no cycle between folders. And no source file grows past 600 lines.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/launcher.js';

const PACKAGES = path.join(ROOT, 'packages');

/** The broker's folders, lowest first: a folder may import only folders before it in this list. */
const BROKER_LAYERS = ['common', 'storage', 'partition', 'coordinator', 'txn', 'cluster', 'kafka', 'http', 'broker', 'cli'];
/** What each package may import. */
const PACKAGE_DEPS: Record<string, string[]> = {
  protocol: [],
  client: ['protocol'],
  broker: ['protocol', 'client'],
};

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = path.join(dir, name);
    if (statSync(p).isDirectory()) out.push(...sources(p));
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

/** Module specifiers of a file's static and dynamic imports and re-exports. */
function specifiers(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const out: string[] = [];
  for (const m of text.matchAll(/(?:^|\n)\s*(?:import|export)\b[^'"]*?from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)|(?:^|\n)\s*import\s+['"]([^'"]+)['"]/g)) {
    out.push((m[1] ?? m[2] ?? m[3])!);
  }
  return out;
}

interface Edge {
  from: string;
  to: string;
  file: string;
}

function packageEdges(): Edge[] {
  const edges: Edge[] = [];
  for (const pkg of Object.keys(PACKAGE_DEPS)) {
    for (const file of sources(path.join(PACKAGES, pkg, 'src'))) {
      for (const spec of specifiers(file)) {
        const m = /^tributary-(protocol|client|broker)(?:\/|$)/.exec(spec);
        if (m && m[1] !== pkg) edges.push({ from: pkg, to: m[1]!, file: path.relative(ROOT, file) });
      }
    }
  }
  return edges;
}

function brokerFolderEdges(): Edge[] {
  const src = path.join(PACKAGES, 'broker', 'src');
  const edges: Edge[] = [];
  for (const file of sources(src)) {
    const from = path.relative(src, file).split(path.sep)[0]!;
    for (const spec of specifiers(file)) {
      if (!spec.startsWith('.')) continue;
      const to = path.relative(src, path.resolve(path.dirname(file), spec)).split(path.sep)[0]!;
      if (to !== from) edges.push({ from, to, file: path.relative(ROOT, file) });
    }
  }
  return edges;
}

describe('import layering', () => {
  it('packages import one way: the client and the protocol never import the broker', () => {
    const bad = packageEdges().filter((e) => !PACKAGE_DEPS[e.from]!.includes(e.to));
    expect(bad).toEqual([]);
  });

  it('every broker folder is a known layer, and imports only the layers below it', () => {
    const folders = new Set(readdirSync(path.join(PACKAGES, 'broker', 'src')).filter((n) => statSync(path.join(PACKAGES, 'broker', 'src', n)).isDirectory()));
    expect([...folders].filter((f) => !BROKER_LAYERS.includes(f))).toEqual([]);
    const edges = brokerFolderEdges();
    expect(edges.length).toBeGreaterThan(0); // the parser finds the imports
    const upward = edges.filter((e) => BROKER_LAYERS.indexOf(e.to) >= BROKER_LAYERS.indexOf(e.from)).map((e) => `${e.file}: ${e.from} -> ${e.to}`);
    expect(upward).toEqual([]);
  });

  it('no source file is over 600 lines', () => {
    const long = Object.keys(PACKAGE_DEPS)
      .flatMap((pkg) => sources(path.join(PACKAGES, pkg, 'src')))
      .map((f) => ({ file: path.relative(ROOT, f), lines: readFileSync(f, 'utf8').split('\n').length }))
      .filter((x) => x.lines > 600);
    expect(long).toEqual([]);
  });
});
