/**
 * Packed snapshot records (lambda/core/capture/slot-record.ts, docs/snapshot.md "Packed records"): the
 * encoder (`packChunkRecords`) against the per-row records of the same chunk (`chunkRecords`),
 * the byte budget, the full validator's errors, `cdc decode`'s decoder, and the normalizer's
 * handling of a poison row inside a packed record (the others go on; it is dead-lettered alone,
 * named, and loses nothing).
 *
 * The randomized part: random tables (types, keys, nulls, awkward text), random masking and
 * exclusion rules and random budgets; a packed chunk must decode, and normalize, to exactly the
 * events the per-row records of the same chunk give. Count `CDC_PACKED_PROPERTY_RUNS` (default
 * 400), seed `CDC_PROPERTY_SEED` (default random), both printed.
 */
import { describe, expect, it } from 'vitest';
import { chunkRecords, packChunkRecords, snapshotStreamRecords, type SnapshotColumn, type SnapshotTableShape } from '../../../lambda/core/snapshot/snapshot.ts';
import { decodeRawRecord, type DecodeContext } from '../../../lambda/core/capture/decode.ts';
import { parseJsonExact } from '../../../lambda/core/shared/json-exact.ts';
import { partitionKeyOf, type ChangeEvent } from '../../../lambda/core/shared/event.ts';
import { isPackedSlotRecord, packedRowRecord, validatePackedHeader, validatePackedSnapshotRecord } from '../../../lambda/core/capture/slot-record.ts';
import { NO_COLUMN_RULES, type ColumnRules } from '../../../lambda/core/tables/masking.ts';
import { Normalizer, type ChangeLogWriter, type NormalizerLogger } from '../../../lambda/core/capture/normalize.ts';
import { validateChangeEvent } from '../../../lambda/core/shared/event.ts';
import { TableConfigIndex } from '../../../lambda/core/tables/table-config.ts';
import { seededRandom } from '../../../local/seeded-random.ts';
import { MemoryControlPlane } from '../../helpers/memory-control-plane.ts';

const RUNS = Number(process.env.CDC_PACKED_PROPERTY_RUNS ?? 400);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const READ = { lowWatermark: '0/16B3748', readAt: '2026-12-01T00:00:00.000000Z' };
const ctx: DecodeContext = { source: 'src', keyColumns: () => null, columns: () => null };
const quiet: NormalizerLogger = { debug() {}, info() {}, warn() {}, error() {} };

const SHAPE: SnapshotTableShape = {
  table: 'public.t',
  columns: [
    { name: 'id', type: 'bigint', typeOid: 20 },
    { name: 'v', type: 'text', typeOid: 25 },
    { name: 'n', type: 'numeric', typeOid: 1700, fullType: 'numeric(12,2)' },
    { name: 'email', type: 'text', typeOid: 25 },
  ],
  key: ['id'],
};
const rowsOf = (n: number): (string | null)[][] =>
  Array.from({ length: n }, (_, i) => [String(i + 1), i % 3 === 0 ? null : `v"${i}\\é`, `${i}.50`, `p${i}@example.com`]);

/** The changes a list of raw record texts decodes to, in order. */
function decodeAll(texts: readonly string[]) {
  return texts.flatMap((t) => {
    const d = decodeRawRecord(parseJsonExact(t), ctx);
    if (d.kind !== 'changes') throw new Error(`decoded to ${d.kind}`);
    return d.changes;
  });
}

describe('packed snapshot records', () => {
  it('round trip: the packed records of a chunk are JSON.stringify of a valid packed record and decode to the per-row records’ changes, row for row', () => {
    const rules: ColumnRules = { mask: ['email'], exclude: ['n'] };
    const read = { ...READ, rows: rowsOf(50) };
    const packed = packChunkRecords('src', SHAPE, read, rules);
    expect(packed).toHaveLength(1);
    const p = validatePackedSnapshotRecord(parseJsonExact(packed[0]!.data));
    expect(JSON.stringify(p)).toBe(packed[0]!.data);
    expect(p.columns).toEqual([
      { name: 'id', type: 'bigint' },
      { name: 'v', type: 'text' },
      { name: 'email', type: 'text' },
    ]);
    expect(p.rows).toHaveLength(50);
    expect(packed[0]!.data).not.toContain('example.com');
    const perRow = chunkRecords('src', SHAPE, read, rules);
    expect(p.rows.map((_, i) => packedRowRecord(p, i))).toEqual(perRow);
    expect(decodeAll(packed.map((r) => r.data))).toEqual(decodeAll(perRow.map((r) => JSON.stringify(r))));
    // The partition key is the first row's, as a per-row record of that row would have.
    const sha = (s: string) => s;
    expect(snapshotStreamRecords(packed, sha)[0]!.partitionKey).toBe(partitionKeyOf({ source: 'src', table: 'public.t', key: { id: 1 } }, sha));
  });

  it('records are cut at the byte budget (UTF-8 bytes, not characters); a row larger than the budget travels alone', () => {
    const read = { ...READ, rows: rowsOf(400) };
    for (const budget of [600, 2_000, 10_000]) {
      const packed = packChunkRecords('src', SHAPE, read, NO_COLUMN_RULES, budget);
      expect(packed.length).toBeGreaterThan(1);
      for (const r of packed) expect(Buffer.byteLength(r.data, 'utf8')).toBeLessThanOrEqual(budget);
      // Filled: adding the next record's first row would have gone over.
      const parsed = packed.map((r) => validatePackedSnapshotRecord(parseJsonExact(r.data)));
      for (let i = 0; i + 1 < parsed.length; i++) {
        const next = JSON.stringify(parsed[i + 1]!.rows[0]);
        expect(Buffer.byteLength(packed[i]!.data, 'utf8') + 1 + Buffer.byteLength(next, 'utf8')).toBeGreaterThan(budget);
      }
      expect(parsed.flatMap((p) => p.rows.map((row) => row[0]))).toEqual(read.rows.map((r) => Number(r[0])));
      expect(packed.reduce((n, r) => n + r.rows, 0)).toBe(400);
    }
    const big = packChunkRecords(
      'src',
      SHAPE,
      {
        ...READ,
        rows: [
          ['1', 'x'.repeat(5_000), null, null],
          ['2', 'y', null, null],
        ],
      },
      NO_COLUMN_RULES,
      1_000,
    );
    expect(big.map((r) => r.rows)).toEqual([1, 1]);
    expect(packChunkRecords('src', SHAPE, { ...READ, rows: [] }, NO_COLUMN_RULES)).toEqual([]);
  });

  it('the full validator names what is wrong: the field, the row index and the column', () => {
    const good = JSON.parse(packChunkRecords('src', SHAPE, { ...READ, rows: rowsOf(5) }, NO_COLUMN_RULES)[0]!.data) as Record<string, unknown>;
    const bad = (patch: (r: Record<string, unknown>) => void): unknown => {
      const r = structuredClone(good);
      patch(r);
      return r;
    };
    const cases: [unknown, RegExp][] = [
      [bad((r) => ((r.rows as unknown[][])[3]![1] = { nested: undefined })), /rows\[3\]\[1\].*column "v"/],
      [bad((r) => (r.rows as unknown[][])[2]!.pop()), /rows\[2\].*3 values for 4 columns/],
      [bad((r) => ((r.rows as unknown[])[4] = 'not a row')), /rows\[4\].*expected an array/],
      [bad((r) => ((r.rows as unknown[][])[1]![0] = null)), /rows\[1\]\[0\].*primary-key column "id"/],
      [bad((r) => (r.rows = [])), /rows.*at least one row/],
      [bad((r) => ((r.columns as Record<string, unknown>[])[1]!.value = 1)), /columns\[1\]\.value/],
      [bad((r) => ((r.columns as Record<string, unknown>[])[2]!.type = '')), /columns\[2\]\.type/],
      [bad((r) => ((r.columns as Record<string, unknown>[])[3]!.name = 'v')), /columns\[3\]\.name.*appears twice/],
      [bad((r) => (r.key = ['nope'])), /key.*"nope" is not in columns/],
      [bad((r) => (r.op = 'insert')), /op.*expected "snapshot"/],
      [bad((r) => (r.oldKey = null)), /oldKey.*carries no oldKey/],
      [bad((r) => (r.commitLsn = 'x')), /commitLsn/],
    ];
    for (const [record, message] of cases) expect(() => validatePackedSnapshotRecord(record)).toThrow(message);
    // `cdc decode`'s decoder refuses the same records with the same names.
    for (const [record, message] of cases) expect(() => decodeRawRecord(record, ctx)).toThrow(message);
    expect(() => validatePackedSnapshotRecord(good)).not.toThrow();
  });

  it('old per-row snapshot records still decode, next to packed ones', () => {
    const read = { ...READ, rows: rowsOf(3) };
    const old = chunkRecords('src', SHAPE, read, NO_COLUMN_RULES).map((r) => JSON.stringify(r));
    const packed = packChunkRecords('src', SHAPE, read, NO_COLUMN_RULES).map((r) => r.data);
    expect(isPackedSlotRecord(JSON.parse(old[0]!))).toBe(false);
    expect(decodeAll([...old, ...packed])).toEqual([...decodeAll(old), ...decodeAll(old)]);
    expect(decodeAll(old).every((c) => c.op === 'snapshot' && c.capture === 'snapshot' && c.txId === null)).toBe(true);
  });

  it('the normalizer: a poison row is dead-lettered alone, named, as a record of that row only; the rows around it are published', async () => {
    const h = harness();
    const good = JSON.parse(packChunkRecords('src', SHAPE, { ...READ, rows: rowsOf(6) }, NO_COLUMN_RULES)[0]!.data) as { rows: unknown[][] };
    good.rows[2]![0] = null; // a null key
    good.rows[4] = ['5', 'only two']; // a short row
    await h.run([JSON.stringify(good)]);
    expect(h.published.map((e) => e.key)).toEqual([{ id: 1 }, { id: 2 }, { id: 4 }, { id: 6 }]);
    expect(h.published.every((e) => e.op === 'snapshot' && e.capture === 'snapshot' && e.schemaVersion === 1)).toBe(true);
    const letters = await h.controlPlane.listDeadLetters('normalizer');
    expect(letters.map((l) => l.reason)).toEqual([
      expect.stringMatching(/^row 2 of 6 of a packed snapshot record: .*rows\[2\]\[0\].*primary-key column "id"/),
      expect.stringMatching(/^row 4 of 6 of a packed snapshot record: rows\[4\].*2 values for 4 columns/),
    ]);
    for (const l of letters) {
      expect(l.origin).toBe('raw/shardId-000000000000/1');
      expect(l.table).toBe('public.t');
      // The letter keeps the row whole, as a packed record of that row alone.
      const kept = validatePackedHeader(parseJsonExact(l.record!));
      expect(kept.rows).toHaveLength(1);
    }
    expect(JSON.parse(letters[0]!.record!).rows[0]).toEqual(good.rows[2]);
    expect(JSON.parse(letters[1]!.record!).rows[0]).toEqual(good.rows[4]);
  });

  it('the normalizer: a packed record with bad shared fields is dead-lettered whole', async () => {
    const h = harness();
    const text = packChunkRecords('src', SHAPE, { ...READ, rows: rowsOf(3) }, NO_COLUMN_RULES)[0]!.data.replace('"op":"snapshot"', '"op":"insert"');
    await h.run([text]);
    expect(h.published).toEqual([]);
    const letters = await h.controlPlane.listDeadLetters('normalizer');
    expect(letters).toHaveLength(1);
    expect(letters[0]!.record).toBe(text);
    expect(letters[0]!.reason).toMatch(/op/);
  });

  it(`randomized: a packed chunk decodes and normalizes to exactly the events of the per-row records (${RUNS} runs)`, async () => {
    console.log(`packed snapshot records: ${RUNS} runs, seed ${SEED} (CDC_PROPERTY_SEED, CDC_PACKED_PROPERTY_RUNS)`);
    const rand = seededRandom(SEED);
    for (let run = 0; run < RUNS; run++) {
      const c = randomCase(rand);
      const at = `run ${run} (seed ${SEED}): ${JSON.stringify({ columns: c.shape.columns.map((x) => x.type), key: c.shape.key, rules: c.rules, rows: c.rows.length, budget: c.budget })}`;
      const perRow = chunkRecords('src', c.shape, { ...READ, rows: c.rows }, c.rules).map((r) => JSON.stringify(r));
      const packed = packChunkRecords('src', c.shape, { ...READ, rows: c.rows }, c.rules, c.budget);
      for (const r of packed) expect(Buffer.byteLength(r.data, 'utf8') <= c.budget || r.rows === 1, at).toBe(true);
      expect(
        packed.reduce((n, r) => n + r.rows, 0),
        at,
      ).toBe(c.rows.length);
      expect(decodeAll(packed.map((r) => r.data)), at).toEqual(decodeAll(perRow));
      // Through the normalizer (registration, versions, rules, validation), every 20th run.
      if (run % 20 === 0) {
        const table = { table: c.shape.table, deleteMode: 'soft' as const, mask: [...c.rules.mask], exclude: [...c.rules.exclude] };
        const a = harness([table]);
        const b = harness([table]);
        await a.run(perRow);
        await b.run(packed.map((r) => r.data));
        expect(b.published, at).toEqual(a.published);
        const lettersA = await a.controlPlane.listDeadLetters();
        const lettersB = await b.controlPlane.listDeadLetters();
        expect(
          lettersB.map((l) => l.code),
          at,
        ).toEqual(lettersA.map((l) => l.code));
        expect(a.published.length + lettersA.length, at).toBe(c.rows.length);
      }
    }
  });
});

function harness(tables: ConstructorParameters<typeof TableConfigIndex>[0] = []) {
  const controlPlane = new MemoryControlPlane();
  const published: ChangeEvent[] = [];
  const changeLog: ChangeLogWriter<string> = {
    encode: (e) => JSON.stringify(e),
    async publishEncoded(records) {
      for (const r of records) published.push(validateChangeEvent(JSON.parse(r)));
    },
  };
  const normalizer = new Normalizer({
    source: 'src',
    tables: new TableConfigIndex(tables),
    controlPlane,
    changeLog,
    metrics: { count() {}, milliseconds() {} },
    logger: quiet,
    now: () => new Date('2026-12-01T00:00:01Z'),
  });
  let seq = 0;
  return {
    controlPlane,
    published,
    async run(texts: readonly string[]) {
      const batch = normalizer.startBatch();
      for (const text of texts) await batch.add({ text, origin: `raw/shardId-000000000000/${++seq}` });
      await batch.flush();
    },
  };
}

/** Column kinds: the type, its oid, and output texts as PostgreSQL prints them. */
const KINDS: { type: string; typeOid: number; fullType?: string; value: (r: () => number, i: number) => string }[] = [
  { type: 'integer', typeOid: 23, value: (r) => String(Math.floor(r() * 4e9) - 2e9) },
  { type: 'smallint', typeOid: 21, value: (r) => String(Math.floor(r() * 65536) - 32768) },
  {
    type: 'bigint',
    typeOid: 20,
    value: (r) => (r() < 0.3 ? `${r() < 0.5 ? '-' : ''}9223372036854775${Math.floor(r() * 800)}` : String(Math.floor(r() * 1e12))),
  },
  {
    type: 'numeric',
    typeOid: 1700,
    fullType: 'numeric(20,4)',
    value: (r) => (r() < 0.1 ? 'NaN' : `${r() < 0.5 ? '-' : ''}${Math.floor(r() * 1e6)}.${String(Math.floor(r() * 1e4)).padStart(4, '0')}`),
  },
  { type: 'double precision', typeOid: 701, value: (r) => ['NaN', 'Infinity', '-Infinity', '0.1', '1e+100', '-3.5', '123456.789'][Math.floor(r() * 7)]! },
  { type: 'real', typeOid: 700, value: (r) => ['1.5', '-0.25', '3.4028235e+38'][Math.floor(r() * 3)]! },
  { type: 'boolean', typeOid: 16, value: (r) => (r() < 0.5 ? 't' : 'f') },
  {
    type: 'text',
    typeOid: 25,
    value: (r, i) =>
      ['', 'plain', 'q"uote', 'back\\slash', 'tab\tnew\nline', 'ü😀', '\u0001ctl', `row ${i}`, 'x'.repeat(Math.floor(r() * 300))][Math.floor(r() * 9)]!,
  },
  { type: 'character varying', typeOid: 1043, fullType: 'character varying(40)', value: (r) => `v${Math.floor(r() * 1000)}` },
  {
    type: 'timestamp with time zone',
    typeOid: 1184,
    value: (r) => `2026-0${1 + Math.floor(r() * 9)}-1${Math.floor(r() * 9)} 12:00:0${Math.floor(r() * 9)}.${Math.floor(r() * 999999)}+00`,
  },
  { type: 'bit varying', typeOid: 1562, fullType: 'bit varying(8)', value: (r) => (r() < 0.5 ? '1011' : '0') },
  { type: 'jsonb', typeOid: 3802, value: (r) => (r() < 0.5 ? '{"a": [1, 2], "b": null}' : 'null') },
  { type: 'uuid', typeOid: 2950, value: (r) => `a0eebc99-9c0b-4ef8-bb6d-6bb9bd38${String(Math.floor(r() * 9999)).padStart(4, '0')}` },
];
const KEY_KINDS = KINDS.filter((k) => ['integer', 'bigint', 'text', 'uuid', 'numeric', 'character varying'].includes(k.type));

function randomCase(rand: () => number): { shape: SnapshotTableShape; rules: ColumnRules; rows: (string | null)[][]; budget: number } {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const width = 1 + Math.floor(rand() * 7);
  const keyWidth = 1 + Math.floor(rand() * Math.min(2, width));
  const kinds = Array.from({ length: width }, (_, i) => (i < keyWidth ? pick(KEY_KINDS) : pick(KINDS)));
  const columns: SnapshotColumn[] = kinds.map((k, i) => ({
    name: i === 0 ? 'id' : `c${i}`,
    type: k.type,
    typeOid: k.typeOid,
    ...(k.fullType ? { fullType: k.fullType } : {}),
  }));
  // Key columns in a random order of the first `keyWidth`.
  const key = columns.slice(0, keyWidth).map((c) => c.name);
  if (rand() < 0.5) key.reverse();
  const others = columns.slice(keyWidth).map((c) => c.name);
  const rules: ColumnRules = { mask: others.filter(() => rand() < 0.3), exclude: [] };
  rules.exclude = others.filter((n) => !rules.mask.includes(n) && rand() < 0.2);
  const n = 1 + Math.floor(rand() * 60);
  const rows = Array.from({ length: n }, (_, i) =>
    kinds.map((k, j) => (j >= keyWidth && rand() < 0.2 ? null : j === 0 && k.typeOid === 25 ? `k${i}-${k.value(rand, i)}` : k.value(rand, i))),
  );
  const budget = pick([300, 1_000, 4_000, 64 * 1024]);
  return { shape: { table: pick(['public.t', 'app.orders']), columns, key }, rules, rows, budget };
}
