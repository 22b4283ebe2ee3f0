/**
 * metadata.json that the broker cannot take whole stops the start with a message naming the file and the
 * problem, never a start that knows fewer topics than the data directory holds (docs/operations.md, "The
 * metadata file"); and the data of a topic is deleted at start only when the metadata says the topic was
 * deleted: any other directory of no known topic is moved aside (docs/architecture.md, "Metadata").
 */
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { LocalMetadataStore } from 'tributary-broker/partition/metadata-store.js';
import { ORPHANED_DIR, type TopicManager } from 'tributary-broker/partition/topic-manager.js';
import { openTopicManager } from '../../helpers/topic-manager.js';
import { rec, removeDir, tempDir } from '../../helpers/util.js';

let dir: string;
let file: string;
const managers: TopicManager[] = [];
beforeEach(async () => {
  dir = await tempDir('trib-meta-file-');
  file = path.join(dir, 'metadata.json');
});
afterEach(async () => {
  for (const m of managers.splice(0)) await m.close().catch(() => {});
  await removeDir(dir);
});

const spec = (name: string) => ({
  name,
  partitions: 1,
  replicationFactor: 1,
  idempotent: false,
  partitioner: 'hash_key' as const,
  retentionHours: -1,
  retentionBytes: -1,
  cleanupPolicy: 'delete' as const,
});

async function openManager(): Promise<{ store: LocalMetadataStore; topics: TopicManager }> {
  const opened = await openTopicManager(dir);
  managers.push(opened.topics);
  return opened;
}

async function closeManager(topics: TopicManager): Promise<void> {
  managers.splice(managers.indexOf(topics), 1);
  await topics.close();
}

/** A data directory with topic t1 holding records, closed. Returns t1's directory name. */
async function withTopic(): Promise<string> {
  const { topics } = await openManager();
  const { topic } = await topics.create(spec('t1'));
  await topic.partition(0).append([rec('a'), rec('b'), rec('c')]);
  await closeManager(topics);
  return `t1~${topic.def.topicId}`;
}

async function openError(): Promise<string> {
  const store = new LocalMetadataStore(dir);
  try {
    await store.open();
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('the store opened');
}

const valid = () => JSON.parse(JSON.stringify({ version: 1, topics: [{ ...spec('t1'), topicId: 'abcd', createdAt: 1 }], nextProducerId: 0 }));

describe('a metadata.json the broker cannot take', () => {
  const cases: Array<[string, () => string, RegExp]> = [
    ['empty', () => '', /is empty/],
    ['truncated', () => JSON.stringify(valid()).slice(0, 40), /is not valid JSON/],
    ['garbage', () => '\u0000\u0001garbage', /is not valid JSON/],
    ['null', () => 'null', /does not hold a JSON object \(found null\)/],
    ['of another version', () => JSON.stringify({ ...valid(), version: 2 }), /unsupported version \(2/],
    ['without topics', () => JSON.stringify({ version: 1 }), /no "topics" array/],
    ['with a null topic', () => JSON.stringify({ version: 1, topics: [null] }), /invalid topic entry 0: not an object/],
    [
      'with a topic without topicId',
      () => {
        const v = valid();
        delete v.topics[0].topicId;
        return JSON.stringify(v);
      },
      /invalid topic entry 0 \("t1"\): "topicId" is missing/,
    ],
    [
      'with a topic of 0 partitions',
      () => {
        const v = valid();
        v.topics[0].partitions = 0;
        return JSON.stringify(v);
      },
      /invalid topic entry 0 \("t1"\): "partitions"/,
    ],
    ['with a topic twice', () => JSON.stringify({ ...valid(), topics: [...valid().topics, ...valid().topics] }), /topic entry 1 \("t1"\) twice/],
    ['with a bad nextProducerId', () => JSON.stringify({ ...valid(), nextProducerId: -5 }), /invalid "nextProducerId"/],
  ];
  for (const [what, content, problem] of cases) {
    it(`refuses one ${what}, naming the file and the problem`, async () => {
      await fs.writeFile(file, content());
      const msg = await openError();
      expect(msg).toContain(`metadata file ${file}`);
      expect(msg).toMatch(problem);
    });
  }

  it('refuses a metadata.json that is a directory, naming it', async () => {
    await fs.mkdir(file);
    expect(await openError()).toMatch(new RegExp(`metadata file ${file} cannot be read \\(EISDIR`));
  });

  it('refuses to start without metadata.json while logs/ holds topic directories; the data stays', async () => {
    const t1 = await withTopic();
    await fs.rename(file, `${file}.away`);
    const msg = await openError();
    expect(msg).toContain(`metadata file ${file} is missing`);
    expect(msg).toContain(t1);
    expect(existsSync(path.join(dir, 'logs', t1, '0'))).toBe(true);
    // Put back, the topic is whole.
    await fs.rename(`${file}.away`, file);
    const { topics } = await openManager();
    expect((await topics.get('t1').partition(0).read(0, { maxRecords: 10, maxBytes: 1 << 20, isolation: 'read_uncommitted' })).records.map((r) => r.value.toString())).toEqual(['a', 'b', 'c']);
  });

  it('starts a new broker without metadata.json when logs/ is empty or absent', async () => {
    const { topics } = await openManager();
    expect(topics.list()).toEqual([]);
  });

  it('takes only <name>~<id> directories for topic data: lost+found of a file system mounted at logs/ stays where it is', async () => {
    await fs.mkdir(path.join(dir, 'logs', 'lost+found'), { recursive: true });
    await fs.writeFile(path.join(dir, 'logs', '.keep'), '');
    await fs.writeFile(path.join(dir, 'logs', 'notes~txt'), 'a file, not a directory');
    const { topics } = await openManager();
    expect(topics.list()).toEqual([]);
    expect((await fs.readdir(path.join(dir, 'logs'))).sort()).toEqual(['.keep', 'lost+found', 'notes~txt']);
  });
});

describe('directories of topics the metadata does not define', () => {
  /**
   * Topic t0, then t1 with records, then metadata.json as it was before t1 existed (a restore of an older
   * copy), closed. Returns t1's directory name: a directory of no known topic.
   */
  async function olderMetadataAndOrphan(): Promise<string> {
    const { topics } = await openManager();
    await topics.create(spec('t0'));
    await closeManager(topics);
    const older = await fs.readFile(file, 'utf8');
    const t1 = await withTopic();
    await fs.writeFile(file, older);
    return t1;
  }

  it('a directory of no known topic is moved aside, not deleted (an older metadata.json put back)', async () => {
    const t1 = await olderMetadataAndOrphan();
    expect((await openManager()).topics.list().map((t) => t.name)).toEqual(['t0']);
    expect(existsSync(path.join(dir, 'logs', t1))).toBe(false);
    const [aside] = await fs.readdir(path.join(dir, ORPHANED_DIR));
    const moved = path.join(dir, ORPHANED_DIR, aside!, t1, '0');
    expect((await fs.readdir(moved)).some((f) => f.endsWith('.log'))).toBe(true);
  });

  it('moves aside within logs/ when the data directory is on another file system (EXDEV)', async () => {
    const t1 = await olderMetadataAndOrphan();
    const rename = fs.rename;
    const spy = vi.spyOn(fs, 'rename').mockImplementation(async (from, to) => {
      if (String(to).startsWith(path.join(dir, ORPHANED_DIR))) throw Object.assign(new Error('cross-device link not permitted'), { code: 'EXDEV' });
      return rename(from, to);
    });
    try {
      expect((await openManager()).topics.list().map((t) => t.name)).toEqual(['t0']);
    } finally {
      spy.mockRestore();
    }
    const [aside] = await fs.readdir(path.join(dir, 'logs', `.${ORPHANED_DIR}`));
    expect(await fs.readdir(path.join(dir, 'logs', `.${ORPHANED_DIR}`, aside!, t1, '0'))).toContain('00000000000000000000.log');
  });

  it('a deleted topic whose directory a crash left behind is removed at the next start, then dropped from the list', async () => {
    const t1 = await withTopic();
    // The delete's first step only (as a crash before the files went): the definition goes, the topic is listed.
    const store = new LocalMetadataStore(dir);
    await store.open();
    const id = t1.slice(3);
    await store.deleteTopic('t1');
    expect(JSON.parse(await fs.readFile(file, 'utf8')).deleting).toEqual([{ name: 't1', topicId: id }]);
    await store.close();
    expect(existsSync(path.join(dir, 'logs', t1))).toBe(true);
    await openManager();
    expect(existsSync(path.join(dir, 'logs', t1))).toBe(false);
    expect(existsSync(path.join(dir, ORPHANED_DIR))).toBe(false);
    expect(JSON.parse(await fs.readFile(file, 'utf8')).deleting).toEqual([]);
  });

  it('a topic deleted while running is removed and not left listed', async () => {
    const t1 = await withTopic();
    const { topics } = await openManager();
    await topics.delete('t1');
    expect(existsSync(path.join(dir, 'logs', t1))).toBe(false);
    expect(JSON.parse(await fs.readFile(file, 'utf8')).deleting).toEqual([]);
  });
});
