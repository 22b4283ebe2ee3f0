import { type ErrorFields, TributaryError, invalidParam } from './errors.js';
import { nearestName } from './names.js';

/**
 * Text commands: `COMMAND key=value key="quoted \" value" positional ... message=rest of the body`.
 * The same rules serve requests and replies (`OK key=value`, `ERROR: code key=value`).
 */
export interface ParsedLine {
  /** First token as written (commands are matched upper-cased by the caller). */
  head: string;
  params: Map<string, string>;
  /** Tokens without `=` after the head, in order (e.g. BATCH_COMMIT's `P0:5,P3:7`). */
  positional: string[];
}

const KEY_RE = /^[A-Za-z_][A-Za-z0-9_.-]*$/;
/** No command takes more (lists travel as one comma-separated token): millions of them took seconds to parse. */
const MAX_TOKENS = 10_000;

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
}

export function parseLine(text: string): ParsedLine {
  let i = 0;
  const n = text.length;
  const skip = () => {
    while (i < n && isSpace(text.charCodeAt(i))) i++;
  };
  skip();
  const headStart = i;
  while (i < n && !isSpace(text.charCodeAt(i))) i++;
  const head = text.slice(headStart, i);
  if (head.length === 0) throw invalidParam('command', 'empty command');
  const params = new Map<string, string>();
  const positional: string[] = [];
  for (;;) {
    skip();
    if (i >= n) break;
    if (params.size + positional.length >= MAX_TOKENS) throw invalidParam('command', `more than ${MAX_TOKENS} parameters`);
    const tokStart = i;
    // read a key up to '=' or whitespace
    while (i < n && !isSpace(text.charCodeAt(i)) && text[i] !== '=' && text[i] !== '"') i++;
    if (i < n && text[i] === '=') {
      const key = text.slice(tokStart, i);
      if (!KEY_RE.test(key)) throw invalidParam(key || '(empty)', 'malformed parameter name');
      if (params.has(key)) throw invalidParam(key, 'given more than once');
      i++; // '='
      if (key === 'message') {
        // The rest of the body, verbatim: payloads may hold anything, including spaces and quotes.
        params.set(key, text.slice(i));
        break;
      }
      if (i < n && text[i] === '"') {
        i++;
        // Runs between escapes are found with indexOf and sliced, not added a character at a time: a
        // 60 MiB value built that way held the event loop for seconds and took gigabytes of pieces.
        let value = '';
        let closed = false;
        let bs = text.indexOf('\\', i);
        for (;;) {
          const q = text.indexOf('"', i);
          if (q < 0) break;
          if (bs >= 0 && bs < q) {
            const next = text[bs + 1];
            if (next !== '"' && next !== '\\') throw invalidParam(key, 'bad escape in quoted value');
            value += text.slice(i, bs) + next;
            i = bs + 2;
            bs = text.indexOf('\\', i);
            continue;
          }
          value += text.slice(i, q);
          i = q + 1;
          closed = true;
          break;
        }
        if (!closed) throw invalidParam(key, 'unterminated quoted value');
        if (i < n && !isSpace(text.charCodeAt(i))) throw invalidParam(key, 'text after closing quote');
        params.set(key, value);
      } else {
        const vStart = i;
        while (i < n && !isSpace(text.charCodeAt(i))) i++;
        const value = text.slice(vStart, i);
        if (value.includes('"')) throw invalidParam(key, 'stray quote in value');
        params.set(key, value);
      }
    } else {
      while (i < n && !isSpace(text.charCodeAt(i))) i++;
      const tok = text.slice(tokStart, i);
      if (tok.includes('"')) throw invalidParam('command', 'stray quote');
      positional.push(tok);
    }
  }
  return { head, params, positional };
}

export type FieldValue = string | number | boolean | bigint;

function needsQuote(v: string): boolean {
  if (v.length === 0) return true;
  for (let i = 0; i < v.length; i++) {
    const c = v.charCodeAt(i);
    if (isSpace(c) || c === 0x22 || c === 0x5c) return true;
  }
  return false;
}

export function formatValue(v: FieldValue): string {
  const s = String(v);
  return needsQuote(s) ? `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"` : s;
}

/** `HEAD k=v k="v w"`; `message` (if present) is written last and verbatim. */
export function formatLine(head: string, fields: Record<string, FieldValue | undefined> = {}, positional: string[] = []): string {
  let out = head;
  for (const p of positional) out += ` ${p}`;
  let message: FieldValue | undefined;
  for (const [k, v] of Object.entries(fields)) {
    if (v === undefined) continue;
    if (k === 'message') {
      message = v;
      continue;
    }
    out += ` ${k}=${formatValue(v)}`;
  }
  if (message !== undefined) out += ` message=${String(message)}`;
  return out;
}

export function formatOk(fields: Record<string, FieldValue | undefined> = {}): string {
  return formatLine('OK', fields);
}

/** `ERROR: <code> [positional] class=<c> retryable=<b> k=v ...` */
export function formatError(err: TributaryError): string {
  // class/retryable always come from the registry: a same-named entry in err.fields must not override them.
  const { class: _class, retryable: _retryable, ...rest } = err.fields;
  const fields: Record<string, FieldValue> = { class: err.errorClass, retryable: err.retriable, ...rest };
  return formatLine(`ERROR: ${err.code}`, fields, err.extra);
}

/** Parse an `ERROR:` reply back into a TributaryError (used by the SDK and tests). */
export function parseError(text: string): TributaryError {
  const body = text.replace(/^ERROR:\s*/, '');
  let parsed: ParsedLine;
  try {
    parsed = parseLine(body);
  } catch {
    return new TributaryError('internal_error', { reply: text });
  }
  const fields: ErrorFields = {};
  for (const [k, v] of parsed.params) if (k !== 'class' && k !== 'retryable') fields[k] = v;
  return new TributaryError(parsed.head, fields, text, parsed.positional);
}

export function isErrorReply(text: string): boolean {
  return text.startsWith('ERROR:');
}

/** At most this much of an unknown name is echoed back in the refusal. */
const MAX_ECHOED_NAME = 64;

function echoed(name: string): string {
  return name.length > MAX_ECHOED_NAME ? `${name.slice(0, MAX_ECHOED_NAME)}...` : name;
}

/**
 * Refuses what a command does not take, before it runs (so a typo changes nothing): parameters not in
 * `allowed`, with the nearest valid name when one is close, and positional tokens unless `positional`
 * (an unquoted value with a space leaves one: `topic=sp ace`).
 */
export function checkParams(line: ParsedLine, allowed: ReadonlySet<string>, opts: { positional?: boolean } = {}): void {
  for (const k of line.params.keys()) {
    if (allowed.has(k)) continue;
    const near = nearestName(k, allowed);
    throw new TributaryError('invalid_parameter', { param: echoed(k), reason: 'unknown parameter', ...(near ? { did_you_mean: near } : {}) });
  }
  if (!opts.positional && line.positional.length > 0) {
    throw new TributaryError('invalid_parameter', {
      param: echoed(line.positional[0]!),
      reason: 'unexpected positional token: quote values that contain spaces (key="a b")',
    });
  }
}

/** Typed access to a request's parameters; every failure is an invalid_parameter error. */
export class Params {
  /**
   * @param allowed the names the command declares (checkParams refused the rest): reading any other
   *   name is a bug in the handler, reported as internal_error so tests catch an incomplete declaration.
   */
  constructor(
    readonly line: ParsedLine,
    private readonly allowed?: ReadonlySet<string>,
  ) {}

  has(name: string): boolean {
    this.check(name);
    return this.line.params.has(name);
  }

  private check(name: string): void {
    if (this.allowed && !this.allowed.has(name)) throw new TributaryError('internal_error', { reason: `handler read the undeclared parameter ${name}` });
  }

  private raw(name: string): string | undefined {
    this.check(name);
    return this.line.params.get(name);
  }

  str(name: string, opts: { required?: boolean; maxLength?: number; allowEmpty?: boolean } = {}): string | undefined {
    const v = this.raw(name);
    if (v === undefined) {
      if (opts.required) throw invalidParam(name, 'required');
      return undefined;
    }
    if (!opts.allowEmpty && v.length === 0) throw invalidParam(name, 'must not be empty');
    if (opts.maxLength !== undefined && v.length > opts.maxLength) throw invalidParam(name, `longer than ${opts.maxLength} characters`);
    return v;
  }

  reqStr(name: string, opts: { maxLength?: number; allowEmpty?: boolean } = {}): string {
    return this.str(name, { ...opts, required: true }) as string;
  }

  int(name: string, opts: { min?: number; max?: number; required?: boolean } = {}): number | undefined {
    const v = this.raw(name);
    if (v === undefined) {
      if (opts.required) throw invalidParam(name, 'required');
      return undefined;
    }
    return parseIntStrict(name, v, opts.min ?? Number.MIN_SAFE_INTEGER, opts.max ?? Number.MAX_SAFE_INTEGER);
  }

  reqInt(name: string, opts: { min?: number; max?: number } = {}): number {
    return this.int(name, { ...opts, required: true }) as number;
  }

  bool(name: string): boolean | undefined {
    const v = this.raw(name);
    if (v === undefined) return undefined;
    const l = v.toLowerCase();
    if (l === 'true' || l === '1') return true;
    if (l === 'false' || l === '0') return false;
    throw invalidParam(name, 'expected true or false');
  }

  oneOf<T extends string>(name: string, allowed: readonly T[]): T | undefined {
    const v = this.raw(name);
    if (v === undefined) return undefined;
    const l = v.toLowerCase();
    const hit = allowed.find((a) => a.toLowerCase() === l);
    if (!hit) throw invalidParam(name, `expected one of ${allowed.join('|')}`);
    return hit;
  }
}

/** Decimal integers only: no exponents, no fractions, no hex, within [min, max] and 2^53. */
export function parseIntStrict(name: string, v: string, min: number, max: number): number {
  if (!/^-?\d{1,16}$/.test(v)) throw invalidParam(name, 'not an integer in range');
  const n = Number(v);
  if (!Number.isSafeInteger(n)) throw invalidParam(name, 'not a safe integer');
  if (n < min || n > max) throw invalidParam(name, `must be between ${min} and ${max}`);
  return n;
}
