/**
 * The append's COPY text written straight from the events (lambda/adapters/warehouse-pg-copy-text.ts)
 * against the text it replaces: each event's `changelogRow` through `copyStageLoader.load`, byte
 * for byte, over random events and random changelog columns (values with COPY's special
 * characters, non-ASCII text, numbers, booleans, nested values, NULLs, absent columns, names an
 * object's prototype has, missing lists, transaction ids). Seed and count printed; `SEED=<n>` repeats a run.
 */
import { Writable } from 'node:stream';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { changelogCopyText, changelogLineWriter } from '../../lambda/adapters/warehouse-pg-copy-text.ts';
import { changelogRow } from '../../lambda/adapters/warehouse-pg-handover.ts';
import { copyStageLoader } from '../../lambda/adapters/warehouse-pg-loaders.ts';
import { validateChangeEvent, type ChangeEvent, type JsonValue } from '../../lambda/core/shared/event.ts';
import { CHANGELOG_CDC_COLUMNS } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { rng } from '../helpers/rng.ts';

/** What a COPY sent: the text a connection that sends nothing was given. */
async function copied(send: (client: pg.ClientBase) => Promise<void>): Promise<{ bytes: Buffer; chunks: Buffer[] }> {
  const chunks: Buffer[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      chunks.push(Buffer.from(chunk));
      done();
    },
  });
  await send({ query: () => sink } as unknown as pg.ClientBase);
  return { bytes: Buffer.concat(chunks), chunks };
}

const PIECES = ['a', 'Zz', ' ', '\t', '\n', '\r', '\\', '\\N', 'é', '日本', '😀', '"', "'", ',', '{}', '0', '-'];
const NAMES = ['id', 'k2', 'name', 'note', 'amount', 'flag', 'doc', 'constructor', 'toString', 'hasOwnProperty', 'col with space', 'Ünï'];
const RESERVED = CHANGELOG_CDC_COLUMNS.map((c) => c.name);

function randomEvents(r: () => number, n: number): ChangeEvent[] {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const text = (max: number): string => Array.from({ length: Math.floor(r() * max) }, () => pick(PIECES)).join('');
  const scalar = (): JsonValue => {
    const k = r();
    // Now and then a value longer than a chunk (the chunk's buffer grows for it).
    if (k < 0.003) return text(80_000);
    if (k < 0.4) return text(12);
    if (k < 0.55) return Math.floor(r() * 2e6) - 1e6;
    if (k < 0.65) return Math.round(r() * 1e6) / 1e3;
    if (k < 0.75) return r() < 0.5;
    if (k < 0.85) return null;
    if (k < 0.92) return { a: text(4), b: [1, text(3), null] };
    return [text(3), 2.5, { '\t': text(2) }];
  };
  const out: ChangeEvent[] = [];
  for (let i = 0; i < n; i++) {
    const op = pick(['insert', 'update', 'delete', 'snapshot'] as const);
    const key: Record<string, JsonValue> = { id: r() < 0.5 ? Math.floor(r() * 1e9) : text(8) };
    if (r() < 0.3) key.k2 = r() < 0.5 ? text(5) : r() < 0.5;
    const after: Record<string, JsonValue> | null = op === 'delete' ? null : {};
    if (after) for (const c of NAMES) if (r() < 0.6) after[c] = c in key && r() < 0.8 ? key[c]! : scalar();
    const missing = op === 'delete' ? [] : NAMES.filter((c) => r() < 0.1 && !(after && c in after));
    const raw = {
      v: 1,
      source: 'src',
      table: 'public.t',
      op,
      key,
      after,
      before: r() < 0.3 ? { ...key } : null,
      missing,
      position: String(1e6 + Math.floor(r() * 9e6)).padStart(24, '0'),
      commitTs: r() < 0.9 ? '2026-12-06T10:00:00.000Z' : '2026-12-06 10:00:00.123456+00',
      txId: r() < 0.2 ? null : r() < 0.8 ? String(Math.floor(r() * 1e6)) : text(6) || 'x',
      schemaVersion: 1 + Math.floor(r() * 3),
      capture: pick(['dms', 'slot', 'poll', 'snapshot'] as const),
      synthetic: r() < 0.1,
    };
    // Through the validation the appliers run, so the events are what the append is given.
    out.push(validateChangeEvent(JSON.parse(JSON.stringify(raw))));
  }
  return out;
}

describe('the append COPY text straight from the events', () => {
  it('is the text of changelogRow through copyStageLoader, byte for byte, over random events and columns', async () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1e9);
    const runs = 300;
    let events = 0;
    const r = rng(seed);
    for (let run = 0; run < runs; run++) {
      const batch = randomEvents(r, 1 + Math.floor(r() * (run % 10 === 0 ? 2000 : 40)));
      events += batch.length;
      const columns = [...NAMES, ...RESERVED].filter(() => r() < 0.8).sort(() => r() - 0.5);
      const appliedAt = r() < 0.9 ? new Date(1.7e12 + Math.floor(r() * 1e10)).toISOString() : 'odd\tapplied\\at';
      const at = `seed ${seed}, run ${run}: ${batch.length} events, columns ${JSON.stringify(columns)}`;
      const rows = batch.map((e) => changelogRow(e, columns, appliedAt));
      const before = await copied((c) => copyStageLoader.load(c, '"t"', columns, rows));
      const after = await copied((c) => copyStageLoader.loadCopyText!(c, '"t"', columns, changelogCopyText(batch, columns, appliedAt)));
      expect(after.bytes.equals(before.bytes), at).toBe(true);
      for (const chunk of after.chunks) expect(chunk[chunk.length - 1], `${at}: a chunk ends within a line`).toBe(0x0a);
      const lineOf = changelogLineWriter(columns, appliedAt);
      expect(Buffer.from(batch.map(lineOf).join('')).equals(after.bytes), `${at}: the lines of changelogLineWriter`).toBe(true);
      for (const [i, e] of batch.entries()) expect(lineOf(e).split('\t').length, `${at}, event ${i}`).toBe(Math.max(1, columns.length));
    }
    console.log(`append COPY text: seed ${seed}, ${runs} batches, ${events} events`);
  });

  it('writes an empty line for a table of no columns, as the rows did', async () => {
    const events = randomEvents(rng(1), 3);
    expect(changelogLineWriter([], 'x')(events[0]!)).toBe('\n');
    expect(Buffer.concat([...changelogCopyText(events, [], 'x')]).toString()).toBe('\n\n\n');
  });
});
