/**
 * SCRAM's stand-in salt for an unknown user (docs/kafka.md "SCRAM-SHA-256"): keyed by a key kept apart
 * from the users, so adding or removing a user (SIGHUP) changes no unknown name's salt, as it changes no
 * real user's; and the key file a standalone broker keeps.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { STAND_IN_KEY_FILE, standInKeyFromFile } from 'tributary-broker/broker/scram-stand-in.js';
import { Security, type UserEntry, hashToken, scramEntry } from 'tributary-broker/broker/security.js';
import { resolveConfig } from 'tributary-broker/common/config.js';
import { createLogger } from 'tributary-broker/common/logger.js';
import { removeDir, tempDir } from '../../helpers/util.js';

const entry = (token: string): UserEntry => ({ ...hashToken(token), permissions: ['topic.read'], scram: scramEntry(token) });

describe("SCRAM's stand-in salt", () => {
  it('of an unknown name does not change when users are added, removed or given a new token', () => {
    const users = { app: entry('app-token-0123456789') };
    const sec = new Security(resolveConfig({ authentication: true, users }), createLogger('silent'));
    const salt = (name: string) => sec.scramKeys(name).keys.salt.toString('base64');
    const before = { ghost: salt('ghost'), app: salt('app') };
    expect(sec.scramKeys('ghost').known).toBe(false);
    sec.reload({ ...users, bob: entry('bob-token-0123456789') }, {}, {});
    expect({ ghost: salt('ghost'), app: salt('app') }).toEqual(before);
    sec.reload({ app: users.app }, {}, {});
    expect({ ghost: salt('ghost'), app: salt('app') }).toEqual(before);
    sec.reload({ app: entry('new-app-token-0123456789') }, {}, {});
    expect(salt('ghost')).toBe(before.ghost);
  });

  it('depends on the kept key only: two brokers with the same key give the same salt, another key another', () => {
    const make = (users: Record<string, UserEntry>, key: Buffer) => {
      const sec = new Security(resolveConfig({ authentication: true, users }), createLogger('silent'));
      sec.useScramStandInKey(key);
      return sec.scramKeys('ghost').keys.salt.toString('base64');
    };
    const key = Buffer.alloc(32, 7);
    expect(make({}, key)).toBe(make({ app: entry('app-token-0123456789') }, key));
    expect(make({}, key)).not.toBe(make({}, Buffer.alloc(32, 8)));
  });
});

describe('the stand-in key file', () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir) await removeDir(dir);
    dir = undefined;
  });

  it('is made once, mode 0600 whatever the umask, and read back the same', async () => {
    dir = await tempDir('tributary-standin-');
    const old = process.umask(0o022);
    let key: Buffer;
    try {
      key = await standInKeyFromFile(dir);
    } finally {
      process.umask(old);
    }
    expect(key).toHaveLength(32);
    const file = path.join(dir, STAND_IN_KEY_FILE);
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    expect(await standInKeyFromFile(dir)).toEqual(key);
  });

  it('with bad content stops the start with an error naming the file, and is left as it was', async () => {
    dir = await tempDir('tributary-standin-');
    const file = path.join(dir, STAND_IN_KEY_FILE);
    for (const bad of ['', 'not base64!', `${Buffer.alloc(16).toString('base64')}\n`]) {
      fs.writeFileSync(file, bad);
      await expect(standInKeyFromFile(dir)).rejects.toThrow(`SCRAM stand-in key file ${file} is not 32 bytes in base64`);
      expect(fs.readFileSync(file, 'utf8')).toBe(bad);
    }
  });
});
