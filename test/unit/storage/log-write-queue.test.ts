/**
 * Which queued appends one write of a partition log takes (storage/log-write-queue.ts nextGroup): blocks
 * stamped in place of 16 KiB or more are written alone; a smaller one alone only when nothing waits to
 * join it, else it is copied into the group's write with the others; replicas, refused appends and the
 * size bounds end a group.
 */
import { describe, expect, it } from 'vitest';
import { IN_PLACE_ALONE_BYTES, IN_PLACE_MIN_BYTES } from 'tributary-broker/storage/append-block.js';
import { nextGroup, type PendingAppend } from 'tributary-broker/storage/log-write-queue.js';
import type { ReplicaWrite } from 'tributary-broker/storage/replica-write.js';

const noop = () => {};
function append(bytes: number, extra: Partial<PendingAppend> = {}): PendingAppend {
  return { records: [], sizes: [], bytes, resolve: noop, reject: noop, ...extra } as PendingAppend;
}
const plain = (bytes = 500) => append(bytes);
const small = () => append(IN_PLACE_MIN_BYTES + 1000, { block: true, inPlace: true });
const large = () => append(IN_PLACE_ALONE_BYTES, { block: true, inPlace: true });
const group = (pending: PendingAppend[], segSize = 0, segmentBytes = 1 << 30, maxBytes = 4 << 20) => nextGroup(pending, segSize, segmentBytes, maxBytes);

describe('nextGroup', () => {
  it('writes a small block in place when it is alone, and copies it into a group when others wait', () => {
    expect(group([small()])).toEqual({ n: 1, bytes: IN_PLACE_MIN_BYTES + 1000, inPlace: true });
    const waiting = [small(), plain(), small()];
    expect(group(waiting)).toEqual({ n: 3, bytes: 2 * (IN_PLACE_MIN_BYTES + 1000) + 500, inPlace: false });
    expect(group([plain(), small()])).toEqual({ n: 2, bytes: IN_PLACE_MIN_BYTES + 1500, inPlace: false });
  });

  it('writes a large block in place alone, and ends a group before one', () => {
    expect(group([large(), plain(), small()])).toEqual({ n: 1, bytes: IN_PLACE_ALONE_BYTES, inPlace: true });
    expect(group([plain(), small(), large(), plain()])).toEqual({ n: 2, bytes: IN_PLACE_MIN_BYTES + 1500, inPlace: false });
  });

  it('ends a group before a replica append, a refused one, and where the write or the segment would be too large', () => {
    const replica = append(100, { replica: {} as ReplicaWrite });
    expect(group([small(), replica])).toEqual({ n: 1, bytes: IN_PLACE_MIN_BYTES + 1000, inPlace: true });
    const refused = append(100, { guard: { refused: () => new Error('fenced'), failed: noop } });
    expect(group([plain(), plain(), refused, plain()]).n).toBe(2);
    expect(group([small(), refused]).inPlace).toBe(true);
    expect(group([plain(), plain(), plain()], 0, 1 << 30, 1000)).toEqual({ n: 2, bytes: 1000, inPlace: false });
    expect(group([plain(), plain(), plain()], 9_000, 10_000)).toEqual({ n: 2, bytes: 1000, inPlace: false });
    // A small block whose only neighbour does not fit is written in place.
    expect(group([small(), plain()], 0, 1 << 30, IN_PLACE_MIN_BYTES + 1200).inPlace).toBe(true);
  });
});
