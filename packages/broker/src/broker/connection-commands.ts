/** PROTOCOL_INFO, NEGOTIATE and AUTH: what a connection does before anything else. */
import { type Params, formatOk } from 'tributary-protocol/command.js';
import { ERROR_CLASSES, TributaryError } from 'tributary-protocol/errors.js';
import { FEATURES, PROTOCOL_VERSION } from 'tributary-protocol/features.js';
import type { BrokerContext, CommandSpec, ConnectionContext, Reply } from './command-context.js';

function protocolInfo(): Reply {
  return formatOk({
    protocol: 'tributary',
    min_version: PROTOCOL_VERSION,
    max_version: PROTOCOL_VERSION,
    features: FEATURES.join(','),
    error_classes: ERROR_CLASSES.join(','),
  });
}

/**
 * NEGOTIATE's `features` at most: ten times the length of naming every feature there is. Anyone may send
 * NEGOTIATE before AUTH, and 64 MiB of `a,a,...` once took 10 s and 2.19 GB to split (and was echoed back).
 */
const MAX_FEATURES_LENGTH = 1024;
/** At most this many unsupported names are echoed back, each once. */
const MAX_UNSUPPORTED_ECHOED = 16;

function negotiate(_b: BrokerContext, c: ConnectionContext, p: Params): Reply {
  const version = p.reqInt('version', { min: 0, max: 1_000_000 });
  if (version !== PROTOCOL_VERSION) throw new TributaryError('unsupported_version', { requested: version, min_version: PROTOCOL_VERSION, max_version: PROTOCOL_VERSION });
  const requested = p.str('features', { allowEmpty: true, maxLength: MAX_FEATURES_LENGTH }) ?? '';
  const wanted = requested === '*' ? [...FEATURES] : requested.split(',').map((f) => f.trim()).filter(Boolean);
  const known = new Set<string>(FEATURES);
  const enabled = wanted.filter((f) => known.has(f));
  const unsupported = [...new Set(wanted.filter((f) => !known.has(f)))].slice(0, MAX_UNSUPPORTED_ECHOED);
  if (p.bool('require_features') && unsupported.length > 0) {
    throw new TributaryError('UNSUPPORTED_FEATURE', { unsupported: unsupported.join(',') });
  }
  c.features = new Set(enabled);
  return formatOk({ protocol_version: PROTOCOL_VERSION, enabled: enabled.join(','), unsupported: unsupported.join(',') });
}

function auth(b: BrokerContext, c: ConnectionContext, p: Params): Reply | Promise<Reply> {
  const principal = p.reqStr('principal', { maxLength: 256 });
  const token = p.str('token', { maxLength: 4096, allowEmpty: true });
  if (b.security?.enabled) return b.security.authenticate(c, principal, token ?? '');
  // Authentication is not configured on this broker: the connection is anonymous-with-a-name.
  c.principal = principal;
  return formatOk({ principal, authenticated: false });
}


export const CONNECTION_COMMANDS: Record<string, CommandSpec> = {
  PROTOCOL_INFO: { handler: protocolInfo, params: [] },
  NEGOTIATE: { handler: negotiate, params: ['features', 'require_features', 'version'] },
  AUTH: { handler: auth, params: ['principal', 'token'] },
};
