/**
 * The key of SCRAM's stand-in salts (docs/kafka.md "SCRAM-SHA-256"): an unknown user's salt is an HMAC of
 * its name under this key. The key is random, made once and kept, so it does not change with the users (a
 * digest of the users did: a SIGHUP adding anyone changed every unknown name's salt and none of the real
 * ones, which told them apart). A standalone broker keeps it in its data directory; a cluster's brokers
 * share one in etcd, as a real user's salt is the same on every broker.
 */
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { readSmallFile, writeFileAtomic } from '../storage/atomic-file.js';

/** The file in a standalone broker's data directory. */
export const STAND_IN_KEY_FILE = 'scram-stand-in.key';
/** The etcd key under the cluster's prefix. */
export const STAND_IN_KEY_NAME = 'scram-stand-in-key';

const KEY_BYTES = 32;

/** A new key as it is stored: 32 random bytes, base64. */
export function newStandInKey(): string {
  return randomBytes(KEY_BYTES).toString('base64');
}

/** The stored text → the key; `where` names the file or etcd key in the error. */
export function parseStandInKey(text: string, where: string): Buffer {
  const t = text.trim();
  const key = Buffer.from(t, 'base64');
  if (key.length !== KEY_BYTES || key.toString('base64') !== t) {
    throw new Error(
      `SCRAM stand-in key ${where} is not ${KEY_BYTES} bytes in base64; the broker does not start: restore it, or remove it to have a new one made (the salts unknown users get then change once; docs/kafka.md, "SCRAM-SHA-256")`,
    );
  }
  return key;
}

/**
 * The standalone broker's key: read from `<dataDir>/scram-stand-in.key`, or made and written there (atomically,
 * mode 0600: whoever reads it can tell unknown users' salts from real ones). The data directory lock keeps
 * a second broker from racing for it.
 */
export async function standInKeyFromFile(dataDir: string): Promise<Buffer> {
  const file = path.join(dataDir, STAND_IN_KEY_FILE);
  let text: string;
  try {
    text = await readSmallFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    text = newStandInKey();
    await writeFileAtomic(file, `${text}\n`, { mode: 0o600 });
  }
  return parseStandInKey(text, `file ${file}`);
}

/** A cluster's key: the one the first broker put under `<prefix>scram-stand-in-key`, created if absent. */
export async function standInKeyFromStore(store: { keptValue(name: string, value: string): Promise<string> }, prefix: string): Promise<Buffer> {
  return parseStandInKey(await store.keptValue(STAND_IN_KEY_NAME, newStandInKey()), `at etcd key ${prefix}${STAND_IN_KEY_NAME}`);
}

