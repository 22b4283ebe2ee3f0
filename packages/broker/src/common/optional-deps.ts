/**
 * The etcd and PostgreSQL client libraries, loaded on first use. A standalone broker keeping offsets in its
 * log needs neither, and imported at start they held a third of its idle heap (about 9 of 24 MB), which every
 * full garbage collection marks again: at 1 KiB records V8 starts one for each 64 MiB of record buffers the
 * broker lets go (bench/README.md, "produce-consume"). `require` keeps the loading synchronous, as the
 * constructors that need them are; both are CommonJS, so this is the module an `import` would give.
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
