import { readFileSync, statSync } from 'node:fs';
import { extname } from 'node:path';
import { nearestName } from 'tributary-protocol/names.js';
import { type Document, isMap, LineCounter, parseDocument } from 'yaml';
import { z } from 'zod';
import { type BrokerConfig, brokerConfigSchema, envKey } from '../common/config.js';
import { unusedSettings } from './config-unused.js';

/** A config file larger than this is refused unread. */
const MAX_CONFIG_BYTES = 1024 * 1024;
/** Unknown keys listed before the rest are summed up in one line. */
const MAX_REPORTED = 20;

/**
 * Broker settings from four layers: flags > TRIBUTARY_* env > config file > schema defaults.
 * Everything (flag names, env names, value kinds, help text) is derived from `brokerConfigSchema`, so a
 * key added there shows up here without edits.
 */

export type ConfigKey = keyof BrokerConfig;

export type FieldKind =
  | { type: 'integer' | 'number'; min?: number; max?: number }
  | { type: 'string' }
  | { type: 'enum'; values: string[] }
  | { type: 'boolean' }
  /** Mappings (users, topicAcls): JSON on a flag or in an env variable, a mapping in a config file. */
  | { type: 'json' };

export interface ConfigField {
  key: ConfigKey;
  /** kebab-case flag name without dashes, e.g. `health-port`. */
  flag: string;
  env: string;
  kind: FieldKind;
  defaultValue: unknown;
}

export type ConfigSource =
  | { kind: 'default' }
  /** `at`: where the key is in the file (1-based); its text is never kept, since it may be a secret. */
  | { kind: 'file'; path: string; at?: { line: number; column: number } }
  | { kind: 'env'; name: string }
  | { kind: 'flag'; name: string };

export interface ConfigInputs {
  /** Raw flag strings keyed by config key (commander's camelCase attribute names match the keys). */
  flags?: Partial<Record<string, unknown>>;
  env?: Record<string, string | undefined>;
  configFile?: string;
}

export type ConfigResult =
  | { ok: true; config: BrokerConfig; sources: Record<ConfigKey, ConfigSource> }
  | { ok: false; errors: string[] };

export function kebabCase(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

interface Def {
  type: string;
  innerType?: z.ZodType;
  defaultValue?: unknown;
  entries?: Record<string, string>;
  checks?: Array<{ _zod: { def: { check: string; value?: number; inclusive?: boolean; format?: string } } }>;
}

function defOf(schema: z.ZodType): Def {
  return (schema as unknown as { def: Def }).def;
}

function describeSchema(key: ConfigKey, schema: z.ZodType): ConfigField {
  let s = schema;
  let defaultValue: unknown;
  for (;;) {
    const d = defOf(s);
    if (d.type === 'default') defaultValue = d.defaultValue;
    if ((d.type === 'default' || d.type === 'optional') && d.innerType) s = d.innerType;
    else break;
  }
  const d = defOf(s);
  let kind: FieldKind;
  if (d.type === 'number') {
    const k: FieldKind = { type: 'number' };
    for (const c of d.checks ?? []) {
      const cd = c._zod.def;
      if (cd.check === 'number_format' && cd.format?.includes('int')) k.type = 'integer';
      else if (cd.check === 'greater_than') k.min = cd.value;
      else if (cd.check === 'less_than') k.max = cd.value;
    }
    kind = k;
  } else if (d.type === 'enum') {
    kind = { type: 'enum', values: Object.values(d.entries ?? {}) };
  } else if (d.type === 'boolean') {
    kind = { type: 'boolean' };
  } else if (d.type === 'record' || d.type === 'object') {
    kind = { type: 'json' };
  } else {
    kind = { type: 'string' };
  }
  return { key, flag: kebabCase(key), env: envKey(key), kind, defaultValue };
}

export const CONFIG_FIELDS: readonly ConfigField[] = Object.entries(brokerConfigSchema.shape).map(([key, schema]) =>
  describeSchema(key as ConfigKey, schema as z.ZodType),
);

export const CONFIG_KEYS: readonly ConfigKey[] = CONFIG_FIELDS.map((f) => f.key);
const BY_KEY = new Map<string, ConfigField>(CONFIG_FIELDS.map((f) => [f.key, f]));

/** One-line help for a flag: what it takes, where else it can come from, its default. */
export function fieldHelp(f: ConfigField): string {
  let what: string;
  const k = f.kind;
  if (k.type === 'integer' || k.type === 'number') {
    const noun = k.type === 'integer' ? 'integer' : 'number';
    if (k.min !== undefined && k.max !== undefined) what = `${noun} ${k.min}..${k.max}`;
    else if (k.min !== undefined) what = `${noun} >= ${k.min}`;
    else if (k.max !== undefined) what = `${noun} <= ${k.max}`;
    else what = noun;
  } else if (k.type === 'enum') what = k.values.join('|');
  else if (k.type === 'boolean') what = 'true|false';
  else if (k.type === 'json') what = 'JSON object';
  else what = 'string';
  const dflt = f.defaultValue === undefined || k.type === 'json' ? '' : `, default ${String(f.defaultValue)}`;
  return `${what} (env ${f.env}${dflt})`;
}

export function formatSource(s: ConfigSource): string {
  switch (s.kind) {
    case 'flag':
      return `flag ${s.name}`;
    case 'env':
      return `env ${s.name}`;
    case 'file':
      return s.at ? `file ${s.path}, line ${s.at.line}, column ${s.at.column}` : `file ${s.path}`;
    default:
      return 'default';
  }
}

function problem(key: string, text: string, source: ConfigSource): string {
  return `invalid config: ${key}: ${text} (${formatSource(source)})`;
}

/** Flags and env vars arrive as strings: convert by the field's kind, refusing anything sloppy. */
function parseRaw(f: ConfigField, raw: string): { value: unknown } | { error: string } {
  const k = f.kind;
  const shown = JSON.stringify(raw);
  if (k.type === 'integer') {
    if (!/^-?\d+$/.test(raw)) return { error: `expected an integer, got ${shown}` };
    const n = Number(raw);
    if (!Number.isSafeInteger(n)) return { error: `expected an integer, got ${shown} (too large)` };
    return { value: n };
  }
  if (k.type === 'number') {
    if (!/^-?\d+(\.\d+)?$/.test(raw)) return { error: `expected a number, got ${shown}` };
    return { value: Number(raw) };
  }
  if (k.type === 'json') {
    try {
      return { value: JSON.parse(raw) };
    } catch {
      return { error: 'expected a JSON object' }; // the value is not echoed: it may hold token hashes
    }
  }
  if (k.type === 'boolean') {
    if (raw === 'true') return { value: true };
    if (raw === 'false') return { value: false };
    return { error: `expected true or false, got ${shown}` };
  }
  return { value: raw };
}

/**
 * Where each top-level key of a file is (line and column), for errors that name the place. Never the
 * text there: the line may hold a token hash, a salt, the inter-broker token or a database password.
 */
export type KeyLines = Map<string, { line: number; column: number }>;

function keyLines(doc: Document, counter: LineCounter): KeyLines {
  const out: KeyLines = new Map();
  if (!isMap(doc.contents)) return out;
  for (const item of doc.contents.items) {
    const key = item.key as { range?: [number, number, number]; value?: unknown } | null;
    if (!key?.range) continue;
    const { line, col } = counter.linePos(key.range[0]);
    out.set(String(key.value), { line, column: col });
  }
  return out;
}

export function readConfigFile(path: string): { data: Record<string, unknown>; lines: KeyLines } | { error: string } {
  const ext = extname(path).toLowerCase();
  if (ext !== '.yaml' && ext !== '.yml' && ext !== '.json') {
    return { error: `invalid config: ${path}: unsupported config file type (use .yaml, .yml or .json)` };
  }
  let text: string;
  try {
    // Read with a bound: a config file is small, and a huge one took the YAML parser minutes.
    if (statSync(path).size > MAX_CONFIG_BYTES) return { error: `invalid config: ${path}: larger than ${MAX_CONFIG_BYTES} bytes` };
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    const why = e.code === 'ENOENT' ? 'no such file' : e.message;
    return { error: `invalid config: cannot read config file ${path}: ${why}` };
  }
  let data: unknown;
  let lines: KeyLines = new Map();
  if (ext === '.json') {
    try {
      data = JSON.parse(text);
    } catch (err) {
      // V8's message may quote the text (`"..." is not valid JSON`): only the place is told.
      const at = /at position (\d+)/.exec((err as Error).message);
      return { error: `invalid config: cannot parse config file ${path}: not valid JSON${at ? ` ${lineColumn(text, Number(at[1]))}` : ''}` };
    }
    // JSON.parse keeps the last of two equal keys without a word; read as YAML (JSON is YAML), they are an
    // error. The YAML reading also tells where each key is.
    const counter = new LineCounter();
    const doc = parseDocument(text, { lineCounter: counter, prettyErrors: true });
    const dup = doc.errors.find((e) => e.code === 'DUPLICATE_KEY');
    if (dup) return { error: `invalid config: cannot parse config file ${path}: ${withoutSource(dup.message)}` };
    if (doc.errors.length === 0) lines = keyLines(doc, counter);
  } else {
    const counter = new LineCounter();
    const doc = parseDocument(text, { lineCounter: counter, prettyErrors: true });
    if (doc.errors.length > 0) return { error: `invalid config: cannot parse config file ${path}: ${withoutSource(doc.errors[0]!.message)}` };
    data = doc.toJS();
    lines = keyLines(doc, counter);
  }
  if (data === null || data === undefined) return { data: {}, lines }; // an empty YAML file
  if (typeof data !== 'object' || Array.isArray(data)) {
    return { error: `invalid config: ${path}: the top level must be a mapping of setting names to values` };
  }
  return { data: data as Record<string, unknown>, lines };
}

/**
 * Settings whose values an error never echoes, whatever their type: mappings (users holds token hashes,
 * salts and SCRAM keys), the inter-broker token and a database URL (it may hold a password).
 */
function isSecret(key: string): boolean {
  return key === 'interBrokerToken' || key === 'offsetStorePostgresUrl' || CONFIG_FIELDS.find((f) => f.key === key)?.kind.type === 'json';
}

function normalize(name: string): string {
  return name.replace(/[-_]/g, '').toLowerCase();
}

/** Describe a zod issue in the words a user of the flags would want. */
function issueText(issue: z.core.$ZodIssue, value: unknown): string {
  const got = value === undefined ? '' : `, got ${JSON.stringify(value)}`;
  switch (issue.code) {
    case 'too_small': {
      const min = Number(issue.minimum);
      if (issue.origin === 'string') return min === 1 ? `must not be empty${got}` : `must be at least ${min} characters${got}`;
      return `must be ${issue.inclusive === false ? '>' : '>='} ${min}${got}`;
    }
    case 'too_big': {
      const max = Number(issue.maximum);
      if (issue.origin === 'string') return `must be at most ${max} characters${got}`;
      return `must be ${issue.inclusive === false ? '<' : '<='} ${max}${got}`;
    }
    case 'invalid_type':
      if (issue.expected === 'int') return `must be an integer${got}`;
      return `must be ${/^[aeiou]/.test(issue.expected) ? 'an' : 'a'} ${issue.expected}${got}`;
    case 'invalid_value':
      return `must be one of ${issue.values.map(String).join('|')}${got}`;
    default:
      return `${issue.message}${got}`;
  }
}

/** The known settings of a file into `merged` (and their places into `sources`); its unknown keys as problems. */
function takeFileSettings(path: string, file: { data: Record<string, unknown>; lines: KeyLines }, merged: Record<string, unknown>, sources: Partial<Record<ConfigKey, ConfigSource>>): string[] {
  const errors: string[] = [];
  for (const [name, value] of Object.entries(file.data)) {
    const at = file.lines.get(name);
    const source: ConfigSource = at ? { kind: 'file', path, at } : { kind: 'file', path };
    if (!BY_KEY.has(name)) {
      // A file of thousands of unknown keys gets a bounded answer (each suggestion compares every key).
      if (errors.length >= MAX_REPORTED) {
        errors.push(`invalid config: ${path}: more unknown keys not listed`);
        break;
      }
      const near = CONFIG_KEYS.find((k) => normalize(k) === normalize(name)) ?? nearestName(name, CONFIG_KEYS);
      errors.push(problem(name, near ? `unknown key (did you mean ${near}?)` : 'unknown key', source));
      continue;
    }
    merged[name] = value;
    sources[name as ConfigKey] = source;
  }
  return errors;
}

/** Zod's issues in the words of the flags, each naming its key (its path in a mapping) and its source. */
function issueProblems(issues: readonly z.core.$ZodIssue[], merged: Record<string, unknown>, sources: Partial<Record<ConfigKey, ConfigSource>>): string[] {
  const errors: string[] = [];
  for (const issue of issues) {
    const key = issue.path.length > 0 ? String(issue.path[0]) : '';
    if (issue.code === 'unrecognized_keys') {
      // Nested in a setting (users.a.extra): named by its full path, from that setting's source.
      const at = issue.path.map(String);
      for (const k of issue.keys) errors.push(problem([...at, k].join('.'), 'unknown key', sources[(at[0] ?? k) as ConfigKey] ?? { kind: 'default' }));
      continue;
    }
    // A default is shown too: one can fail a check across settings (httpHeadersTimeoutMs <= httpRequestTimeoutMs).
    // A value given is shown even when null (YAML `port:` with nothing after it): not the default it hid behind.
    const shown = isSecret(key) ? undefined : Object.hasOwn(merged, key) ? merged[key] : BY_KEY.get(key)?.defaultValue;
    errors.push(problem(issue.path.map(String).join('.') || key, issueText(issue, shown), sources[key as ConfigKey] ?? { kind: 'default' }));
  }
  return errors;
}

/** The settings without the checks across them: what one layer (a file) can be judged by alone. */
const SETTINGS_EACH = z.object(brokerConfigSchema.shape).strict();

/**
 * What the broker would refuse in a config file's settings taken alone, as it words it: unknown keys and
 * each value by its setting's type and range (`users.eve.permissions.0: ...`). Not the checks across
 * settings, which flags and env take part in. `data` is the file's content, possibly changed (`tributary
 * user` checks what it would write); `file` where its keys are.
 */
export function fileSettingProblems(path: string, data: Record<string, unknown>, lines: KeyLines): string[] {
  const merged: Record<string, unknown> = {};
  const sources: Partial<Record<ConfigKey, ConfigSource>> = {};
  const errors = takeFileSettings(path, { data, lines }, merged, sources);
  const result = SETTINGS_EACH.safeParse(merged);
  if (!result.success) errors.push(...issueProblems(result.error.issues, merged, sources));
  return errors;
}

/**
 * TRIBUTARY_* names that are not broker settings but are read by other parts of Tributary, so a shell
 * that exports them can still start a broker: the client commands' connection settings (cli/client-util.ts),
 * the examples' (examples/), the fault-injection hook (common/failpoints.ts), and this repository's test
 * and build scripts.
 */
const OTHER_ENV_NAMES: ReadonlySet<string> = new Set([
  'TRIBUTARY_BOOTSTRAP',
  'TRIBUTARY_TLS',
  'TRIBUTARY_CA',
  'TRIBUTARY_CERT',
  'TRIBUTARY_CERT_KEY',
  'TRIBUTARY_PRINCIPAL',
  'TRIBUTARY_TOKEN',
  'TRIBUTARY_USER_TOKEN',
  'TRIBUTARY_FAILPOINTS',
  'TRIBUTARY_SKIP_BUILD',
  'TRIBUTARY_SUITE_ERRORS',
  'TRIBUTARY_SOAK_MS',
  'TRIBUTARY_CHROMIUM',
  'TRIBUTARY_FAIL_SEED',
  'TRIBUTARY_FAIL_RATE',
  'TRIBUTARY_SESSION_TIMEOUT_MS',
  'TRIBUTARY_PARK_TIMEOUT_MS',
]);

const SETTING_ENV_NAMES: ReadonlySet<string> = new Set(CONFIG_FIELDS.map((f) => f.env));

/**
 * A TRIBUTARY_* variable that names no setting is refused, not ignored: a misspelt one
 * (TRIBUTARY_RETENTON_HOURS) would otherwise leave the broker running on the default it meant to change.
 */
function unknownEnvProblems(env: Record<string, string | undefined>): string[] {
  const errors: string[] = [];
  for (const name of Object.keys(env)) {
    if (!name.startsWith('TRIBUTARY_') || env[name] === undefined || SETTING_ENV_NAMES.has(name) || OTHER_ENV_NAMES.has(name)) continue;
    const near = nearestName(name, SETTING_ENV_NAMES);
    errors.push(problem(name, `unknown variable${near ? ` (did you mean ${near}?)` : ''}`, { kind: 'env', name }));
  }
  return errors;
}

/**
 * Merge the layers and validate the result once with the schema. Every problem is reported (one line
 * each, naming the key and where its value came from), not just the first.
 */
export function loadBrokerConfig(inputs: ConfigInputs = {}): ConfigResult {
  const errors: string[] = [];
  const merged: Record<string, unknown> = {};
  const sources = {} as Record<ConfigKey, ConfigSource>;

  if (inputs.configFile !== undefined) {
    const file = readConfigFile(inputs.configFile);
    if ('error' in file) errors.push(file.error);
    else errors.push(...takeFileSettings(inputs.configFile, file, merged, sources));
  }

  if (inputs.env) errors.push(...unknownEnvProblems(inputs.env));
  const layers: Array<['env' | 'flag', Record<string, unknown> | undefined]> = [
    ['env', inputs.env],
    ['flag', inputs.flags],
  ];
  for (const [kind, values] of layers) {
    if (!values) continue;
    for (const f of CONFIG_FIELDS) {
      const name = kind === 'env' ? f.env : f.key;
      const raw = values[name];
      if (raw === undefined) continue;
      const source: ConfigSource = kind === 'env' ? { kind: 'env', name } : { kind: 'flag', name: `--${f.flag}` };
      const parsed = typeof raw === 'string' ? parseRaw(f, raw) : { value: raw };
      if ('error' in parsed) {
        errors.push(problem(f.key, parsed.error, source));
        continue;
      }
      merged[f.key] = parsed.value;
      sources[f.key] = source;
    }
  }

  const result = brokerConfigSchema.safeParse(merged);
  if (!result.success) errors.push(...issueProblems(result.error.issues, merged, sources));
  if (result.success) {
    // Settings that only make sense together: one given without the other is refused, never ignored.
    const c = result.data;
    const at = (key: ConfigKey): ConfigSource => sources[key] ?? { kind: 'default' };
    if (c.offsetStore === 'postgres' && !c.offsetStorePostgresUrl) errors.push(problem('offsetStorePostgresUrl', 'required when offsetStore is postgres', at('offsetStore')));
    if (c.offsetStorePostgresUrl !== undefined && c.offsetStore !== 'postgres') {
      errors.push(problem('offsetStorePostgresUrl', `given, but offsetStore is ${c.offsetStore}, which would not use it (set offsetStore postgres, or leave the URL out)`, at('offsetStorePostgresUrl')));
    }
    for (const { key, why } of unusedSettings(c, (k) => sources[k] !== undefined)) errors.push(problem(key, why, at(key)));
  }
  if (errors.length > 0 || !result.success) return { ok: false, errors };

  for (const key of CONFIG_KEYS) sources[key] ??= { kind: 'default' };
  return { ok: true, config: result.data, sources };
}

/**
 * A yaml error message without the source lines it ends with: the file holds token hashes, SCRAM keys and
 * the inter-broker token (docs/security.md), and errors go to stderr and the log. `... at line 3, column 1`.
 */
function withoutSource(message: string): string {
  return message.split('\n')[0]!.replace(/:\s*$/, '');
}

/** `at line L, column C` of a character position, as yaml words it. */
function lineColumn(text: string, position: number): string {
  const before = text.slice(0, position).split('\n');
  return `at line ${before.length}, column ${before[before.length - 1]!.length + 1}`;
}
