/**
 * The replay reader's decisions (lambda/core/rebuild/replay.ts): archive keys of both layouts, the batch
 * markers' chain, the archive/stream junction and the merge. The chain and merge are checked over
 * many seeds against a reference that knows which records were archived: `CDC_REPLAY_CORE_RUNS`
 * (default 500) and `CDC_PROPERTY_SEED` (default random, printed).
 */
import { describe, expect, it } from 'vitest';
import { ENVELOPE_VERSION, type ChangeEvent } from '../../../lambda/core/shared/event.ts';
import { makePosition } from '../../../lambda/core/shared/position.ts';
import {
  checkMarkerChain,
  checkStreamJunction,
  historyGaps,
  markerKey,
  mergeReplay,
  parseArchivedObject,
  parseMarker,
  ReplayHoleError,
  type BatchMarker,
} from '../../../lambda/core/rebuild/replay.ts';
import { archiveKey } from '../../../lambda/core/rebuild/archive.ts';
import { seededRandom } from '../../../local/seeded-random.ts';

const RUNS = Number(process.env.CDC_REPLAY_CORE_RUNS ?? 500);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);

const at = new Date('2026-12-01T10:11:12Z');

describe('archive keys', () => {
  it('parses both layouts and the markers, and ignores other keys', () => {
    const batch = archiveKey('', 'change-log', at, 'shardId-000000000001', '49', '51');
    expect(parseArchivedObject(batch)).toEqual({ key: batch, layout: 'batch', shard: 'shardId-000000000001', firstSeq: '49', lastSeq: '51' });
    const table = archiveKey('tables/app/public.orders/', 'change-log', at, 'shardId-000000000001', '49', '51');
    expect(parseArchivedObject(table)).toMatchObject({ layout: 'by-table', shard: 'shardId-000000000001', firstSeq: '49', lastSeq: '51' });
    const other = archiveKey('tables/_other/', 'change-log', at, 'shardId-000000000001', '49', '51');
    expect(parseArchivedObject(other)).toMatchObject({ layout: 'by-table' });
    expect(parseArchivedObject('payloads/dead-letters/x')).toBeNull();
    expect(parseMarker(markerKey('shardId-000000000001', '49', '51', null))).toEqual({
      key: markerKey('shardId-000000000001', '49', '51', null),
      shard: 'shardId-000000000001',
      firstSeq: '49',
      lastSeq: '51',
      prevSeq: null,
    });
    expect(parseMarker(markerKey('s', '52', '60', '51'))!.prevSeq).toBe('51');
  });

  it("a junction where the stream no longer holds the archive's last record is a named hole", () => {
    expect(() => checkStreamJunction('s', '100', '100', false)).not.toThrow();
    expect(() => checkStreamJunction('s', '100', '120', false)).toThrow(ReplayHoleError);
    expect(() => checkStreamJunction('s', '100', null, true)).toThrow(/shard is closed and trimmed/);
  });
});

describe('marker chain and merge (property)', () => {
  it(`proves the archive complete exactly when no archived batch is missing, and merges archive and stream in position order once each (${RUNS} runs)`, () => {
    console.log(`replay core property: seed ${SEED}, ${RUNS} runs (replay with CDC_PROPERTY_SEED=${SEED})`);
    const rand = seededRandom(SEED);
    for (let run = 0; run < RUNS; run++) {
      const where = `run ${run} seed ${SEED}`;
      // One shard's records (increasing, not contiguous sequence numbers), cut into batches by a copier.
      const seqs: bigint[] = [];
      let s = 1000n;
      const n = 5 + Math.floor(rand() * 60);
      for (let i = 0; i < n; i++) seqs.push((s += BigInt(1 + Math.floor(rand() * 1000))));
      const markers: BatchMarker[] = [];
      let prev: bigint | null = null;
      const expired = rand() < 0.2 ? 1 + Math.floor(rand() * 3) : 0;
      let i = 0;
      let b = 0;
      while (i < n) {
        const size = 1 + Math.floor(rand() * 8);
        const recs = seqs.slice(i, i + size);
        const m = { shard: 'sh', firstSeq: String(recs[0]), lastSeq: String(recs[recs.length - 1]), prevSeq: prev === null ? null : String(prev) };
        if (b >= expired) markers.push({ key: markerKey(m.shard, m.firstSeq, m.lastSeq, m.prevSeq), ...m });
        // Copied again after a crash, sometimes with one more record.
        if (rand() < 0.15) {
          const more = seqs.slice(i, i + size + (rand() < 0.5 ? 1 : 0));
          const again = { ...m, lastSeq: String(more[more.length - 1]) };
          if (b >= expired) markers.push({ key: markerKey(again.shard, again.firstSeq, again.lastSeq, again.prevSeq), ...again });
        }
        prev = recs[recs.length - 1]!;
        i += size;
        b++;
      }
      // Lose some markers.
      const kept = markers.filter(() => rand() > 0.08);
      // The reference: a hole is a record below the highest kept one that no kept marker covers (past what expired).
      const top = kept.reduce((x, m) => (BigInt(m.lastSeq) > x ? BigInt(m.lastSeq) : x), 0n);
      const low = kept.reduce((x, m) => (x === null || BigInt(m.firstSeq) < x ? BigInt(m.firstSeq) : x), null as bigint | null);
      const covered = (q: bigint) => kept.some((m) => BigInt(m.firstSeq) <= q && q <= BigInt(m.lastSeq));
      const hole = low !== null && seqs.some((q) => q >= low && q < top && !covered(q));
      // Shuffle: the chain check must not depend on listing order.
      const shuffled = [...kept].sort(() => rand() - 0.5);
      if (hole) {
        expect(() => checkMarkerChain(shuffled), where).toThrow(ReplayHoleError);
      } else {
        const cov = checkMarkerChain(shuffled);
        if (kept.length === 0) continue;
        const c = cov.get('sh')!;
        expect(c.lastSeq, where).toBe(String(top));
        const fromOrigin = kept.some((m) => m.prevSeq === null && BigInt(m.firstSeq) === low);
        expect(c.fromOrigin, where).toBe(fromOrigin);
        expect(historyGaps(cov).length > 0, where).toBe(!fromOrigin);
      }

      // The merge: two parts with overlap and duplicates give each (position, key) once, in position order, within the range.
      const events: ChangeEvent[] = [];
      let lsn = 0x100n;
      for (let k = 0; k < 30; k++) {
        lsn += BigInt(1 + Math.floor(rand() * 5));
        events.push({
          v: ENVELOPE_VERSION,
          source: 'src',
          table: rand() < 0.8 ? 'public.t' : 'public.u',
          op: 'update',
          key: { id: Math.floor(rand() * 5) },
          after: { id: 0 },
          before: null,
          missing: [],
          position: makePosition(lsn, 0),
          commitTs: at.toISOString(),
          txId: null,
          schemaVersion: 1,
          capture: 'slot',
          synthetic: false,
        });
      }
      const cut = Math.floor(rand() * events.length);
      const archivePart = events.slice(0, cut + Math.floor(rand() * 5));
      const streamPart = [...events.slice(cut)].sort(() => rand() - 0.5);
      const from = events[Math.floor(rand() * events.length)]!.position;
      const merged = mergeReplay([archivePart, streamPart, archivePart.filter(() => rand() < 0.3)], {
        source: 'src',
        table: 'public.t',
        from,
        to: 'f'.repeat(24),
      });
      const want = events.filter((e) => e.table === 'public.t' && e.position >= from);
      expect(
        merged.map((e) => `${e.position}|${e.key.id}`),
        where,
      ).toEqual(want.map((e) => `${e.position}|${e.key.id}`));
    }
  });
});
