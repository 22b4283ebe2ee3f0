/**
 * lazyChild: a per-partition logger made on first use logs exactly what `parent.child(bindings)` would,
 * nests, honours the level, and makes no pino child for levels that are filtered out.
 */
import { pino } from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { lazyChild } from 'tributary-broker/common/logger.js';

function capture(level: string) {
  const lines: Array<Record<string, unknown>> = [];
  const logger = pino({ level, base: undefined, timestamp: false }, { write: (s: string) => lines.push(JSON.parse(s)) });
  return { logger, lines };
}

describe('lazyChild', () => {
  it('logs the lines a pino child would, nested bindings included', () => {
    const eager = capture('info');
    const lazy = capture('info');
    const write = (root: ReturnType<typeof capture>['logger'], make: (l: typeof root, b: Record<string, unknown>) => typeof root) => {
      const partition = make(root, { topic: 't', partition: 3 });
      const log = partition.child({ component: 'partition-log', dir: '/d/t/3' });
      partition.info({ leo: 5 }, 'opened');
      log.warn('slow fsync %d ms', 12);
      log.error(new Error('boom'), 'failed');
      log.debug('not shown');
      partition.trace('not shown');
    };
    write(eager.logger, (l, b) => l.child(b));
    write(lazy.logger, lazyChild);
    const strip = (xs: Array<Record<string, unknown>>) => xs.map(({ err, ...rest }) => ({ ...rest, err: (err as { message?: string } | undefined)?.message }));
    expect(strip(lazy.lines)).toEqual(strip(eager.lines));
    expect(lazy.lines.map((l) => l.msg)).toEqual(['opened', 'slow fsync 12 ms', 'failed']);
    expect(lazy.lines[1]).toMatchObject({ topic: 't', partition: 3, component: 'partition-log', dir: '/d/t/3', level: 40 });
  });

  it('makes no pino child until a line passes the level, and follows level changes of its root', () => {
    const { logger, lines } = capture('warn');
    const childSpy = vi.spyOn(logger, 'child');
    const log = lazyChild(logger, { partition: 1 }).child({ component: 'x' });
    log.debug('dropped');
    log.info('dropped');
    expect(log.isLevelEnabled('info')).toBe(false);
    expect(childSpy).not.toHaveBeenCalled();
    logger.level = 'info';
    expect(log.level).toBe('info');
    log.info('kept');
    // Both levels made now (a pino child inherits `child` from its root, so the spy sees the nested one too).
    expect(childSpy).toHaveBeenCalledTimes(2);
    log.info('kept again');
    expect(childSpy).toHaveBeenCalledTimes(2);
    expect(lines).toEqual([expect.objectContaining({ msg: 'kept', partition: 1, component: 'x' }), expect.objectContaining({ msg: 'kept again' })]);
  });
});
