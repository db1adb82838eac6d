/**
 * What a lazy event's position keeps alive. The rebuild's replay keeps the position of every event
 * it hands over until it ends (`ReplayOrder`, the slice's applied set), and the events' texts are
 * slices of the pieces their archive objects were decoded in (`utf8Lines`): a position sliced from
 * its text kept the whole decoded archive in the heap (docs/performance-log.md, "59. The rebuild's
 * replay through the one-pass decode"). Here the positions of 5,000 events of 4 KB, decoded from
 * 64 KiB pieces as the replay decodes them, are kept and the rest dropped: after a full garbage
 * collection the heap holds far less than the text, and each position equals the parsed event's.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { validateChangeEvent } from '../../../lambda/core/shared/event.ts';
import { utf8Lines } from '../../../lambda/core/shared/utf8.ts';
import { lazyEventOf } from '../../../lambda/core/sink/lazy-event.ts';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const EVENTS = 5000;

function eventText(i: number): string {
  return JSON.stringify(
    validateChangeEvent({
      v: 1,
      source: 'src',
      table: 'public.items',
      op: 'update',
      key: { id: i },
      after: { id: i, note: `${i} `.padEnd(4000, 'x') },
      before: null,
      missing: [],
      position: (0x1000000 + i).toString(16).padStart(24, '0'),
      commitTs: '2026-12-07T08:00:00.000Z',
      txId: String(1000 + Math.floor(i / 7)),
      schemaVersion: 1,
      capture: 'slot',
      synthetic: false,
    }),
  );
}

/** Decodes `body` as the replay does and keeps only the events' positions. */
function positionsOf(body: Buffer): string[] {
  const positions: string[] = [];
  for (const line of utf8Lines(body)) {
    const e = lazyEventOf(line);
    if (e === null) throw new Error(`the one-pass decode did not take ${line.slice(0, 80)}`);
    positions.push(e.position);
  }
  return positions;
}

function heapAfterGc(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

describe('a lazy event position', () => {
  it('does not keep the decoded text alive', () => {
    const body = Buffer.from(Array.from({ length: EVENTS }, (_, i) => eventText(i)).join('\n'));
    const before = heapAfterGc();
    const positions = positionsOf(body);
    const held = heapAfterGc() - before;
    process.stdout.write(`[retention] ${positions.length} positions of ${body.length} bytes of text hold ${held} bytes of heap\n`);
    expect(positions.length).toBe(EVENTS);
    for (const [i, p] of positions.entries()) expect(p).toBe((0x1000000 + i).toString(16).padStart(24, '0'));
    // A position of its own is some 100 bytes; a sliced one holds its 64 KiB piece (the whole text here).
    expect(held).toBeLessThan(body.length / 10);
  });
});
