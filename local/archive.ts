/**
 * The change-log archive on one machine: a folder behind the one archive interface
 * (lambda/core/rebuild/archive.ts, which also has the key rules and the archive copier that stands in for
 * Kinesis Data Firehose; the S3 store is lambda/adapters/archive-s3.ts, which also serves s3rver),
 * and the payload store through that interface.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { checkArchiveKey, type Archive } from '../lambda/core/rebuild/archive.ts';
import { PayloadRefError, type PayloadStore } from '../lambda/core/shared/payload-store.ts';

/** An archive in a local folder: keys are relative paths; writes go through a temp file and a rename. */
export class FolderArchive implements Archive {
  constructor(readonly root: string) {}

  get location(): string {
    return `folder ${this.root}`;
  }

  async put(key: string, body: string | Buffer): Promise<void> {
    checkArchiveKey(key);
    const file = path.join(this.root, key);
    await fs.mkdir(path.dirname(file), { recursive: true });
    const tmp = `${file}.tmp-${process.pid}`;
    const handle = await fs.open(tmp, 'w');
    try {
      await handle.writeFile(body);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await fs.rename(tmp, file);
  }

  async get(key: string): Promise<Buffer> {
    checkArchiveKey(key);
    return fs.readFile(path.join(this.root, key));
  }

  async list(prefix = '', startAfter?: string): Promise<string[]> {
    // Only the folder the prefix names is walked (keys under `a/b/c` are all in `a/b/`).
    const base = prefix.slice(0, prefix.lastIndexOf('/') + 1);
    if (base !== '') checkArchiveKey(base.slice(0, -1));
    const out: string[] = [];
    const walk = async (dir: string, rel: string): Promise<void> => {
      let entries;
      try {
        entries = await fs.readdir(dir, { withFileTypes: true });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR') return;
        throw err;
      }
      for (const e of entries) {
        const r = rel ? `${rel}/${e.name}` : e.name;
        if (e.isDirectory()) await walk(path.join(dir, e.name), r);
        else if (!e.name.includes('.tmp-') && r.startsWith(prefix) && (startAfter === undefined || r > startAfter)) out.push(r);
      }
    };
    await walk(path.join(this.root, base), base.slice(0, -1));
    return out.sort();
  }
}

/**
 * The payload store (dead letters' whole records, events stored out of line; docs/large-records.md)
 * through the archive interface: a folder or s3rver locally, under `payloads/`. References are
 * `archive:<key>`.
 */
export function archivePayloadStore(archive: Archive, prefix = 'payloads/'): PayloadStore {
  return {
    async put(key, body) {
      await archive.put(prefix + key, body);
      return `archive:${prefix}${key}`;
    },
    async get(ref) {
      if (!ref.startsWith(`archive:${prefix}`)) throw new PayloadRefError(ref, `is not an archive:${prefix} reference`);
      return archive.get(ref.slice('archive:'.length));
    },
  };
}
