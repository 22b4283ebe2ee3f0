// A tiny consumer-group member for test/fault/group-zombie.test.ts, run as its own process so the test
// can SIGSTOP/SIGCONT it. It joins (session_timeout_ms=1000), syncs, then every 200 ms heartbeats and
// commits its partitions; on REBALANCE_IN_PROGRESS it rejoins and syncs. Once fenced (any other error on
// a heartbeat) it tries to commit its old partitions and to rejoin with its old id, reports, and exits.
// Every step is one JSON line on stdout: {ev, ok, code?, sentAt, at, ...}.
//
// usage: node group-zombie-member.mjs <port> <topic> <group> <maxOffset>
import { Connection } from '../../packages/protocol/dist/connection.js';

const [port, topic, group, maxOffsetArg] = process.argv.slice(2);
const maxOffset = Number(maxOffsetArg);
const out = (o) => process.stdout.write(`${JSON.stringify({ ...o, at: Date.now() })}\n`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const fields = (reply) => Object.fromEntries(reply.split(' ').slice(1).map((kv) => kv.split('=')));
const parts = (v) => (v === '[]' ? [] : v.slice(1, -1).split(',').map(Number));

const conn = await Connection.connect({ host: '127.0.0.1', port: Number(port) });
let member = 'zombie';
let generation = 0;
let owned = [];

async function op(ev, name, params, extra = {}, positional = []) {
  const sentAt = Date.now();
  try {
    const reply = await conn.command(name, params, positional);
    const r = { ev, ok: true, sentAt, ...extra };
    out(r);
    return { ok: true, reply };
  } catch (err) {
    out({ ev, ok: false, code: err.code, sentAt, ...extra });
    return { ok: false, code: err.code };
  }
}

async function joinAndSync(first) {
  const j = await op('join', 'JOIN_GROUP', first ? { topic, group, member, session_timeout_ms: 1000 } : { topic, group, member, generation });
  if (!j.ok) return false;
  ({ member } = fields(j.reply));
  generation = Number(fields(j.reply).generation);
  const s = await op('sync', 'SYNC_GROUP', { topic, group, member, generation });
  if (!s.ok) return s.code === 'REBALANCE_IN_PROGRESS' ? joinAndSync(false) : false;
  owned = parts(fields(s.reply).assignments);
  out({ ev: 'synced', ok: true, member, generation, owned, sentAt: Date.now() });
  return true;
}

if (!(await joinAndSync(true))) process.exit(2);
let n = 0;
for (;;) {
  await sleep(200);
  n++;
  const hb = await op('heartbeat', 'HEARTBEAT', { topic, group, member, generation });
  if (!hb.ok && hb.code === 'REBALANCE_IN_PROGRESS') {
    if (!(await joinAndSync(false))) break;
    continue;
  }
  if (!hb.ok) break;
  const offset = Math.min(n, maxOffset);
  for (const p of owned) await op('commit', 'COMMIT_OFFSET', { topic, group, partition: p, offset, member, generation }, { partition: p, offset });
}
// Fenced: what a zombie would do next with its stale view of the world.
for (const p of owned) await op('commit', 'COMMIT_OFFSET', { topic, group, partition: p, offset: maxOffset, member, generation }, { partition: p, offset: maxOffset });
if (owned.length > 0) await op('batch', 'BATCH_COMMIT', { topic, group, member, generation }, { owned }, [owned.map((p) => `P${p}:${maxOffset}`).join(',')]);
await op('rejoin', 'JOIN_GROUP', { topic, group, member, generation });
out({ ev: 'exit', ok: true, member, generation, owned, sentAt: Date.now() });
await conn.close();
process.exit(0);
