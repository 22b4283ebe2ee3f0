import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, fchmodSync, fsyncSync, openSync, readFileSync, renameSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { basename, dirname, extname, join } from 'node:path';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { parseDocument } from 'yaml';
import { hashToken, scramEntry, type UserEntry } from '../broker/security.js';
import { PERMISSIONS, type Permission } from '../common/config.js';
import { fileSettingProblems, type KeyLines, readConfigFile } from './config-loader.js';
import { CliError, EXIT_USAGE } from './errors.js';

/**
 * `tributary user add|remove|list --config <file>`: manage the `users:` section of a broker config file.
 * Only a salted scrypt hash of each token is stored. A running broker picks changes up on SIGHUP.
 */

type Users = Record<string, UserEntry>;

function permissionsArg(value: string): Permission[] {
  const list = value
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean);
  for (const p of list) {
    if (!(PERMISSIONS as readonly string[]).includes(p))
      throw new InvalidArgumentError(`unknown permission ${JSON.stringify(p)} (one of ${PERMISSIONS.join(', ')}).`);
  }
  return [...new Set(list)] as Permission[];
}

function isJson(file: string): boolean {
  const ext = extname(file).toLowerCase();
  if (ext === '.json') return true;
  if (ext === '.yaml' || ext === '.yml') return false;
  throw new CliError('error: --config must be a .yaml, .yml or .json file', EXIT_USAGE);
}

const isMapping = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

interface UsersFile {
  data: Record<string, unknown>;
  users: Users;
  /** Where the file's keys are, for the problems. */
  lines: KeyLines;
  /** The file's text with `users` as it is now (YAML comments and the other settings kept). */
  text(): string;
}

/** `invalid config: ` is the broker's prefix; under `tributary user` the first line says what could not be done. */
function refused(file: string, verb: string, problems: string[]): CliError {
  return new CliError(
    [`error: cannot ${verb} ${file}: the broker would refuse it:`, ...problems.map((p) => `  ${p.replace(/^invalid config: /, '')}`)].join('\n'),
  );
}

/**
 * The config file as the broker reads it: a key twice, or a file over 1 MiB, is refused (JSON.parse kept
 * the last of two keys, and the rewrite lost the other). A missing file is an empty one (`add` creates it).
 */
function readUsersFile(file: string, verb: string): UsersFile {
  const json = isJson(file);
  let lines: KeyLines = new Map();
  let text = '';
  if (existsSync(file)) {
    const read = readConfigFile(file);
    // An empty file is no settings (an empty .json file too, though JSON has no empty document).
    const empty = () => statSync(file).size < 4096 && readFileSync(file, 'utf8').trim() === '';
    if ('error' in read && !empty()) throw refused(file, verb, [read.error]);
    if (!('error' in read)) lines = read.lines;
    text = readFileSync(file, 'utf8'); // at most 1 MiB: readConfigFile refuses a larger one
  }
  try {
    // A top level or a users: that is not a mapping would take the user nowhere while saying it was added.
    if (json) {
      const data: unknown = text.trim() === '' ? {} : JSON.parse(text);
      if (!isMapping(data)) throw new Error('the file is not a JSON object');
      const users = data.users ?? {};
      if (!isMapping(users)) throw new Error('users: is not an object');
      return { data, users: users as Users, lines, text: () => `${JSON.stringify({ ...data, users }, null, 2)}\n` };
    }
    const doc = parseDocument(text);
    if (doc.errors.length > 0) throw new Error(doc.errors[0]!.message.split('\n')[0]);
    const data: unknown = doc.toJS() ?? {};
    if (!isMapping(data)) throw new Error('the file is not a YAML mapping');
    const users = data.users ?? {};
    if (!isMapping(users)) throw new Error('users: is not a mapping');
    return {
      data,
      users: users as Users,
      lines,
      text: () => {
        doc.set('users', doc.createNode(users));
        return doc.toString();
      },
    };
  } catch (err) {
    throw new CliError(`error: cannot ${verb} ${file}: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** What the broker would refuse in the file's settings with `users` as they are now (by path, never a hash). */
function problemsOf(file: string, f: UsersFile): string[] {
  return fileSettingProblems(file, { ...f.data, users: f.users }, f.lines);
}

/**
 * Read, change and write back the config file. `change` returns whether it changed anything: nothing is
 * written otherwise. Only `add` may create the file. What would be written is checked as the broker checks
 * a file's settings, after the change (so a broken entry `remove` takes out, or `add` replaces, is not held
 * against it): a file the broker would refuse is never written.
 */
function editUsers(file: string, change: (users: Users) => boolean, opts: { create: boolean }): void {
  isJson(file);
  if (!opts.create && !existsSync(file)) throw new CliError(`error: ${file} does not exist`, EXIT_USAGE);
  const f = readUsersFile(file, 'update');
  if (!change(f.users)) return;
  const problems = problemsOf(file, f);
  if (problems.length > 0) throw refused(file, 'update', problems);
  writePrivate(file, f.text());
}

/**
 * Atomic and private, as the file holds token hashes (docs/security.md): a new file of a random name in
 * the same directory, created exclusively (a symlink or file planted there is never followed or reused)
 * with mode 0600, synced, renamed over the config, and the directory synced so the rename survives a crash.
 */
export function writePrivate(file: string, text: string): void {
  const dir = dirname(file);
  const tmp = join(dir, `.${basename(file)}.${randomBytes(12).toString('hex')}.tmp`);
  const fd = openSync(tmp, 'wx', 0o600);
  try {
    try {
      fchmodSync(fd, 0o600);
      writeFileSync(fd, text);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, file);
  } catch (err) {
    try {
      unlinkSync(tmp);
    } catch {}
    throw err;
  }
  const dfd = openSync(dir, 'r');
  try {
    fsyncSync(dfd);
  } finally {
    closeSync(dfd);
  }
}

export function registerUserCommand(program: Command): void {
  const user = program.command('user').description('manage broker users (salted token hashes in the config file)');

  user
    .command('add <principal>')
    .description('add or replace a user; prints a generated token unless --token is given')
    .requiredOption('--config <file>', 'broker config file (.yaml/.yml/.json) to write')
    .requiredOption('--permissions <list>', `comma-separated: ${PERMISSIONS.join(', ')}`, permissionsArg)
    // Not TRIBUTARY_TOKEN: that is the caller's own token for client commands, and would be given to the new user.
    .addOption(
      new Option('--token <token>', 'use this token instead of generating one (prefer the environment variable: arguments show up in ps)').env(
        'TRIBUTARY_USER_TOKEN',
      ),
    )
    .action((principal: string, opts: { config: string; permissions: Permission[]; token?: string }) => {
      if (!/^[A-Za-z0-9._@-]{1,256}$/.test(principal)) throw new CliError('error: principal must be 1-256 of letters, digits, ".", "_", "@", "-"', EXIT_USAGE);
      // Assigned to a plain object it would set the prototype: "added", and nothing written.
      if (principal === '__proto__') throw new CliError('error: principal __proto__ is reserved', EXIT_USAGE);
      if (opts.token === '') throw new CliError('error: --token (TRIBUTARY_USER_TOKEN) must not be empty', EXIT_USAGE);
      const token = opts.token ?? randomBytes(24).toString('base64url');
      editUsers(
        opts.config,
        (users) => {
          const prev = Object.hasOwn(users, principal) ? users[principal] : undefined;
          // The same token again (a change of permissions): the entry keeps its hash, so the user's open
          // sessions, which are tied to it, go on under the new permissions (docs/security.md, Revocation).
          if (prev && typeof prev.salt === 'string' && hashToken(token, Buffer.from(prev.salt, 'base64')).hash === prev.hash) {
            users[principal] = { ...prev, permissions: opts.permissions, scram: prev.scram ?? scramEntry(token) };
          } else {
            users[principal] = { ...hashToken(token), permissions: opts.permissions, scram: scramEntry(token) };
          }
          return true;
        },
        { create: true },
      );
      process.stdout.write(`user ${principal} added to ${opts.config} permissions=${opts.permissions.join(',')}\n`);
      if (opts.token === undefined) process.stdout.write(`token: ${token}\n`);
    });

  user
    .command('remove <principal>')
    .description('remove (revoke) a user; send SIGHUP to a running broker to apply')
    .requiredOption('--config <file>', 'broker config file to write')
    .action((principal: string, opts: { config: string }) => {
      let found = false;
      editUsers(
        opts.config,
        (users) => {
          found = Object.hasOwn(users, principal);
          delete users[principal];
          return found;
        },
        { create: false },
      );
      if (!found) throw new CliError(`error: no user ${principal} in ${opts.config}`);
      process.stdout.write(`user ${principal} removed from ${opts.config}\n`);
    });

  user
    .command('list')
    .description('users and their permissions (never the hashes)')
    .requiredOption('--config <file>', 'broker config file to read')
    .action((opts: { config: string }) => {
      // Read only: listing never writes the file.
      isJson(opts.config);
      if (!existsSync(opts.config)) throw new CliError(`error: ${opts.config} does not exist`, EXIT_USAGE);
      const f = readUsersFile(opts.config, 'list the users of');
      // Checked first: a malformed entry printed JS internals ("(u.permissions ?? []).join is not a function").
      const problems = problemsOf(opts.config, f);
      if (problems.length > 0) throw refused(opts.config, 'list the users of', problems);
      // scram=no: added before SCRAM keys were stored; SCRAM on the Kafka port needs it added again (docs/kafka.md).
      for (const [name, u] of Object.entries(f.users))
        process.stdout.write(`${name} permissions=${(u.permissions ?? []).join(',')} scram=${u.scram ? 'yes' : 'no'}\n`);
    });
}
