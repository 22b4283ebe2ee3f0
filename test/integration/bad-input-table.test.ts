/**
 * Table-driven bad input against one real broker process (docs/protocol.md sections 2, 4 and 5): every
 * text command with each of its parameters malformed (empty, not a number, out of range, a name with a
 * space or too long, an unknown enum value), missing, duplicated, unknown or followed by a stray token,
 * and batch frames cut at every byte or with lying counts and lengths. Each must be refused with an
 * `ERROR:` naming the problem, and afterwards the broker state a client can see (topics, offsets, the
 * group with its member and commits, the open transaction) must be exactly as before, and the broker
 * must still serve.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeBatch } from 'tributary-protocol/batch.js';
import { parseLine } from 'tributary-protocol/command.js';
import { BrokerProcess } from '../helpers/launcher.js';
import { RawClient } from '../helpers/raw-client.js';

type Kind = 'int' | 'name' | 'any_id' | 'txn_id' | 'enum' | 'bool' | 'entries' | 'text';

/** Values each kind of parameter must refuse, whatever the command. */
const BAD: Record<Kind, string[]> = {
  int: ['', 'abc', '1e3', '1.5', '0x10', '+1', '99999999999999999', '9007199254740993', '- 1'],
  name: ['', 'a b', '../x', 'x'.repeat(300), 'tab\there', 'é'],
  /** FIND_COORDINATOR takes any group id: a Kafka client's (docs/kafka.md) may hold any character. */
  any_id: [''],
  txn_id: ['', 'x'.repeat(300)],
  enum: ['', 'bogus', 'x'.repeat(300)],
  bool: ['', 'maybe', '2'],
  entries: ['P0', 'Px:1', 'P0:-1', 'P0:1,P0:2', 'P0:abc', 'X0:1'],
  text: [],
};

/** A value written as the protocol quotes it (section 2). */
function quoted(v: string): string {
  return v === '' || /[\s"\\]/.test(v) ? `"${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"` : v;
}

interface Case {
  label: string;
  line: string;
  /** The parameter the refusal must name (undefined: the code alone is checked). */
  param?: string;
}

interface Spec {
  params: Record<string, [Kind, string]>;
  /** `P<n>:<offset>` entries after the parameters. */
  entries?: string;
  required: string[];
}

function line(cmd: string, params: Record<string, string>, entries?: string, extra = ''): string {
  let out = cmd;
  let message: string | undefined;
  for (const [k, v] of Object.entries(params)) {
    if (k === 'message') message = v;
    else out += ` ${k}=${quoted(v)}`;
  }
  if (entries !== undefined) out += ` ${entries}`;
  out += extra; // before message=, which takes the rest of the line
  return message === undefined ? out : `${out} message=${message}`;
}

function cases(cmd: string, spec: Spec): Case[] {
  const base = Object.fromEntries(Object.entries(spec.params).map(([k, [, v]]) => [k, v]));
  const out: Case[] = [];
  for (const [k, [kind]] of Object.entries(spec.params)) {
    for (const v of BAD[kind])
      out.push({ label: `${cmd} ${k}=${JSON.stringify(v.slice(0, 12))}`, line: line(cmd, { ...base, [k]: v }, spec.entries), param: k });
    if (k !== 'message') out.push({ label: `${cmd} ${k} twice`, line: line(cmd, base, spec.entries, ` ${k}=${quoted(base[k]!)}`), param: k });
  }
  for (const k of spec.required) {
    const { [k]: _, ...rest } = base;
    out.push({ label: `${cmd} without ${k}`, line: line(cmd, rest, spec.entries), param: k });
  }
  if (spec.entries !== undefined) for (const e of BAD.entries) out.push({ label: `${cmd} entries ${e}`, line: line(cmd, base, e) });
  out.push({ label: `${cmd} unknown parameter`, line: line(cmd, { ...base, bogus_param: '1' }, spec.entries), param: 'bogus_param' });
  out.push({ label: `${cmd} misspelt parameter`, line: line(cmd, { ...base, Topic: 'x' }, spec.entries), param: 'Topic' });
  if (spec.entries === undefined) out.push({ label: `${cmd} stray token`, line: line(cmd, base, undefined, ' stray'), param: 'stray' });
  out.push({ label: `${cmd} unterminated quote`, line: line(cmd, base, spec.entries, ' zz="open') });
  return out;
}

/** The error code of an `ERROR:` reply and its fields; fails the test for anything else. */
function refusal(reply: string, label: string): { code: string; fields: Map<string, string> } {
  expect(reply, label).toMatch(/^ERROR: /);
  const parsed = parseLine(reply.slice('ERROR: '.length));
  return { code: parsed.head, fields: parsed.params };
}

describe('bad input, table-driven', () => {
  let broker: BrokerProcess;
  let r: RawClient;
  let member = '';
  let generation = '';
  let producerId = '';
  const T = 'orders';
  const G = 'billing';
  const X = 'txn-a';

  /** What a client can see of the broker's state; timing fields of the group left out. */
  async function snapshot(): Promise<string[]> {
    const out = [await r.command('LIST'), await r.command('LIST_GROUPS'), await r.command(`DESCRIBE topic=${T}`)];
    out.push((await r.command(`GROUP_STATUS group=${G}`)).replace(/"last_heartbeat(_ms_ago)?":("[^"]*"|\d+),/g, ''));
    out.push(await r.command(`TXN_STATUS transactional_id=${X}`));
    for (let p = 0; p < 3; p++) out.push(await r.command(`FETCH_OFFSET topic=${T} group=${G} partition=${p}`));
    out.push(await r.command(`LIST_OFFSETS topic=${T}`));
    return out;
  }

  beforeAll(async () => {
    broker = await BrokerProcess.start({ args: ['--offsets-topic-partitions', '1', '--transaction-state-partitions', '1'] });
    r = await RawClient.connect(broker.port);
    expect(await r.command(`CREATE topic=${T} partitions=3`)).toMatch(/^OK /);
    for (let i = 0; i < 6; i++) expect(await r.command(`PUBLISH topic=${T} partition=${i % 3} key=k${i} message=v${i}`)).toMatch(/"status":"OK"/);
    const join = parseLine(await r.command(`JOIN_GROUP topic=${T} group=${G} member=c1 session_timeout_ms=300000 rebalance_timeout_ms=300000`));
    member = join.params.get('member')!;
    generation = join.params.get('generation')!;
    expect(await r.command(`SYNC_GROUP topic=${T} group=${G} member=${member} generation=${generation}`)).toMatch(/^OK /);
    expect(await r.command(`COMMIT_OFFSET topic=${T} group=${G} partition=0 offset=1 member=${member} generation=${generation}`)).toBe('OK');
    producerId = parseLine(await r.command(`INIT_PRODUCER_ID transactional_id=${X} transaction_timeout_ms=900000`)).params.get('producerId')!;
    expect(await r.command(`BEGIN_TXN transactional_id=${X} producerId=${producerId} epoch=0`)).toMatch(/state=open/);
    expect(await r.command(`TXN_PUBLISH transactional_id=${X} producerId=${producerId} epoch=0 topic=${T} partition=1 seqNum=1 message=t1`)).toMatch(/^OK /);
  }, 60_000);

  afterAll(async () => {
    r?.destroy();
    await broker?.dispose();
  });

  it('refuses every malformed, missing, repeated or unknown parameter of every command, and nothing changes', async () => {
    const m = member;
    const g = generation;
    const pid = producerId;
    // Valid values throughout but for the one parameter each case spoils (the group, member and
    // transaction are the live ones, so a check made after a change would show in the snapshot).
    const specs: Record<string, Spec> = {
      NEGOTIATE: { params: { version: ['int', '1'], features: ['text', 'record_extensions_v1'], require_features: ['bool', 'true'] }, required: ['version'] },
      CREATE: {
        params: {
          topic: ['name', 'fresh'],
          partitions: ['int', '2'],
          replication_factor: ['int', '1'],
          idempotent: ['bool', 'false'],
          partitioner: ['enum', 'hash_key'],
          retention_hours: ['int', '5'],
          retention_bytes: ['int', '1000'],
          cleanup_policy: ['enum', 'delete'],
          wait: ['bool', 'true'],
        },
        required: ['topic'],
      },
      ADD_PARTITIONS: { params: { topic: ['name', T], partitions: ['int', '4'], wait: ['bool', 'true'] }, required: ['topic', 'partitions'] },
      ALTER_TOPIC: { params: { topic: ['name', T], retention_hours: ['int', '100'], retention_bytes: ['int', '100000'] }, required: ['topic'] },
      DELETE: { params: { topic: ['name', T] }, required: ['topic'] },
      DESCRIBE: { params: { topic: ['name', T] }, required: ['topic'] },
      METADATA: { params: { topic: ['name', T] }, required: ['topic'] },
      LIST_OFFSETS: { params: { topic: ['name', T], partition: ['int', '0'], timestamp: ['int', '0'] }, required: ['topic'] },
      PUBLISH: {
        params: { topic: ['name', T], partition: ['int', '0'], key: ['text', 'k'], acks: ['enum', '1'], message: ['text', 'm'] },
        required: ['topic', 'message'],
      },
      CONSUME: {
        params: {
          topic: ['name', T],
          partition: ['int', '0'],
          offset: ['int', '0'],
          group: ['name', G],
          member: ['name', m],
          generation: ['int', g],
          isolation: ['enum', 'read_committed'],
          batch: ['int', '10'],
          max_bytes: ['int', '100000'],
          wait_ms: ['int', '0'],
          autoOffsetReset: ['enum', 'earliest'],
        },
        required: ['topic', 'partition', 'offset'],
      },
      FIND_COORDINATOR: { params: { group: ['any_id', G] }, required: [] },
      JOIN_GROUP: {
        params: {
          topic: ['name', T],
          group: ['name', G],
          member: ['name', m],
          generation: ['int', g],
          session_timeout_ms: ['int', '300000'],
          rebalance_timeout_ms: ['int', '300000'],
          assignor: ['enum', 'range'],
          instance: ['name', 'i1'],
          protocol: ['enum', 'server'],
        },
        required: ['topic', 'group', 'member'],
      },
      SYNC_GROUP: {
        params: { topic: ['name', T], group: ['name', G], member: ['name', m], generation: ['int', g] },
        required: ['topic', 'group', 'member', 'generation'],
      },
      HEARTBEAT: {
        params: { topic: ['name', T], group: ['name', G], member: ['name', m], generation: ['int', g], wait_ms: ['int', '0'] },
        required: ['topic', 'group', 'member', 'generation'],
      },
      LEAVE_GROUP: { params: { topic: ['name', T], group: ['name', G], member: ['name', m] }, required: ['topic', 'group', 'member'] },
      FETCH_OFFSET: { params: { topic: ['name', T], group: ['name', G], partition: ['int', '0'] }, required: ['topic', 'group', 'partition'] },
      COMMIT_OFFSET: {
        params: { topic: ['name', T], group: ['name', G], partition: ['int', '0'], offset: ['int', '2'], member: ['name', m], generation: ['int', g] },
        required: ['topic', 'group', 'partition', 'offset'],
      },
      BATCH_COMMIT: {
        params: { topic: ['name', T], group: ['name', G], member: ['name', m], generation: ['int', g] },
        entries: 'P0:2,P1:1',
        required: ['topic', 'group', 'member', 'generation'],
      },
      GROUP_STATUS: { params: { group: ['name', G] }, required: ['group'] },
      DELETE_GROUP: { params: { group: ['name', G] }, required: ['group'] },
      RESET_OFFSETS: {
        params: { group: ['name', G], topic: ['name', T], partition: ['int', '0'], to: ['enum', 'offset'], offset: ['int', '0'], dry_run: ['bool', 'false'] },
        required: ['group', 'topic', 'to'],
      },
      INIT_PRODUCER_ID: { params: { transactional_id: ['txn_id', X], transaction_timeout_ms: ['int', '900000'] }, required: [] },
      BEGIN_TXN: {
        params: { transactional_id: ['txn_id', X], producerId: ['text', pid], epoch: ['int', '0'] },
        required: ['transactional_id', 'producerId', 'epoch'],
      },
      TXN_PUBLISH: {
        params: {
          transactional_id: ['txn_id', X],
          producerId: ['text', pid],
          epoch: ['int', '0'],
          topic: ['name', T],
          partition: ['int', '1'],
          key: ['text', 'k'],
          seqNum: ['int', '2'],
          message: ['text', 'x'],
        },
        required: ['transactional_id', 'producerId', 'epoch', 'topic', 'seqNum', 'message'],
      },
      SEND_OFFSETS_TO_TXN: {
        params: {
          transactional_id: ['txn_id', X],
          producerId: ['text', pid],
          epoch: ['int', '0'],
          topic: ['name', T],
          group: ['name', G],
          member: ['name', m],
          generation: ['int', g],
        },
        entries: 'P0:3',
        required: ['transactional_id', 'producerId', 'epoch', 'topic', 'group', 'member', 'generation'],
      },
      END_TXN: {
        params: { transactional_id: ['txn_id', X], producerId: ['text', pid], epoch: ['int', '0'], result: ['enum', 'abort'] },
        required: ['transactional_id', 'producerId', 'epoch', 'result'],
      },
      TXN_STATUS: { params: { transactional_id: ['txn_id', X] }, required: ['transactional_id'] },
    };
    let before = await snapshot();
    const problems: string[] = [];
    let checked = 0;
    for (const [cmd, spec] of Object.entries(specs)) {
      for (const c of cases(cmd, spec)) {
        const reply = await r.command(c.line);
        checked++;
        if (!reply.startsWith('ERROR: ')) {
          problems.push(`${c.label}: accepted: ${reply.slice(0, 160)}`);
          continue;
        }
        const { code, fields } = refusal(reply, c.label);
        // A name that cannot be a topic's, group's or member's is not found, except by CREATE, which says why
        // it is refused (invalid_topic_name).
        const named =
          (c.param === 'topic' && (code === 'invalid_topic_name' || code === 'topic_not_found')) ||
          (c.param === 'group' && code === 'group_not_found') ||
          (c.param === 'member' && code === 'member_not_found');
        if (code !== 'invalid_parameter' && !named) problems.push(`${c.label}: ${reply.slice(0, 160)}`);
        else if (code === 'invalid_parameter' && c.param !== undefined && fields.get('param') !== c.param)
          problems.push(`${c.label}: names ${fields.get('param')}: ${reply.slice(0, 160)}`);
        else if (!code.endsWith('_not_found') && !fields.get('reason')) problems.push(`${c.label}: no reason: ${reply.slice(0, 160)}`);
      }
      // After each command's cases, not only at the end: a change is pinned to the command that made it.
      const now = await snapshot();
      if (JSON.stringify(now) !== JSON.stringify(before)) problems.push(`${cmd}: the state changed: ${JSON.stringify(now.filter((x, i) => x !== before[i]))}`);
      before = now;
    }
    expect(problems).toEqual([]);
    expect(checked).toBeGreaterThan(900);
    // Still serving: the group's member commits and a new record is appended and read back.
    expect(await r.command(`COMMIT_OFFSET topic=${T} group=${G} partition=0 offset=2 member=${member} generation=${generation}`)).toBe('OK');
    expect(await r.command(`PUBLISH topic=${T} partition=2 message=after`)).toMatch(/"offset":2/);
  }, 120_000);

  it('refuses batch frames cut at every byte or with lying counts and lengths, and the log does not change', async () => {
    const rec = (i: number) => ({
      offset: 0,
      sequence: 0,
      producerId: '',
      key: Buffer.from(`k${i}`),
      epoch: 0,
      value: Buffer.from(`value-${i}`),
      timestamp: 0,
      attributes: 0,
      headers: [],
    });
    const topic = 'frames';
    expect(await r.command(`CREATE topic=${topic} partitions=1`)).toMatch(/^OK /);
    const good = encodeBatch({ topic, partition: 0, acks: '1', idempotent: false, firstSequence: 0, lastSequence: 0, records: [rec(0), rec(1), rec(2)] });
    const offsets = () => r.command(`LIST_OFFSETS topic=${topic}`);
    const before = await offsets();
    // Header: magic(2) topic length(2) topic partition(4) acks length(1) acks(1) flags(1) sequences(16) count(4).
    const countAt = 2 + 2 + topic.length + 4 + 1 + 1 + 1 + 16;
    const firstRecord = countAt + 4;
    const keyLenAt = firstRecord + 8 + 8 + 2; // offset, sequence, producer id length (0)
    const variants: Array<[string, Buffer]> = [];
    for (let n = 2; n < good.length; n++) variants.push([`cut at ${n}`, good.subarray(0, n)]);
    for (const count of [4, 2, 0x7fffffff, -1]) {
      const b = Buffer.from(good);
      b.writeInt32BE(count, countAt);
      variants.push([`count ${count}`, b]);
    }
    for (const len of [0xffff, 3]) {
      const b = Buffer.from(good);
      b.writeUInt16BE(len, keyLenAt);
      variants.push([`key length ${len}`, b]);
    }
    const topicLen = Buffer.from(good);
    topicLen.writeUInt16BE(0xffff, 2);
    variants.push(['topic length 65535', topicLen]);
    variants.push(['a byte past the end', Buffer.concat([good, Buffer.from([0])])]);
    for (const [label, body] of variants) {
      r.send(body);
      const reply = (await r.nextFrame()).toString('utf8');
      // A cut inside the topic name names another topic (`fr`): refused as one that does not exist.
      expect(['invalid_batch', 'topic_not_found', 'invalid_topic_name'], `${label}: ${reply}`).toContain(refusal(reply, label).code);
    }
    expect(await offsets()).toBe(before);
    r.send(good);
    expect((await r.nextFrame()).toString('utf8')).toMatch(/"base_offset":0,"last_offset":2/);
  }, 60_000);
});
