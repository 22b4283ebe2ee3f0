import { describe, expect, it } from 'vitest';
import { intArg, parseAddress, toCliError } from 'tributary-broker/cli/client-util.js';
import { formatRecord, parseListOffsets, parseMetadata } from 'tributary-broker/cli/consume-command.js';
import { CliError, formatBrokerError } from 'tributary-broker/cli/errors.js';
import { ProgressBar } from 'tributary-broker/cli/progress.js';
import type { BatchRecord } from 'tributary-protocol/batch.js';
import { parseError } from 'tributary-protocol/command.js';
import { TributaryError } from 'tributary-protocol/errors.js';

const record = (over: Partial<BatchRecord> = {}): BatchRecord => ({
  offset: 7,
  sequence: 0,
  producerId: '',
  key: null,
  epoch: -1,
  value: Buffer.from('hello'),
  timestamp: 1700000000000,
  attributes: 0,
  headers: [],
  ...over,
});

describe('cli helpers', () => {
  it('parses host:port and [v6]:port', () => {
    expect(parseAddress('127.0.0.1:9000')).toEqual({ host: '127.0.0.1', port: 9000 });
    expect(parseAddress('[::1]:9001')).toEqual({ host: '::1', port: 9001 });
    for (const bad of ['localhost', ':9000', 'h:0', 'h:70000', 'h:9x', '::1:9000']) expect(parseAddress(bad)).toBeUndefined();
  });

  it('parses integer arguments strictly', () => {
    const p = intArg(0);
    expect(p('12')).toBe(12);
    for (const bad of ['-1', '1e3', '0x1', '1.5', 'abc']) expect(() => p(bad)).toThrow();
  });

  it('formats broker errors as error: <code> <fields>', () => {
    expect(formatBrokerError(parseError('ERROR: topic_not_found class=not_found retryable=false topic=orders'))).toBe(
      'error: topic_not_found topic=orders',
    );
    expect(formatBrokerError(parseError('ERROR: NOT_LEADER LEADER_IS 10.0.0.2:9000 class=routing retryable=true'))).toBe(
      'error: NOT_LEADER LEADER_IS 10.0.0.2:9000',
    );
    expect(formatBrokerError(parseError('ERROR: invalid_parameter param=partitions reason="must be >= 1"'))).toBe(
      'error: invalid_parameter param=partitions reason="must be >= 1"',
    );
  });

  it('tells a lost connection from a broker error', () => {
    const addr = { host: '127.0.0.1', port: 9000 };
    const lost = toCliError(new TributaryError('connection_lost', { reason: 'connection closed' }, 'connection closed'), addr);
    expect(lost).toBeInstanceOf(CliError);
    expect((lost as CliError).message).toBe('error: lost connection to broker at 127.0.0.1:9000');
    const fromBroker = toCliError(parseError('ERROR: request_timeout class=availability retryable=true op=append'), addr);
    expect((fromBroker as CliError).message).toBe('error: request_timeout op=append');
  });

  it('parses METADATA and LIST_OFFSETS replies', () => {
    expect(parseMetadata('OK topic=t partitions=2 leaders=127.0.0.1:9000,127.0.0.1:9001 epochs=0,0')).toEqual({
      partitions: 2,
      leaders: [
        { host: '127.0.0.1', port: 9000 },
        { host: '127.0.0.1', port: 9001 },
      ],
    });
    const offs = parseListOffsets('OK topic=t partitions=2 offsets=P0:earliest=0:latest=5:leo=6:hwm=6,P1:earliest=3:latest=3:leo=3:hwm=3');
    expect(offs.get(0)).toEqual({ earliest: 0, latest: 5, leo: 6, hwm: 6 });
    expect(offs.get(1)).toEqual({ earliest: 3, latest: 3, leo: 3, hwm: 3 });
  });

  it('formats records as lines or JSON', () => {
    expect(formatRecord('t', 1, record(), 'lines').toString()).toBe('hello\n');
    const json = JSON.parse(
      formatRecord('t', 1, record({ key: Buffer.from('k'), headers: [{ key: 'h', value: Buffer.from('v') }] }), 'json').toString(),
    );
    expect(json).toEqual({
      topic: 't',
      partition: 1,
      offset: 7,
      timestamp: 1700000000000,
      key: 'k',
      value: 'hello',
      headers: [{ key: 'h', value: 'v' }],
    });
    expect(Object.keys(json)).toEqual(['topic', 'partition', 'offset', 'timestamp', 'key', 'value', 'headers']);
    expect(JSON.parse(formatRecord('t', 0, record(), 'json').toString()).key).toBeNull();
  });

  it('draws a progress bar only on a TTY', () => {
    const out: string[] = [];
    const tty = { isTTY: true, columns: 80, write: (s: string) => out.push(s) > 0 };
    const bar = new ProgressBar(2048, tty, 0);
    bar.update(1024, 10);
    expect(out[0]).toContain('50%');
    expect(out[0]).toContain('1.0 KiB/2.0 KiB 10 records');
    bar.finish();
    expect(out[1]).toBe('\r\x1b[K');
    const piped: string[] = [];
    const quiet = new ProgressBar(10, { isTTY: false, write: (s: string) => piped.push(s) > 0 }, 0);
    quiet.update(5, 1);
    quiet.finish();
    expect(piped).toEqual([]);
  });
});
