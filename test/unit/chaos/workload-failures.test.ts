import { describe, expect, it } from 'vitest';
import type { Op } from '../../chaos/history.js';
import { workloadFailures } from '../../chaos/run.js';

const exit = (process: string, detail: string): Op => ({ f: 'process', process, event: 'exit', time: 1, detail });
const kafkaCommit = (outcome: 'ok' | 'info' = 'ok'): Op => ({ f: 'txn', process: 'ktx0.1', txn: 'ktx0-0', action: 'commit', begin: 0, start: 1, end: 2, outcome, values: ['ktx0-0-0'] });

describe('a chaos run fails without anomalies too', () => {
  it('when the consumers delivered nothing', () => {
    expect(workloadFailures({ stats: { deliveries: 0 } } as never, [kafkaCommit()])).toEqual(['the consumers delivered nothing: no read-side property was checked']);
  });

  it('when the kafkajs producer committed no transaction', () => {
    const none = ['the kafkajs producer committed no transaction: the Kafka port was not checked'];
    expect(workloadFailures({ stats: { deliveries: 10 } } as never, [])).toEqual(none);
    expect(workloadFailures({ stats: { deliveries: 10 } } as never, [kafkaCommit('info')])).toEqual(none);
    expect(workloadFailures({ stats: { deliveries: 10 } } as never, [kafkaCommit('info'), kafkaCommit()])).toEqual([]);
  });

  it('when a worker exited with an error, but not when the nemesis killed it or the run stopped it', () => {
    const ops = [kafkaCommit(), exit('c0.1', 'code null signal SIGKILL'), exit('c1.1', 'code 0 signal null'), exit('c2.1', 'code 2 signal null'), exit('c2.2', 'code 1 signal null')];
    expect(workloadFailures({ stats: { deliveries: 10 } } as never, ops)).toEqual(['2 worker process(es) exited with an error (c2.1, c2.2); see consumers.log']);
    expect(workloadFailures({ stats: { deliveries: 10 } } as never, ops.slice(0, 3))).toEqual([]);
  });
});
