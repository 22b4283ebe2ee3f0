/**
 * The etcd and PostgreSQL client libraries, loaded on first use. A standalone broker keeping offsets in its
 * log needs neither, and imported at start they held a quarter of its idle heap (24.0 MB after a full
 * collection, 17.8 without them), which every full collection marks again: at 1 KiB records a broker runs
 * about three a second (bench/README.md, "produce-consume"). `require` keeps the loading synchronous, as
 * the constructors that need them are; both load as CommonJS (pg's ESM entry re-exports it), so this is the
 * module an `import` gives.
 */
import { createRequire } from 'node:module';

type Etcd3Module = typeof import('etcd3');
type PgModule = typeof import('pg');

const require = createRequire(import.meta.url);
let etcd: Etcd3Module | undefined;
let pg: PgModule | undefined;

export function etcd3Lib(): Etcd3Module {
  etcd ??= require('etcd3') as Etcd3Module;
  return etcd;
}

export function pgLib(): PgModule {
  pg ??= require('pg') as PgModule;
  return pg;
}
