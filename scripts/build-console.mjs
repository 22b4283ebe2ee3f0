// Bundles the web console (packages/broker/console) into packages/broker/dist/console, served at /ui/.
import { copyFileSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { build } from 'esbuild';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const src = path.join(root, 'packages', 'broker', 'console');
const out = path.join(root, 'packages', 'broker', 'dist', 'console');
mkdirSync(out, { recursive: true });
await build({
  entryPoints: [path.join(src, 'src', 'main.ts')],
  bundle: true,
  format: 'esm',
  target: 'es2022',
  minify: true,
  sourcemap: false,
  outfile: path.join(out, 'app.js'),
  logLevel: 'warning',
});
copyFileSync(path.join(src, 'index.html'), path.join(out, 'index.html'));
copyFileSync(path.join(src, 'styles.css'), path.join(out, 'styles.css'));
copyFileSync(path.join(root, 'node_modules', 'uplot', 'dist', 'uPlot.min.css'), path.join(out, 'uPlot.min.css'));
