/**
 * librdkafka (kcat) against a throwaway in-process responder built on these codecs: metadata, produce,
 * transactional produce, consume and group-consume runs must each print what they were asked to, so
 * librdkafka read our responses, and every distinct request (API, version) it sent must decode and
 * re-encode to the same bytes. With CAPTURE_LIBRDKAFKA=1 the requests are also saved to
 * fixtures/librdkafka.json, which librdkafka-fixtures.test.ts checks with no kcat at all. kcat comes with
 * the test command (scripts/test.mjs installs the Debian package when it is missing).
 *
 *   CAPTURE_LIBRDKAFKA=1 npx vitest run test/unit/kafka/librdkafka-capture.test.ts
 */
import { execFile, execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { advertisedVersions, type KafkaApi } from 'tributary-broker/kafka/protocol/apis.js';
import { decodeAssignment, decodeSubscription } from 'tributary-broker/kafka/protocol/consumer-protocol.js';
import { KafkaFrameSplitter } from 'tributary-broker/kafka/protocol/frame.js';
import { decodeRequest, encodeRequest, encodeResponse } from 'tributary-broker/kafka/protocol/headers.js';
import type { KafkaStruct } from 'tributary-broker/kafka/protocol/schema.js';

type S = KafkaStruct & Record<string, unknown>;
type Captured = { api: string; apiKey: number; apiVersion: number; frame: string };

const TOPIC = 'cap';

function responder(port: () => number, captured: Map<string, Captured>, payloads: { subscriptions: unknown[]; assignments: unknown[] }) {
  const log: Buffer[] = [];
  let memberSeq = 0;
  let assignment: Buffer = Buffer.alloc(0);
  const handle = (api: KafkaApi, v: number, b: S): S => {
    const node = { nodeId: 1, host: '127.0.0.1', port: port() };
    switch (api.name) {
      case 'ApiVersions':
        return { errorCode: 0, apiKeys: advertisedVersions(), throttleTimeMs: 0 };
      case 'Metadata':
        return {
          brokers: [{ ...node, rack: null }],
          clusterId: 'capture',
          controllerId: 1,
          topics: [
            {
              errorCode: 0,
              name: TOPIC,
              isInternal: false,
              partitions: [{ errorCode: 0, partitionIndex: 0, leaderId: 1, leaderEpoch: 0, replicaNodes: [1], isrNodes: [1], offlineReplicas: [] }],
            },
          ],
        };
      case 'Produce': {
        const parts = (b.topicData as S[]).map((t) => ({
          name: t.name,
          partitionResponses: (t.partitionData as S[]).map((p) => {
            const baseOffset = log.length;
            if (p.records) log.push(Buffer.from(p.records as Buffer));
            return { index: p.index, errorCode: 0, baseOffset, logAppendTimeMs: -1, logStartOffset: 0 };
          }),
        }));
        return { responses: parts, throttleTimeMs: 0 };
      }
      case 'ListOffsets':
        return {
          topics: (b.topics as S[]).map((t) => ({
            name: t.name,
            partitions: (t.partitions as S[]).map((p) => ({
              partitionIndex: p.partitionIndex,
              errorCode: 0,
              timestamp: -1,
              offset: p.timestamp === -2n ? 0 : log.length,
              leaderEpoch: 0,
              oldStyleOffsets: [],
            })),
          })),
        };
      case 'Fetch':
        // Each produced batch was written at its index as base offset by librdkafka (0 on the wire): one batch per offset.
        return {
          responses: (b.topics as S[]).map((t) => ({
            topic: t.topic,
            partitions: (t.partitions as S[]).map((p) => {
              const from = Number(p.fetchOffset);
              const batches = log.slice(from).map((batch, i) => {
                const copy = Buffer.from(batch);
                copy.writeBigInt64BE(BigInt(from + i), 0);
                return copy;
              });
              return {
                partitionIndex: p.partition,
                errorCode: 0,
                highWatermark: log.length,
                lastStableOffset: log.length,
                logStartOffset: 0,
                abortedTransactions: null,
                records: Buffer.concat(batches),
              };
            }),
          })),
        };
      case 'FindCoordinator':
        return v >= 4
          ? { coordinators: (b.coordinatorKeys as string[]).map((key) => ({ key, ...node, errorCode: 0, errorMessage: null })) }
          : { errorCode: 0, errorMessage: null, ...node };
      case 'JoinGroup': {
        const memberId = (b.memberId as string) || `member-${++memberSeq}`;
        const protocol = (b.protocols as S[])[0]!;
        payloads.subscriptions.push(decodeSubscription(protocol.metadata as Buffer));
        return {
          errorCode: 0,
          generationId: 1,
          protocolType: 'consumer',
          protocolName: protocol.name,
          leader: memberId,
          memberId,
          members: [{ memberId, groupInstanceId: null, metadata: protocol.metadata }],
        };
      }
      case 'SyncGroup': {
        const mine = (b.assignments as S[]).find((a) => a.memberId === b.memberId);
        if (mine) assignment = mine.assignment as Buffer;
        payloads.assignments.push(decodeAssignment(assignment));
        return { errorCode: 0, protocolType: 'consumer', protocolName: 'range', assignment };
      }
      case 'OffsetFetch':
        return {
          topics: ((b.topics as S[] | null) ?? []).map((t) => ({
            name: t.name,
            partitions: (t.partitionIndexes as number[]).map((partitionIndex) => ({ partitionIndex, committedOffset: -1, metadata: '', errorCode: 0 })),
          })),
          errorCode: 0,
        };
      case 'OffsetCommit':
        return {
          topics: (b.topics as S[]).map((t) => ({
            name: t.name,
            partitions: (t.partitions as S[]).map((p) => ({ partitionIndex: p.partitionIndex, errorCode: 0 })),
          })),
        };
      case 'InitProducerId':
        return { errorCode: 0, producerId: 1000n, producerEpoch: 0 };
      case 'AddPartitionsToTxn':
        return {
          results: (b.topics as S[]).map((t) => ({
            name: t.name,
            results: (t.partitions as number[]).map((partitionIndex) => ({ partitionIndex, errorCode: 0 })),
          })),
        };
      default:
        return { errorCode: 0, members: [] };
    }
  };
  return net.createServer((sock) => {
    const splitter = new KafkaFrameSplitter();
    sock.on('error', () => {});
    sock.on('data', (chunk) => {
      for (const frame of splitter.push(chunk)) {
        const req = decodeRequest(frame);
        const key = `${req.api.name} v${req.header.apiVersion}`;
        if (!captured.has(key))
          captured.set(key, { api: req.api.name, apiKey: req.api.key, apiVersion: req.header.apiVersion, frame: Buffer.from(frame).toString('hex') });
        if (req.api.name === 'Produce' && req.body.acks === 0) continue;
        sock.write(encodeResponse(req.api, req.header.apiVersion, req.header.correlationId, handle(req.api, req.header.apiVersion, req.body as S)));
      }
    });
  });
}

function kcat(args: string[], input?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile('kcat', args, { timeout: 30_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`kcat ${args.join(' ')}: ${err.message}\n${stderr}`)) : resolve(stdout),
    );
    if (input !== undefined) child.stdin!.end(input);
  });
}

describe('librdkafka (kcat) against the codecs', () => {
  it('kcat runs finish against our responses, and every distinct request it sends round-trips', async () => {
    const captured = new Map<string, Captured>();
    const payloads = { subscriptions: [] as unknown[], assignments: [] as unknown[] };
    let port = 0;
    const server = responder(() => port, captured, payloads);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as net.AddressInfo).port;
    const b = `127.0.0.1:${port}`;
    try {
      expect(await kcat(['-b', b, '-L', '-t', TOPIC])).toMatch(/topic "cap" with 1 partitions/);
      await kcat(['-b', b, '-P', '-t', TOPIC, '-p', '0'], 'one\ntwo\n');
      await kcat(['-b', b, '-P', '-t', TOPIC, '-p', '0', '-X', 'transactional.id=tx-cap'], 'three\n');
      expect((await kcat(['-b', b, '-C', '-t', TOPIC, '-p', '0', '-o', 'beginning', '-e'])).trim().split('\n')).toEqual(['one', 'two', 'three']);
      expect((await kcat(['-b', b, '-G', 'grp-cap', '-e', '-X', 'auto.offset.reset=earliest', TOPIC])).trim().split('\n')).toEqual(['one', 'two', 'three']);
    } finally {
      server.close();
    }
    const version =
      execFileSync('kcat', ['-V'])
        .toString()
        .match(/librdkafka [^ ]+/)?.[0] ?? 'librdkafka';
    const entries = [...captured.values()].sort((x, y) => x.apiKey - y.apiKey || x.apiVersion - y.apiVersion);
    expect(entries.length).toBeGreaterThan(5);
    for (const e of entries) {
      const frame = Buffer.from(e.frame, 'hex');
      const req = decodeRequest(frame);
      const again = encodeRequest(req.api, e.apiVersion, req.header.correlationId, req.header.clientId, req.body);
      expect(again.subarray(4), `${e.api} v${e.apiVersion}`).toEqual(frame);
    }
    if (process.env.CAPTURE_LIBRDKAFKA !== '1') return;
    writeFileSync(
      new URL('./fixtures/librdkafka.json', import.meta.url),
      `${JSON.stringify({ client: version, subscriptions: payloads.subscriptions.length, requests: entries }, null, 1)}\n`,
    );
  }, 120_000);
});
