import { spawn } from 'node:child_process';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { socketOwner, TcpProxy } from '../../chaos/proxy.js';

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function echoServer(): Promise<net.Server> {
  const srv = net.createServer((s) => s.pipe(s));
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  return srv;
}

function portOf(srv: net.Server): number {
  const a = srv.address();
  return typeof a === 'object' && a ? a.port : 0;
}

async function connect(port: number): Promise<{ socket: net.Socket; received: () => string }> {
  const socket = net.connect({ host: '127.0.0.1', port });
  let got = '';
  socket.on('data', (d) => (got += d.toString()));
  socket.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve());
    socket.once('error', reject);
  });
  return { socket, received: () => got };
}

async function until(fn: () => boolean, ms = 2000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!fn()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await sleep(10);
  }
}

describe('chaos TCP proxy', () => {
  const cleanup: Array<() => unknown> = [];
  afterEach(async () => {
    for (const f of cleanup.splice(0).reverse()) await f();
  });

  it('forwards, black-holes both directions while keeping the sockets open, and heals', async () => {
    const srv = await echoServer();
    cleanup.push(() => new Promise((r) => srv.close(r)));
    const proxy = await TcpProxy.start({ name: 't' });
    cleanup.push(() => proxy.close());
    proxy.setUpstream(portOf(srv));
    const c = await connect(proxy.port);
    cleanup.push(() => c.socket.destroy());
    c.socket.write('one');
    await until(() => c.received() === 'one');

    proxy.blackhole();
    c.socket.write('two');
    await sleep(200);
    expect(c.received()).toBe('one');
    expect(c.socket.destroyed).toBe(false);
    // a new connection during the partition is held too
    const late = await connect(proxy.port);
    cleanup.push(() => late.socket.destroy());
    late.socket.write('late');
    await sleep(100);
    expect(late.received()).toBe('');

    proxy.heal();
    await until(() => c.received() === 'onetwo');
    await until(() => late.received() === 'late');
  });

  it('holds a close seen during the partition until it heals', async () => {
    let serverSide: net.Socket | undefined;
    const srv = net.createServer((s) => {
      serverSide = s;
      s.on('error', () => {});
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
    cleanup.push(() => new Promise((r) => srv.close(r)));
    const proxy = await TcpProxy.start({ name: 't' });
    cleanup.push(() => proxy.close());
    proxy.setUpstream(portOf(srv));
    const c = await connect(proxy.port);
    await until(() => serverSide !== undefined);
    let closed = false;
    serverSide!.on('close', () => (closed = true));
    proxy.blackhole();
    c.socket.destroy();
    await sleep(200);
    expect(closed).toBe(false);
    proxy.heal();
    await until(() => closed);
  });

  it('refuses connections while down and listens on the same port when up again', async () => {
    const srv = await echoServer();
    cleanup.push(() => new Promise((r) => srv.close(r)));
    const proxy = await TcpProxy.start({ name: 't' });
    cleanup.push(() => proxy.close());
    const port = proxy.port;
    await proxy.down();
    await expect(connect(port)).rejects.toThrow(/ECONNREFUSED/);
    await proxy.up();
    expect(proxy.port).toBe(port);
    // held until the upstream is known
    const c = await connect(port);
    cleanup.push(() => c.socket.destroy());
    c.socket.write('x');
    await sleep(100);
    expect(c.received()).toBe('');
    proxy.setUpstream(portOf(srv));
    await until(() => c.received() === 'x');
  });

  it('finds the process that opened a connection and cuts only its connections', async () => {
    const srv = await echoServer();
    cleanup.push(() => new Promise((r) => srv.close(r)));
    const pids = new Map<number, string>();
    const proxy = await TcpProxy.start({ name: 't', classify: (remote, local) => socketOwner(remote, local, pids) });
    cleanup.push(() => proxy.close());
    proxy.setUpstream(portOf(srv));
    // a child that connects through the proxy and echoes what comes back on stdout
    const child = spawn(
      process.execPath,
      [
        '-e',
        `const s = require('net').connect(${proxy.port}, '127.0.0.1'); s.on('data', (d) => process.stdout.write(d)); setInterval(() => s.write('.'), 50); setTimeout(() => process.exit(0), 20000);`,
      ],
      { stdio: ['ignore', 'pipe', 'ignore'] },
    );
    cleanup.push(() => child.kill('SIGKILL'));
    pids.set(child.pid!, 'child');
    let childGot = 0;
    child.stdout!.on('data', (d: Buffer) => (childGot += d.length));
    await until(() => childGot > 0, 5000);
    const mine = await connect(proxy.port);
    cleanup.push(() => mine.socket.destroy());
    proxy.blackhole((origin) => origin === 'child');
    await sleep(100);
    const frozen = childGot;
    mine.socket.write('still');
    await until(() => mine.received() === 'still');
    await sleep(200);
    expect(childGot).toBe(frozen);
    proxy.heal();
    await until(() => childGot > frozen, 3000);
  });
});
