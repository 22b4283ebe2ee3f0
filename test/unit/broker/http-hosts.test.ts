/**
 * The Host names the admin API and console answer to (docs/http-api.md, "DNS rebinding"): IP addresses,
 * localhost, the broker's own host and advertised host, and httpAllowedHosts; nothing else.
 */
import { expect, it } from 'vitest';
import { allowedHostNames, hostAllowed } from 'tributary-broker/broker/http-server.js';

it('allows IP literals, localhost and the configured names, with or without a port, and refuses others', () => {
  const names = allowedHostNames({ host: '0.0.0.0', advertisedHost: 'Broker-1.internal', httpAllowedHosts: 'console.example, ops.example' });
  for (const h of [
    '10.0.0.5:9080',
    '[fe80::1]:9080',
    '[::1]',
    'localhost',
    'LOCALHOST:9080',
    'broker-1.internal:9080',
    'console.example',
    'ops.example.',
    undefined,
  ]) {
    expect(hostAllowed(h, names), String(h)).toBe(true);
  }
  for (const h of ['attacker.example', 'attacker.example:9080', 'console.example.attacker.example', 'localhost.attacker.example', '']) {
    expect(hostAllowed(h, names), h).toBe(false);
  }
});
