/**
 * Packing a chunk straight from its COPY text (lambda/core/snapshot/snapshot.ts, `packChunkRecords` with
 * `copyText`, docs/performance-log.md, "Snapshot read packed straight from the COPY text") against the reference: the same chunk parsed first
 * (`parseCopyText`) and packed from its rows. The records must be the same, byte for byte (JSON
 * text, rows per record, partition-key values), and so must the errors; the row count and the
 * cursor taken from the text must be those of the parsed rows; packing in steps
 * (`packChunkSteps`) must pause every `rowsPerStep` rows and give the same records; and the
 * worker must pause between the steps (`yieldToIo`) and record the same chunks.
 *
 * The randomized part: random tables of every supported type (integers in and out of the fast
 * path's range, non-canonical integer text, numeric, floats, booleans, text with COPY escapes,
 * quotes, control characters, non-ASCII and astral characters, timestamps, json, uuid, bit
 * strings), NULLs, random masking and exclusion rules, random byte budgets and step sizes. Count
 * `CDC_COPY_PACK_PROPERTY_RUNS` (default 500), seed `CDC_PROPERTY_SEED` (default random), both
 * printed.
 */
import { describe, expect, it } from 'vitest';
import {
  chunkEndKey,
  chunkRowCount,
  copyChunkRead,
  cursorAfter,
  packChunkRecords,
  packChunkSteps,
  parseCopyText,
  SnapshotTableError,
  type ChunkRead,
  type SnapshotColumn,
  type SnapshotRawRecord,
  type SnapshotTableShape,
} from '../../../lambda/core/snapshot/snapshot.ts';
import { requestSnapshot, runTableSnapshot, type SnapshotReader } from '../../../lambda/core/snapshot/snapshot-worker.ts';
import { FixedPacer } from '../../../lambda/core/snapshot/snapshot-pacer.ts';
import { NO_COLUMN_RULES, type ColumnRules } from '../../../lambda/core/tables/masking.ts';
import { seededRandom } from '../../../local/seeded-random.ts';
import { MemoryControlPlane } from '../../helpers/memory-control-plane.ts';

const RUNS = Number(process.env.CDC_COPY_PACK_PROPERTY_RUNS ?? 500);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const READ = { lowWatermark: '0/16B3748', readAt: '2026-12-01T00:00:00.000000Z' };

/** A value as COPY's text format writes it (PostgreSQL's COPY documentation, "Text Format"): `\N` for null, backslash escapes. */
function copyField(v: string | null): string {
  if (v === null) return '\\N';
  return v.replace(/[\\\b\f\n\r\t\v]/g, (c) => ({ '\\': '\\\\', '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t', '\v': '\\v' })[c]!);
}
const copyText = (rows: readonly (readonly (string | null)[])[]): string => rows.map((r) => `${r.map(copyField).join('\t')}\n`).join('');

/** Both packers' records for the same chunk: from the rows (the reference), and from their COPY text. */
function both(
  shape: SnapshotTableShape,
  rows: (string | null)[][],
  rules: ColumnRules,
  budget?: number,
): { reference: SnapshotRawRecord[]; fromText: SnapshotRawRecord[]; text: string } {
  const text = copyText(rows);
  return {
    reference: packChunkRecords('src', shape, { ...READ, rows }, rules, budget),
    fromText: packChunkRecords('src', shape, { ...READ, rows: [], copyText: text }, rules, budget),
    text,
  };
}

const SHAPE: SnapshotTableShape = {
  table: 'public.t',
  columns: [
    { name: 'id', type: 'bigint', typeOid: 20 },
    { name: 'v', type: 'text', typeOid: 25 },
    { name: 'n', type: 'integer', typeOid: 23 },
    { name: 'ok', type: 'boolean', typeOid: 16 },
  ],
  key: ['id'],
};

describe('packing from COPY text', () => {
  it('gives the reference records for awkward values: escapes, quotes, control characters, unicode, non-canonical and large integers, masks', () => {
    const rows = [
      ['1', 'tab\there\nnew "q" back\\slash \u0001 é 😀', '007', 't'],
      ['2', '', '-0', 'f'],
      ['9007199254740993', null, '-2147483648', null],
      ['123456789012345', '\\N', '1234567890123456', 't'],
    ];
    for (const rules of [NO_COLUMN_RULES, { mask: ['v', 'n', 'ok'], exclude: [] }, { mask: ['v'], exclude: ['n'] }]) {
      const { reference, fromText } = both(SHAPE, rows, rules);
      expect(fromText).toEqual(reference);
    }
    const { fromText } = both(SHAPE, rows, NO_COLUMN_RULES);
    expect(JSON.parse(fromText[0]!.data).rows).toEqual([
      [1, 'tab\there\nnew "q" back\\slash \u0001 é 😀', 7, true],
      [2, '', 0, false],
      ['9007199254740993', null, -2147483648, null],
      [123456789012345, '\\N', 1234567890123456, true],
    ]);
  });

  it('the same errors as the reference: a row with another number of fields, a value that is not of its type, a text that is not whole lines', () => {
    const short = 'a\tb\n1\tx\t5\tt\n';
    expect(() => packChunkRecords('src', SHAPE, { ...READ, rows: [], copyText: `1\tx\t5\tt\n${short}` }, NO_COLUMN_RULES)).toThrow(
      'public.t chunk: row 2 has 2 fields, expected 4',
    );
    expect(() => parseCopyText(`1\tx\t5\tt\n${short}`, 4, 'public.t chunk')).toThrow('public.t chunk: row 2 has 2 fields, expected 4');
    expect(() => packChunkRecords('src', SHAPE, { ...READ, rows: [], copyText: '1\tx\t5\tt\textra\n' }, NO_COLUMN_RULES)).toThrow(
      'row 1 has 5 fields, expected 4',
    );
    // A bad value in row 1 and a short row 3: the reference (which parses first) reports row 3, and so does this.
    expect(() => packChunkRecords('src', SHAPE, { ...READ, rows: [], copyText: '1\tx\tfive\tt\n2\tx\t5\tt\n3\tx\n' }, NO_COLUMN_RULES)).toThrow(
      'public.t chunk: row 3 has 2 fields, expected 4',
    );
    const bad = [['1', 'x', '5.5', 't']];
    expect(() => both(SHAPE, bad, NO_COLUMN_RULES)).toThrow(SnapshotTableError);
    let reference: unknown;
    let fromText: unknown;
    try {
      packChunkRecords('src', SHAPE, { ...READ, rows: bad }, NO_COLUMN_RULES);
    } catch (e) {
      reference = (e as Error).message;
    }
    try {
      packChunkRecords('src', SHAPE, { ...READ, rows: [], copyText: copyText(bad) }, NO_COLUMN_RULES);
    } catch (e) {
      fromText = (e as Error).message;
    }
    expect(fromText).toBe(reference);
    expect(reference).toMatch(/column n \(integer\)/);
    expect(() => packChunkRecords('src', SHAPE, { ...READ, rows: [], copyText: '1\tx\t5\tt' }, NO_COLUMN_RULES)).toThrow('does not end with a newline');
    expect(() => copyChunkRead({ ...READ, fenceXid: '1', fenceWaitMs: 0, readMs: 0, fromReplica: false }, '1\tx', 4, 'public.t chunk')).toThrow(
      'does not end with a newline',
    );
    // A masked or excluded key is refused before anything is read, from text as from rows.
    expect(() => packChunkRecords('src', SHAPE, { ...READ, rows: [], copyText: '' }, { mask: ['id'], exclude: [] })).toThrow('keys are never masked');
  });

  it('a chunk read with COPY text: rows parsed only when read (and kept), counted and keyed from the text', () => {
    const rows = [
      ['1', 'a\tb', '5', 't'],
      ['2', null, '6', 'f'],
    ];
    const read = copyChunkRead({ ...READ, fenceXid: '1', fenceWaitMs: 0, readMs: 0, fromReplica: false }, copyText(rows), 4, 'public.t chunk');
    expect(chunkRowCount(read)).toBe(2);
    expect(chunkEndKey(SHAPE, read)).toEqual(['2']);
    expect(read.rows).toEqual(rows);
    expect(read.rows).toBe(read.rows);
    const empty = copyChunkRead({ ...READ, fenceXid: '1', fenceWaitMs: 0, readMs: 0, fromReplica: false }, '', 4, 'public.t chunk');
    expect([chunkRowCount(empty), chunkEndKey(SHAPE, empty), empty.rows, packChunkRecords('src', SHAPE, empty, NO_COLUMN_RULES)]).toEqual([0, null, [], []]);
    // One row whose only column (the key) is the empty string: its text is a lone newline.
    const oneColumn: SnapshotTableShape = { ...SHAPE, columns: [SHAPE.columns[0]!], key: [SHAPE.columns[0]!.name] };
    const lone = copyChunkRead({ ...READ, fenceXid: '1', fenceWaitMs: 0, readMs: 0, fromReplica: false }, '\n', 1, 'public.t chunk');
    expect([chunkRowCount(lone), chunkEndKey(oneColumn, lone), lone.rows]).toEqual([1, [''], [['']]]);
    const twoRows = copyChunkRead({ ...READ, fenceXid: '1', fenceWaitMs: 0, readMs: 0, fromReplica: false }, 'a\n\n', 1, 'public.t chunk');
    expect([chunkRowCount(twoRows), chunkEndKey(oneColumn, twoRows)]).toEqual([2, ['']]);
  });

  it('in steps: pauses after every rowsPerStep rows (not after the last), same records', () => {
    const rows = Array.from({ length: 2_500 }, (_, i) => [String(i + 1), `v${i}`, String(i), i % 2 ? 't' : 'f']);
    const text = copyText(rows);
    for (const [per, pauses] of [
      [1000, 2],
      [500, 4],
      [2_500, 0],
      [7, 357],
    ] as const) {
      const steps = packChunkSteps('src', SHAPE, { ...READ, rows: [], copyText: text }, NO_COLUMN_RULES, 64 * 1024, per);
      let n = 0;
      let step = steps.next();
      for (; !step.done; step = steps.next()) n++;
      expect(n, `${per} rows per step`).toBe(pauses);
      expect(step.value).toEqual(packChunkRecords('src', SHAPE, { ...READ, rows }, NO_COLUMN_RULES, 64 * 1024));
    }
    expect(() => packChunkSteps('src', SHAPE, { ...READ, rows: [], copyText: text }, NO_COLUMN_RULES, 1000, 0).next()).toThrow('rows per step');
  });

  it('the worker pauses between packing steps (the read ahead runs in the pauses) and records the same chunks, with a crash and a resume', async () => {
    const rows = Array.from({ length: 4_500 }, (_, i) => [String(i + 1), `v${i}`, String(i), 't']);
    let reads = 0;
    const reader = (failAt: number | null): SnapshotReader => ({
      describe: async () => SHAPE,
      estimateRows: async () => rows.length,
      readChunk: async (_s, after, limit): Promise<ChunkRead> => {
        reads++;
        if (reads === failAt) throw new Error('connection lost');
        const from = after === null ? 0 : rows.findIndex((x) => Number(x[0]) > Number(after[0]));
        const slice = from < 0 ? [] : rows.slice(from, from + limit);
        return copyChunkRead(
          { lowWatermark: `0/${(0x1000 + reads).toString(16)}`, fenceXid: String(reads), readAt: READ.readAt, fenceWaitMs: 0, readMs: 1, fromReplica: false },
          copyText(slice),
          4,
          'public.t chunk',
        );
      },
    });
    const controlPlane = new MemoryControlPlane();
    await requestSnapshot(controlPlane, { source: 's', table: 'public.t', reason: 'initial', actor: 'planner' });
    const published: SnapshotRawRecord[][] = [];
    let pauses = 0;
    const run = (failAt: number | null) =>
      runTableSnapshot({
        controlPlane,
        reader: reader(failAt),
        publish: async (recs) => void published.push(recs),
        pacer: new FixedPacer(2_000),
        source: 's',
        table: 'public.t',
        rules: NO_COLUMN_RULES,
        owner: 'w1',
        yieldToIo: async () => void pauses++,
      });
    // The read ahead of chunk 2 fails: chunk 1 is packed, published and recorded, then the error surfaces.
    await expect(run(2)).rejects.toThrow('connection lost');
    expect((await controlPlane.getSnapshot('s', 'public.t'))!.cursor).toEqual(['2000']);
    expect(await run(null)).toBe('done');
    const s = (await controlPlane.getSnapshot('s', 'public.t'))!;
    expect([s.status, s.rowsDone, s.chunksDone, s.cursor]).toEqual(['done', 4_500, 3, ['4500']]);
    const chunks = await controlPlane.listSnapshotChunks('s', 'public.t', s.run);
    expect(chunks.map((c) => [c.startAfter, c.endKey, c.rows])).toEqual([
      [null, ['2000'], 2_000],
      [['2000'], ['4000'], 2_000],
      [['4000'], ['4500'], 500],
    ]);
    // One pause after row 1,000 of each full chunk (chunks 1 and 2), none in the last (500 rows).
    expect(pauses).toBe(2);
    const rowsPublished = published.flat().flatMap((r) => JSON.parse(r.data).rows as unknown[][]);
    expect(rowsPublished.map((r) => r[0])).toEqual([...Array.from({ length: 2_000 }, (_, i) => i + 1), ...Array.from({ length: 2_500 }, (_, i) => 2_001 + i)]);
  });

  it(`randomized: records from COPY text are the reference records, byte for byte (${RUNS} runs)`, () => {
    console.log(`packing from COPY text: ${RUNS} runs, seed ${SEED} (CDC_PROPERTY_SEED, CDC_COPY_PACK_PROPERTY_RUNS)`);
    const rand = seededRandom(SEED);
    for (let run = 0; run < RUNS; run++) {
      const c = randomCase(rand);
      const at = `run ${run} (seed ${SEED}): ${JSON.stringify({ columns: c.shape.columns.map((x) => x.type), key: c.shape.key, rules: c.rules, rows: c.rows.length, budget: c.budget })}`;
      const { reference, fromText, text } = both(c.shape, c.rows, c.rules, c.budget);
      // The test's COPY writer is COPY's format: the reference parser reads back the rows.
      expect(parseCopyText(text, c.shape.columns.length), at).toEqual(c.rows);
      expect(fromText, at).toEqual(reference);
      expect(fromText.map((r) => r.data).join('\n'), at).toBe(reference.map((r) => r.data).join('\n'));
      const read = { ...READ, rows: [], copyText: text };
      expect(chunkRowCount(read), at).toBe(c.rows.length);
      expect(chunkEndKey(c.shape, read), at).toEqual(cursorAfter(c.shape, c.rows));
      const per = 1 + Math.floor(rand() * 20);
      const steps = packChunkSteps('src', c.shape, read, c.rules, c.budget, per);
      let pauses = 0;
      let step = steps.next();
      for (; !step.done; step = steps.next()) pauses++;
      expect(pauses, at).toBe(Math.ceil(c.rows.length / per) - 1);
      expect(step.value, at).toEqual(reference);
    }
  });
});

/** Column kinds: the type, its oid, and output texts as PostgreSQL prints them (plus texts it does not print, where the reference still converts them). */
const KINDS: { type: string; typeOid: number; fullType?: string; value: (r: () => number, i: number) => string }[] = [
  {
    type: 'integer',
    typeOid: 23,
    value: (r) => (r() < 0.1 ? pickOf(r, ['0', '-0', '007', '-00', '2147483647', '-2147483648']) : String(Math.floor(r() * 4e9) - 2e9)),
  },
  { type: 'smallint', typeOid: 21, value: (r) => String(Math.floor(r() * 65536) - 32768) },
  { type: 'oid', typeOid: 26, value: (r) => String(Math.floor(r() * 4e9)) },
  {
    type: 'bigint',
    typeOid: 20,
    value: (r) =>
      pickOf(r, [
        `${r() < 0.5 ? '-' : ''}9223372036854775${Math.floor(r() * 800)}`,
        String(Math.floor(r() * 1e12)),
        '999999999999999',
        '-999999999999999',
        '1000000000000000',
        '9007199254740991',
        '9007199254740992',
        '-9007199254740993',
        '0',
        '0000123',
      ]),
  },
  {
    type: 'numeric',
    typeOid: 1700,
    fullType: 'numeric(20,4)',
    value: (r) =>
      r() < 0.1
        ? pickOf(r, ['NaN', 'Infinity', '-Infinity', '1e+5'])
        : `${r() < 0.5 ? '-' : ''}${Math.floor(r() * 1e6)}.${String(Math.floor(r() * 1e4)).padStart(4, '0')}`,
  },
  {
    type: 'double precision',
    typeOid: 701,
    value: (r) => pickOf(r, ['NaN', 'Infinity', '-Infinity', '0.1', '1e+100', '-3.5', '123456.789', '-0', '0', '1e+20', '12345678901234567']),
  },
  { type: 'real', typeOid: 700, value: (r) => pickOf(r, ['1.5', '-0.25', '3.4028235e+38', '1e-05']) },
  { type: 'boolean', typeOid: 16, value: (r) => (r() < 0.5 ? 't' : 'f') },
  { type: 'text', typeOid: 25, value: (r, i) => randomText(r, i) },
  {
    type: 'character varying',
    typeOid: 1043,
    fullType: 'character varying(40)',
    value: (r, i) => (r() < 0.5 ? `v${Math.floor(r() * 1000)}` : randomText(r, i)),
  },
  {
    type: 'timestamp with time zone',
    typeOid: 1184,
    value: (r) => `2026-0${1 + Math.floor(r() * 9)}-1${Math.floor(r() * 9)} 12:00:0${Math.floor(r() * 9)}.${Math.floor(r() * 999999)}+00`,
  },
  { type: 'bit varying', typeOid: 1562, fullType: 'bit varying(8)', value: (r) => (r() < 0.5 ? '1011' : '0') },
  { type: 'jsonb', typeOid: 3802, value: (r) => pickOf(r, ['{"a": [1, 2], "b": null}', 'null', '"q\\"uote"', '{"t": "tab\\t"}']) },
  { type: 'uuid', typeOid: 2950, value: (r) => `a0eebc99-9c0b-4ef8-bb6d-6bb9bd38${String(Math.floor(r() * 9999)).padStart(4, '0')}` },
  { type: 'text[]', typeOid: 1009, value: (r) => pickOf(r, ['{a,b}', '{"x y","q\\"z"}', '{}', '{NULL}']) },
];
const KEY_KINDS = KINDS.filter((k) => ['integer', 'bigint', 'text', 'uuid', 'numeric', 'character varying'].includes(k.type));

function pickOf<T>(r: () => number, xs: readonly T[]): T {
  return xs[Math.floor(r() * xs.length)]!;
}

/** Text with everything that needs care: COPY escapes, JSON escapes, control characters, non-ASCII, astral characters, the text `\N`. */
function randomText(r: () => number, i: number): string {
  const parts = [
    '',
    'plain',
    'q"uote',
    'back\\slash',
    '\\N',
    'N',
    'tab\tnew\nline\rcr',
    '\b\f\v',
    '\u0001ctl\u001f',
    '\u007f',
    'ü',
    'é\u0301',
    '😀',
    '\u2028\u2029',
    '中文',
    't',
    `row ${i}`,
    'x'.repeat(Math.floor(r() * 300)),
  ];
  let out = '';
  for (let n = Math.floor(r() * 4); n > 0; n--) out += pickOf(r, parts);
  return out;
}

function randomCase(rand: () => number): { shape: SnapshotTableShape; rules: ColumnRules; rows: (string | null)[][]; budget: number } {
  const width = 1 + Math.floor(rand() * 8);
  const keyWidth = 1 + Math.floor(rand() * Math.min(2, width));
  const kinds = Array.from({ length: width }, (_, i) => (i < keyWidth ? pickOf(rand, KEY_KINDS) : pickOf(rand, KINDS)));
  const columns: SnapshotColumn[] = kinds.map((k, i) => ({
    name: i === 0 ? 'id' : `c${i}`,
    type: k.type,
    typeOid: k.typeOid,
    ...(k.fullType ? { fullType: k.fullType } : {}),
  }));
  const key = columns.slice(0, keyWidth).map((c) => c.name);
  if (rand() < 0.5) key.reverse();
  const others = columns.slice(keyWidth).map((c) => c.name);
  const rules: ColumnRules = { mask: others.filter(() => rand() < 0.3), exclude: [] };
  rules.exclude = others.filter((n) => !rules.mask.includes(n) && rand() < 0.2);
  const n = 1 + Math.floor(rand() * 80);
  const rows = Array.from({ length: n }, (_, i) =>
    kinds.map((k, j) => (j >= keyWidth && rand() < 0.2 ? null : j === 0 && k.typeOid === 25 ? `k${i}-${k.value(rand, i)}` : k.value(rand, i))),
  );
  const budget = pickOf(rand, [200, 600, 2_000, 8_000, 256 * 1024]);
  return { shape: { table: pickOf(rand, ['public.t', 'app.orders']), columns, key }, rules, rows, budget };
}
