// A broker's cluster presence in its own process, so tests can SIGSTOP or kill -9 the holder of a lease.
//
//   node cluster-member.mjs '<json config>'
//
// config: { endpoints, prefix, brokerId, leaseTtlSeconds, requestTimeoutMs?, register?: boolean, campaign?: boolean }
// It imports the compiled cluster modules (packages/broker/dist/cluster/*.js) and prints one JSON line per event:
//   {type:'registered', brokerId}                after its registration is in etcd
//   {type:'controller', state}                   every ControllerElection 'change' (state: ControllerState)
//   {type:'error', message}                      start-up failed; the process exits with 1
//   {type:'closed'}                              after SIGTERM → close() finished
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const load = (name) => import(pathToFileURL(path.join(root, 'packages', 'broker', 'dist', 'cluster', `${name}.js`)).href);
const { BrokerRegistry } = await load('broker-registry');
const { ControllerElection } = await load('controller-election');

const cfg = JSON.parse(process.argv[2] ?? '{}');
const out = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const etcd = { endpoints: cfg.endpoints, requestTimeoutMs: cfg.requestTimeoutMs ?? 2_000 };
const closers = [];

try {
  if (cfg.register) {
    const registry = new BrokerRegistry({ etcd, prefix: cfg.prefix, leaseTtlSeconds: cfg.leaseTtlSeconds });
    closers.push(() => registry.close());
    await registry.open();
    await registry.register({ id: cfg.brokerId, host: '127.0.0.1', port: 9000 + cfg.brokerId, advertisedAddress: `127.0.0.1:${9000 + cfg.brokerId}` });
    out({ type: 'registered', brokerId: cfg.brokerId });
  }
  if (cfg.campaign) {
    const election = new ControllerElection({ etcd, prefix: cfg.prefix, brokerId: cfg.brokerId, leaseTtlSeconds: cfg.leaseTtlSeconds });
    closers.push(() => election.close());
    election.events.on('change', (state) => out({ type: 'controller', state }));
    await election.start();
    out({ type: 'controller', state: election.state });
  }
} catch (err) {
  out({ type: 'error', message: String(err?.message ?? err) });
  process.exit(1);
}

process.once('SIGTERM', async () => {
  for (const close of closers.reverse()) await close().catch(() => {});
  out({ type: 'closed' });
  process.exit(0);
});
