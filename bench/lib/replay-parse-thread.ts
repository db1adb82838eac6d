/**
 * The worker thread of `bench/rebuild-thread.ts` (a measurement, not the rebuild's code): per
 * archive object it does the replay's per-event work (split the lines, `JSON.parse`,
 * `validateChangeEvent`) and the append's COPY text (`changelogLineWriter`, the applier's own),
 * and hands back what the main thread needs to order the events and COPY them: each event's
 * position and key text, and the object's COPY lines as one buffer with each line's end offset
 * (transferred, not copied).
 */
import { parentPort } from 'node:worker_threads';
import { utf8Lines } from '../../lambda/core/shared/utf8.ts';
import { keyText, validateChangeEvent, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { changelogLineWriter } from '../../lambda/adapters/warehouse-pg-copy-text.ts';

/** What the main thread sends: the changelog's columns once, then one object's body at a time. */
export type ToThread = { columns: string[]; appliedAt: string } | { id: number; body: ArrayBuffer };
/** What comes back per object. */
export interface FromThread {
  id: number;
  positions: string[];
  keys: string[];
  /** Byte offset where each event's COPY line ends in `copy`. */
  ends: Uint32Array;
  copy: ArrayBuffer;
}

let write: ((e: ChangeEvent) => string) | null = null;

function parseObject(id: number, body: Buffer): { out: FromThread; transfer: ArrayBuffer[] } {
  if (!write) throw new Error('replay parse thread: the changelog columns were not sent before the first object');
  const lines = utf8Lines(body);
  const positions: string[] = [];
  const keys: string[] = [];
  const ends = new Uint32Array(lines.length);
  let buf = Buffer.allocUnsafe(Math.max(1024, body.length * 2));
  let len = 0;
  for (const [i, line] of lines.entries()) {
    const e = validateChangeEvent(JSON.parse(line));
    positions.push(e.position);
    keys.push(keyText(e.key));
    const text = write(e);
    if (len + text.length * 3 > buf.length) {
      const bigger = Buffer.allocUnsafe(2 * buf.length + text.length * 3);
      buf.copy(bigger, 0, 0, len);
      buf = bigger;
    }
    len += buf.write(text, len);
    ends[i] = len;
  }
  const copy = buf.buffer.slice(buf.byteOffset, buf.byteOffset + len);
  return { out: { id, positions, keys, ends, copy }, transfer: [copy, ends.buffer] };
}

parentPort?.on('message', (m: ToThread) => {
  if ('columns' in m) {
    write = changelogLineWriter(m.columns, m.appliedAt);
    return;
  }
  const { out, transfer } = parseObject(m.id, Buffer.from(m.body));
  parentPort!.postMessage(out, transfer);
});
