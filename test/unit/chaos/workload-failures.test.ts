import { describe, expect, it } from 'vitest';
import type { Op } from '../../chaos/history.js';
import { workloadFailures } from '../../chaos/run.js';

const exit = (process: string, detail: string): Op => ({ f: 'process', process, event: 'exit', time: 1, detail });

describe('a chaos run fails without anomalies too', () => {
  it('when the consumers delivered nothing', () => {
    expect(workloadFailures({ stats: { deliveries: 0 } } as never, [])).toEqual(['the consumers delivered nothing: no read-side property was checked']);
  });

  it('when a worker exited with an error, but not when the nemesis killed it or the run stopped it', () => {
    const ops = [exit('c0.1', 'code null signal SIGKILL'), exit('c1.1', 'code 0 signal null'), exit('c2.1', 'code 2 signal null'), exit('c2.2', 'code 1 signal null')];
    expect(workloadFailures({ stats: { deliveries: 10 } } as never, ops)).toEqual(['2 worker process(es) exited with an error (c2.1, c2.2); see consumers.log']);
    expect(workloadFailures({ stats: { deliveries: 10 } } as never, ops.slice(0, 2))).toEqual([]);
  });
});
