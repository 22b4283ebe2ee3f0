/**
 * The tombstones of deleted topics in etcd (docs/architecture.md, "Metadata"): `<prefix>deleted-topics/
 * <name>~<topicId>`, written in a delete's transaction, valued `{"deletedAt":<wall ms>}` (empty when
 * written by an earlier version). A broker reads them at its start to remove the directories of topics
 * deleted while it was down.
 */
import { type Etcd3, type IKeyValue, Range } from 'etcd3';
import type { DeletedTopic } from '../partition/metadata-store.js';
import { withMetadataErrors } from './etcd-client.js';

/** Under the cluster prefix. */
export const DELETED_TOPICS = 'deleted-topics/';
/** Keys one read takes at open: a response does not grow with their count. */
export const TOMBSTONE_PAGE = 500;

export function tombstoneValue(deletedAt: number): string {
  return JSON.stringify({ deletedAt });
}

/** When the topic was deleted, per a tombstone's value; undefined for an empty value (an earlier version's) or one not understood. */
export function tombstoneTime(value: string): number | undefined {
  if (value === '') return undefined;
  try {
    const v = JSON.parse(value) as { deletedAt?: unknown } | null;
    const at = v !== null && typeof v === 'object' ? v.deletedAt : undefined;
    return typeof at === 'number' && Number.isSafeInteger(at) && at >= 0 ? at : undefined;
  } catch {
    return undefined;
  }
}

/** The deleted topic a tombstone names (`<name>~<topicId>`, relative to DELETED_TOPICS). */
export function tombstoneTopic(relative: string): DeletedTopic | undefined {
  const at = relative.lastIndexOf('~');
  return at > 0 ? { name: relative.slice(0, at), topicId: relative.slice(at + 1) } : undefined;
}

/** One page of the tombstones from key `from` on (`more`: keys remain after it). */
async function readPage(client: Etcd3, root: string, from: Buffer, limit: number, operation: string): Promise<{ kvs: IKeyValue[]; more: boolean }> {
  const res = await withMetadataErrors(operation, () =>
    client
      .getAll()
      .inRange({ start: from, end: Range.prefix(root).end })
      .limit(limit)
      .exec(),
  );
  return { kvs: res.kvs, more: Boolean(res.more) && res.kvs.length > 0 };
}

/** The key right after `key`: where the next page starts. */
function after(key: Buffer): Buffer {
  return Buffer.concat([key, Buffer.from([0])]);
}

/** Every deleted topic with a tombstone under `root`, read a page at a time. */
export async function readDeletedTopics(client: Etcd3, root: string, pageSize = TOMBSTONE_PAGE): Promise<DeletedTopic[]> {
  const out: DeletedTopic[] = [];
  let from: Buffer = Buffer.from(root);
  for (;;) {
    const page = await readPage(client, root, from, pageSize, 'open');
    for (const kv of page.kvs) {
      const topic = tombstoneTopic(kv.key.toString('utf8').slice(root.length));
      if (topic) out.push(topic);
    }
    if (!page.more) return out;
    from = after(page.kvs.at(-1)!.key);
  }
}
