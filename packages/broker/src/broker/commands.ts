/**
 * The command table: every text command the broker serves, by name, from the handler modules of each
 * area. STREAM and STREAM_CONTROL are served by the connection itself (client-connection.ts).
 */
import { Params, type ParsedLine, checkParams, formatOk, parseLine } from 'tributary-protocol/command.js';
import { TributaryError, invalidParam } from 'tributary-protocol/errors.js';
import type { BrokerContext, CommandSpec, ConnectionContext, Reply } from './command-context.js';
import { CONNECTION_COMMANDS } from './connection-commands.js';
import { CONSUME_COMMANDS, STREAM_PARAMS } from './consume-commands.js';
import { GROUP_COMMANDS } from './group-commands.js';
import { ALL_TOPICS } from '../common/topic-scope.js';
import { withoutHiddenTopic } from '../kafka/group-visibility.js';
import { PRODUCE_COMMANDS } from './produce-commands.js';
import { REASSIGN_COMMANDS } from './reassign-commands.js';
import { REPLICA_COMMANDS } from './replica-commands.js';
import { TOPIC_COMMANDS } from './topic-commands.js';
import { TXN_COMMANDS } from './txn-commands.js';

export type { BrokerContext, CommandSpec, ConnectionContext, Reply } from './command-context.js';

function help(): Reply {
  return formatOk({ commands: [...Object.keys(COMMANDS), 'STREAM', 'STREAM_CONTROL'].sort().join(',') });
}

/**
 * A command naming a group: its `group <g> consumes topic <t>` refusal leaves out a topic the caller may not
 * describe (docs/security.md, "Groups and topic ACLs"). Sync handlers stay sync.
 */
function hidingGroupTopics(spec: CommandSpec): CommandSpec {
  if (!spec.params.includes('group')) return spec;
  const scrub = (err: unknown, b: BrokerContext, c: ConnectionContext, p: Params) => withoutHiddenTopic(err, p.line.params.get('group'), b.security?.topicScope(c) ?? ALL_TOPICS);
  const handler: CommandSpec['handler'] = (b, c, p) => {
    try {
      const r = spec.handler(b, c, p);
      return r instanceof Promise ? r.catch((err: unknown) => Promise.reject(scrub(err, b, c, p))) : r;
    } catch (err) {
      throw scrub(err, b, c, p);
    }
  };
  return { ...spec, handler };
}

export const COMMANDS: Record<string, CommandSpec> = Object.fromEntries(
  Object.entries({
    ...CONNECTION_COMMANDS,
    HELP: { handler: help, params: [] },
    ...TOPIC_COMMANDS,
    ...PRODUCE_COMMANDS,
    ...CONSUME_COMMANDS,
    ...GROUP_COMMANDS,
    ...TXN_COMMANDS,
    ...REPLICA_COMMANDS,
    ...REASSIGN_COMMANDS,
  } satisfies Record<string, CommandSpec>).map(([name, spec]) => [name, hidingGroupTopics(spec)]),
);

/** Each command's declared parameters, as sets; STREAM's too (the connection serves it itself). */
const ALLOWED = new Map<string, ReadonlySet<string>>([...Object.entries(COMMANDS).map(([name, spec]) => [name, new Set(spec.params)] as const), ['STREAM', new Set(STREAM_PARAMS)]]);

/**
 * The command a line names (no spec for STREAM, which the connection serves), with the parameters it
 * takes; throws unknown_command, and invalid_parameter for a parameter or positional token the command
 * does not take (before anything runs).
 */
export function lookupCommand(line: ParsedLine): { name: string; spec: CommandSpec | undefined; params: Params } {
  const name = line.head.toUpperCase();
  const spec = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
  // HELP lists it, so it is no unknown command: it only has no stream to end here.
  if (name === 'STREAM_CONTROL') throw invalidParam('command', 'no stream is open on this connection: STREAM_CONTROL type=CLOSE ends a STREAM');
  const allowed = ALLOWED.get(name);
  if (!allowed) throw new TributaryError('unknown_command', { command: line.head.length > 64 ? `${line.head.slice(0, 64)}...` : line.head });
  checkParams(line, allowed, { positional: spec?.positional });
  return { name, spec, params: new Params(line, allowed) };
}

const STREAM_CONTROL_PARAMS: ReadonlySet<string> = new Set(['type']);

/**
 * A request on an open stream: only `STREAM_CONTROL type=CLOSE` ends it; anything else (another parameter
 * too) is refused. A STREAM_CONTROL that does not parse gets the parser's refusal, as off a stream: "only
 * STREAM_CONTROL type=CLOSE is accepted" would not say what is wrong with `type=CLOSE type=CLOSE`.
 */
export function checkStreamClose(text: string): void {
  let line: ParsedLine | undefined;
  try {
    line = parseLine(text);
  } catch (err) {
    if (/^\s*STREAM_CONTROL(\s|$)/i.test(text)) throw err;
    line = undefined;
  }
  if (line?.head.toUpperCase() !== 'STREAM_CONTROL' || line.params.get('type')?.toUpperCase() !== 'CLOSE') {
    throw invalidParam('command', 'only STREAM_CONTROL type=CLOSE is accepted on a stream');
  }
  checkParams(line, STREAM_CONTROL_PARAMS);
}
