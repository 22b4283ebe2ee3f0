/**
 * Losing etcd under a running 3-broker cluster (the availability rule of docs/architecture.md, "Guarantees
 * and fault model"): with etcd frozen (SIGSTOP), the brokers keep serving reads (CONSUME) and acks=1 writes
 * (PUBLISH acks=1) on the current leaders, refuse metadata changes (CREATE) with the retriable
 * metadata_unavailable within a bounded time, and recover when etcd returns (SIGCONT): CREATE works again
 * and the new topic gets leaders.
 *
 * The freeze lasts several broker lease TTLs (2 s here). etcd cannot expire a lease while it is frozen
 * itself, so nothing in the cluster state says a leader is gone; what a broker does with its own,
 * unanswered keep-alives is what this test observes. The timeline is printed either way.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'tributary-protocol/connection.js';
import { parseLine } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';
import { TestCluster } from '../helpers/cluster.js';
import { sleep } from '../helpers/util.js';

const TOPIC = 'kept';
const PARTITIONS = 3;
/** How long etcd stays frozen: three broker lease TTLs (FAST_CLUSTER_ARGS: 2 s). */
const FREEZE_MS = 6000;
/** FAST_CLUSTER_ARGS: --etcd-request-timeout-ms 2000. */
const ETCD_REQUEST_TIMEOUT_MS = 2000;

/**
 * The broker registrations and the controller key as etcd has them (its JSON gateway), with the TTL left
 * on each key's lease: what the brokers' own views can be compared with.
 */
async function etcdKeys(c: TestCluster): Promise<string> {
  const base = c.etcd.endpoints[0]!;
  const b64 = (x: string) => Buffer.from(x).toString('base64');
  const post = async (path: string, body: unknown) =>
    (await (await fetch(`${base}${path}`, { method: 'POST', body: JSON.stringify(body), signal: AbortSignal.timeout(2000) })).json()) as Record<
      string,
      unknown
    >;
  const out: string[] = [];
  for (const dir of ['brokers/', 'controller/']) {
    const from = `${c.prefix}${dir}`;
    const to = from.slice(0, -1) + String.fromCharCode(from.charCodeAt(from.length - 1) + 1);
    const res = (await post('/v3/kv/range', { key: b64(from), range_end: b64(to) })) as { kvs?: Array<{ key: string; value: string; lease?: string }> };
    for (const kv of res.kvs ?? []) {
      const ttl = kv.lease ? ((await post('/v3/lease/timetolive', { ID: kv.lease })) as { TTL?: string }).TTL : undefined;
      out.push(
        `${Buffer.from(kv.key, 'base64').toString().slice(c.prefix.length)} lease=${kv.lease ?? '-'} ttl=${ttl ?? '-'} ${Buffer.from(kv.value, 'base64').toString().slice(0, 80)}`,
      );
    }
  }
  return out.join('\n  ');
}

interface Probe {
  at: number;
  partition: number;
  op: 'publish_acks1' | 'consume';
  ok: boolean;
  code?: string;
  /** Positional tokens of the error (LEADER_IS host:port when the broker names another leader). */
  extra?: string;
  ms: number;
}

describe('etcd frozen under a running cluster', () => {
  let cluster: TestCluster;

  beforeAll(async () => {
    // info: the timeline below shows registrations, roles and controller passes.
    cluster = await TestCluster.start(3, ['--log-level', 'info']);
  }, 60_000);

  afterAll(async () => {
    await cluster?.etcd.kill('SIGCONT');
    await cluster?.dispose();
  });

  it('keeps serving reads and acks=1 writes on current leaders, refuses CREATE with metadata_unavailable, recovers on SIGCONT', async () => {
    const c = cluster;
    const admin = await c.connect(0);
    await admin.command('CREATE', { topic: TOPIC, partitions: PARTITIONS, replication_factor: 3 });
    const states = await c.waitFor('leaders and full ISRs', async () => {
      const ps = (await c.status()).partitions.filter((p) => p.topic === TOPIC);
      return ps.length === PARTITIONS && ps.every((p) => p.leader >= 0 && p.isr.length === 3) ? ps.sort((a, b) => a.partition - b.partition) : false;
    });
    const leaders = states.map((p) => p.leader);
    const leaderConns: Connection[] = [];
    for (let p = 0; p < PARTITIONS; p++) {
      const conn = await c.connect(leaders[p]!);
      leaderConns.push(conn);
      for (let i = 0; i < 10; i++) await conn.json('PUBLISH', { topic: TOPIC, partition: p, acks: 'all', message: `before-${p}-${i}` });
    }
    const createConn = await c.connect(0);

    // ---- etcd frozen ----
    await c.etcd.kill('SIGSTOP');
    const stoppedAt = Date.now();
    const probes: Probe[] = [];
    const writtenDuringFreeze = new Map<number, string[]>();
    const probe = async (partition: number, op: Probe['op']) => {
      const t0 = Date.now();
      const conn = leaderConns[partition]!;
      try {
        if (op === 'publish_acks1') {
          const value = `frozen-${partition}-${t0 - stoppedAt}`;
          await conn.json('PUBLISH', { topic: TOPIC, partition, acks: 1, message: value });
          writtenDuringFreeze.set(partition, [...(writtenDuringFreeze.get(partition) ?? []), value]);
        } else {
          const b = await conn.consume({ topic: TOPIC, partition, offset: 0, batch: 100 });
          if (b.records[0]?.value.toString() !== `before-${partition}-0`) throw new Error(`unexpected first record ${b.records[0]?.value.toString()}`);
        }
        probes.push({ at: t0 - stoppedAt, partition, op, ok: true, ms: Date.now() - t0 });
      } catch (err) {
        const e = err instanceof TributaryError ? err : undefined;
        probes.push({ at: t0 - stoppedAt, partition, op, ok: false, code: e?.code ?? String(err), extra: e?.extra.join(' '), ms: Date.now() - t0 });
      }
    };
    // A metadata change while etcd is frozen: it must fail, retriably, in bounded time.
    const creating = (async () => {
      const t0 = Date.now();
      try {
        const reply = await createConn.command('CREATE', { topic: 'fresh', partitions: 2, replication_factor: 3 });
        return { ok: true as const, reply, ms: Date.now() - t0 };
      } catch (err) {
        return { ok: false as const, err, ms: Date.now() - t0 };
      }
    })();
    // What a client that asks for routing is told meanwhile (METADATA is answered from the brokers' cache).
    const metadataSeen: string[] = [];
    while (Date.now() - stoppedAt < FREEZE_MS) {
      await Promise.all(Array.from({ length: PARTITIONS }, (_, p) => [probe(p, 'publish_acks1'), probe(p, 'consume')]).flat());
      const md = await admin.command('METADATA', { topic: TOPIC }).catch((err: unknown) => `error ${(err as Error).message}`);
      metadataSeen.push(`+${Date.now() - stoppedAt} ms ${md.includes('leaders=') ? (parseLine(md).params.get('leaders') ?? '') : md}`);
      await sleep(250);
    }
    const create = await creating;

    // ---- what the freeze did (checked after recovery too; soft so that every finding reports) ----
    const createErr = create.ok ? undefined : (create.err as TributaryError);
    // CREATE while frozen: the retriable metadata_unavailable, no later than the etcd request timeout + 1.5 s.
    expect.soft(create.ok ? `succeeded: ${create.reply}` : { code: createErr?.code, retriable: createErr?.retriable }, 'CREATE while frozen').toEqual({
      code: 'metadata_unavailable',
      retriable: true,
    });
    expect.soft(create.ms, 'CREATE while frozen: ms to fail').toBeLessThan(ETCD_REQUEST_TIMEOUT_MS + 1500);
    // Every read and every acks=1 write on the current leaders was served.
    expect(probes.length).toBeGreaterThan(PARTITIONS * 2 * 5);
    expect
      .soft(
        probes.filter((p) => !p.ok).map((p) => `+${p.at} ms ${p.op} partition ${p.partition}: ${p.code}`),
        'reads and acks=1 writes refused while etcd was frozen',
      )
      .toEqual([]);

    // ---- etcd back ----
    await c.etcd.kill('SIGCONT');
    const resumedAt = Date.now();
    const timeline: string[] = [];
    try {
      // A CREATE that timed out may still be applied now (etcd kept the request): created=false or
      // topic_already_exists count as success for the retry.
      const recreated = await c.waitFor(
        'CREATE to succeed after SIGCONT',
        async () => {
          try {
            return (
              parseLine(await (await c.connect()).command('CREATE', { topic: 'fresh', partitions: 2, replication_factor: 3 })).params.get('created') ?? 'true'
            );
          } catch (err) {
            if (err instanceof TributaryError && err.code === 'topic_already_exists') return 'exists';
            throw err;
          }
        },
        15_000,
      );
      timeline.push(`CREATE ok (created=${recreated}) after ${Date.now() - resumedAt} ms`);
      expect(['true', 'false', 'exists']).toContain(recreated);
      // Every partition of the new topic gets a live leader, which takes an acks=all write (retried while
      // the leader is still taking up its role).
      const freshAck = await c.waitFor(
        'the new topic to get leaders that take writes',
        async () => {
          const st = await c.status();
          const live = new Set(st.brokers.map((b) => b.id));
          const ps = st.partitions.filter((p) => p.topic === 'fresh');
          if (ps.length !== 2 || !ps.every((p) => p.leader >= 0 && live.has(p.leader))) return false;
          const conn = await c.connect(ps.find((p) => p.partition === 0)!.leader);
          try {
            return await conn.json<{ offset: number }>('PUBLISH', { topic: 'fresh', partition: 0, acks: 'all', message: 'after' });
          } catch (err) {
            // Only refusals that come before any append (so the offset below stays 0).
            if (err instanceof TributaryError && ['NOT_LEADER', 'NOT_ENOUGH_REPLICAS', 'FENCED_LEADER_EPOCH'].includes(err.code)) return false;
            throw err;
          } finally {
            await conn.close().catch(() => {});
          }
        },
        15_000,
      );
      expect(freshAck.offset).toBe(0);
      timeline.push(`the new topic led and written (acks=all) after ${Date.now() - resumedAt} ms`);
      // The old topic serves again on its (possibly new) leaders, and keeps its acks=all records.
      const recovered = await c.waitFor(
        'reads and acks=1 writes on every partition after SIGCONT',
        async () => {
          const out: string[][] = [];
          for (let p = 0; p < PARTITIONS; p++) {
            const { id } = await c.leaderOf(TOPIC, p);
            if (id < 0) return false;
            const conn = await c.connect(id);
            try {
              await conn.json('PUBLISH', { topic: TOPIC, partition: p, acks: 1, message: `after-${p}` });
              const b = await conn.consume({ topic: TOPIC, partition: p, offset: 0, batch: 1000 });
              out.push(b.records.map((r) => r.value.toString()));
            } catch (err) {
              if (err instanceof TributaryError && err.retriable) return false;
              throw err;
            } finally {
              await conn.close().catch(() => {});
            }
          }
          return out;
        },
        15_000,
      );
      timeline.push(`reads and acks=1 writes on every partition after ${Date.now() - resumedAt} ms`);
      for (let p = 0; p < PARTITIONS; p++) expect(recovered[p]!.slice(0, 10)).toEqual(Array.from({ length: 10 }, (_, i) => `before-${p}-${i}`));
      // The acks=1 writes acknowledged while etcd was frozen are still there.
      for (let p = 0; p < PARTITIONS; p++) {
        const lost = (writtenDuringFreeze.get(p) ?? []).filter((v) => !recovered[p]!.includes(v));
        expect.soft(lost, `partition ${p}: acks=1 writes acknowledged while etcd was frozen and gone after SIGCONT`).toEqual([]);
      }
    } finally {
      // ---- the timeline, printed whatever happened ----
      const summary = (op: Probe['op']) => {
        const ps = probes.filter((p) => p.op === op);
        const failed = ps.filter((p) => !p.ok);
        return {
          probes: ps.length,
          failed: failed.length,
          first_failure_ms: failed.length > 0 ? Math.min(...failed.map((p) => p.at)) : null,
          last_success_ms: ps.filter((p) => p.ok).reduce((m, p) => Math.max(m, p.at), -1),
          codes: [...new Set(failed.map((p) => p.code))],
          slowest_ms: Math.max(...ps.map((p) => p.ms)),
        };
      };
      const after = await c.status().catch(() => undefined);
      const keys = await etcdKeys(c).catch((err: unknown) => `(etcd not readable: ${String(err)})`);
      console.log(
        `etcd frozen for ${resumedAt - stoppedAt} ms:\n` +
          `  PUBLISH acks=1 on the leaders: ${JSON.stringify(summary('publish_acks1'))}\n` +
          `  CONSUME on the leaders:        ${JSON.stringify(summary('consume'))}\n` +
          `  NOT_LEADER redirects while frozen: ${JSON.stringify([...new Set(probes.filter((p) => !p.ok).map((p) => p.extra || '(none)'))])}\n` +
          `  METADATA leaders while frozen: first ${metadataSeen[0]}, last ${metadataSeen.at(-1)} (addresses: ${c.addresses.join(',')})\n` +
          `  CREATE: ${create.ok ? `succeeded (${create.reply})` : `${createErr?.code} retryable=${createErr?.retriable}`} after ${create.ms} ms\n` +
          `after SIGCONT: ${timeline.join('; ') || 'nothing recovered'}\n` +
          `  brokers registered ${JSON.stringify(after?.brokers.map((b) => b.id))}, leaders before ${JSON.stringify(leaders)}, ` +
          `after ${JSON.stringify(after?.partitions.filter((p) => p.topic === TOPIC).map((p) => p.leader))}, ` +
          `epochs after ${JSON.stringify(after?.partitions.filter((p) => p.topic === TOPIC).map((p) => p.leader_epoch))}\n` +
          `  etcd now:\n  ${keys}`,
      );
      // What the brokers logged from the freeze on (repeats collapsed), to see who lost and regained what.
      for (const [i, b] of c.brokers.entries()) {
        const lines: Array<{ text: string; from: number; to: number; n: number }> = [];
        for (const l of b.stderr.split('\n')) {
          if (!l.startsWith('{') || /replica fetch failed/.test(l)) continue;
          let j: {
            time: number;
            msg: string;
            reason?: string;
            err?: { message?: string };
            topic?: string;
            partition?: number;
            role?: string;
            leaderEpoch?: number;
          };
          try {
            j = JSON.parse(l);
          } catch {
            continue;
          }
          if (j.time < stoppedAt - 500) continue;
          const what = j.role ? ` ${j.topic}[${j.partition}] ${j.role} epoch ${j.leaderEpoch}` : '';
          const text = `${j.msg}${what}${j.reason ? ` (${j.reason})` : ''}${j.err?.message ? `: ${j.err.message.slice(0, 140)}` : ''}`;
          const prev = lines.at(-1);
          if (prev && prev.text === text) {
            prev.n++;
            prev.to = j.time - stoppedAt;
          } else lines.push({ text, from: j.time - stoppedAt, to: j.time - stoppedAt, n: 1 });
        }
        // Registrations, leases, the controller and failures in full; role changes only counted.
        const key = (x: { text: string }) => /regist|lease|controller|fail|error|unavailable/i.test(x.text);
        const shown = lines.filter(key).map((x) => `  +${x.from} ms${x.n > 1 ? ` (x${x.n} until +${x.to} ms)` : ''} ${x.text}`);
        const others = lines.filter((x) => !key(x));
        const last = others.at(-1);
        shown.push(
          `  ${others.reduce((n, x) => n + x.n, 0)} other lines (roles, leader moves, ISR changes), the last at +${last?.to ?? '-'} ms: ${last?.text ?? '-'}`,
        );
        console.log(`broker ${i} log from the freeze on:\n${shown.slice(-25).join('\n')}`);
      }
    }
  }, 60_000);
});
