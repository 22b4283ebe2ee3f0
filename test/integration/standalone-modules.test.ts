/**
 * A standalone broker loads neither the etcd client (with gRPC and protobuf under it) nor PostgreSQL's
 * (src/common/optional-deps.ts): imported at start they were a quarter of its idle heap (24.0 MB after a full
 * collection, 17.8 without them), which every full collection marks. The packages a real broker process loaded, from a probe preloaded into it
 * (test/helpers/module-probe.cjs), after it took writes, reads and a group's commits.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseLine } from 'tributary-protocol/command.js';
import { BrokerProcess, ROOT } from '../helpers/launcher.js';
import { until } from '../helpers/util.js';

const PROBE = path.join(ROOT, 'test', 'helpers', 'module-probe.cjs');

describe('a standalone broker', () => {
  let broker: BrokerProcess;

  beforeAll(async () => {
    broker = await BrokerProcess.start({ env: { NODE_OPTIONS: `--require ${PROBE}` } });
  });
  afterAll(async () => {
    await broker?.stop();
  });

  async function loadedPackages(): Promise<string[]> {
    broker.proc!.kill('SIGUSR2');
    let m: RegExpExecArray | null = null;
    await until(() => (m = /^packages (.*)$/m.exec(broker.stdout)) !== null, 10_000, 'module probe');
    return JSON.parse(m![1]!) as string[];
  }

  it('loads neither etcd3 nor pg, nor what they depend on', async () => {
    const c = await broker.connect();
    await c.command('CREATE', { topic: 't', partitions: 2 });
    for (let i = 0; i < 3; i++) await c.command('PUBLISH', { topic: 't', partition: 0, message: `m${i}` });
    expect((await c.consume({ topic: 't', partition: 0, offset: 0 })).records).toHaveLength(3);
    await c.command('RESET_OFFSETS', { group: 'g', topic: 't', partition: 0, to: 'offset', offset: 2 });
    expect(parseLine(await c.command('FETCH_OFFSET', { group: 'g', topic: 't', partition: 0 })).params.get('offset')).toBe('2');
    await broker.health('/metrics');

    const loaded = await loadedPackages();
    // The probe sees the CommonJS packages the broker does use.
    expect(loaded).toEqual(expect.arrayContaining(['prom-client', 'pino']));
    expect(loaded.filter((p) => /^(etcd3|pg|pg-.*|@grpc\/.*|protobufjs)$/.test(p))).toEqual([]);
  });
});
