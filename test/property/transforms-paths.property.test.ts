/**
 * Property: per-event transforms (lambda/core/tables/transforms.ts, docs/transforms.md) give the same
 * output on every path. For every seed: a random table (integer key, columns of several types,
 * some masked), a random row, random transforms (renames, coercions that may or may not fit the
 * value, a tenant stamp from a constant or a template), and three deliveries of the same row
 * through the real normalizer (in-memory control plane):
 *
 * - stream: the row as the slot capture publishes it (a test_decoding INSERT line, parsed by the
 *   capture's parser, `buildSlotRecord`);
 * - snapshot: the row as the snapshot worker publishes it (the type output texts, `chunkRecords`);
 * - replay: the stream record delivered again after the table's transforms were changed and a
 *   newer record registered them (a DMS task resumed from its checkpoint, a raw-stream retry).
 *
 * All three must agree: the same key and `after` image (event by event, schema version included
 * for the replay), or the same dead letter (code and reason) when a value does not coerce, in
 * which case nothing of the row reaches the change log. Count `CDC_TRANSFORM_PROPERTY_RUNS`
 * (default 400), seed `CDC_PROPERTY_SEED` (default random), both printed.
 */
import { describe, expect, it } from 'vitest';
import { Normalizer, type ChangeLogWriter, type NormalizerLogger, type NormalizerMetrics } from '../../lambda/core/capture/normalize.ts';
import { validateChangeEvent, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { TableConfigIndex, type TableConfig } from '../../lambda/core/tables/table-config.ts';
import { chunkRecords, type SnapshotTableShape } from '../../lambda/core/snapshot/snapshot.ts';
import { buildSlotRecord } from '../../lambda/core/capture/slot-record.ts';
import { parseTestDecodingLine } from '../../lambda/core/capture/logical-text.ts';
import type { TableTransforms } from '../../lambda/core/tables/transforms.ts';
import { applyColumnRules, applyColumnRulesToColumns } from '../../lambda/core/tables/masking.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';

const RUNS = Number(process.env.CDC_TRANSFORM_PROPERTY_RUNS ?? 400);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);

const quiet: NormalizerLogger = { debug() {}, info() {}, warn() {}, error() {} };
const noMetrics: NormalizerMetrics = { count() {}, milliseconds() {} };

interface ColType {
  /** As test_decoding prints it. */
  type: string;
  oid: number;
  /** A random value's output text. */
  gen: (r: () => number) => string;
  /** How test_decoding prints it in a line. */
  literal: (text: string) => string;
}
const pick = <T>(r: () => number, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
const quoted = (t: string) => `'${t.replaceAll("'", "''")}'`;
const TYPES: ColType[] = [
  { type: 'integer', oid: 23, gen: (r) => String(Math.floor(r() * 2_000_000) - 1_000_000), literal: (t) => t },
  { type: 'numeric', oid: 1700, gen: (r) => pick(r, ['0', '12.5', '-3.25', '1234567.891', '99999999999999999999.5', '7']), literal: (t) => t },
  {
    type: 'text',
    oid: 25,
    gen: (r) => pick(r, ['abc', "it's", '42', '-17', '3.5', 'true', 'no', '2026-02-28', '2026-02-30', '2026-01-31 10:00:00+00', '', 'ü ☃']),
    literal: quoted,
  },
  { type: 'boolean', oid: 16, gen: (r) => (r() < 0.5 ? 't' : 'f'), literal: (t) => (t === 't' ? 'true' : 'false') },
  { type: 'date', oid: 1082, gen: (r) => pick(r, ['2026-01-31', '1999-12-31', '2000-02-29']), literal: quoted },
  { type: 'timestamp with time zone', oid: 1184, gen: (r) => pick(r, ['2026-01-31 10:00:00+00', '2026-06-01 23:59:59.123456+02']), literal: quoted },
];
const COERCE = ['text', 'bigint', 'double precision', 'boolean', 'date', 'timestamptz', 'numeric(12,2)', 'numeric(38,4)'];

interface Case {
  config: TableConfig;
  later: TableTransforms;
  shape: SnapshotTableShape;
  texts: (string | null)[];
}

function genCase(r: () => number): Case {
  const n = 2 + Math.floor(r() * 5);
  const columns = [{ name: 'id', type: 'integer', typeOid: 23 }];
  for (let i = 0; i < n; i++) {
    const t = pick(r, TYPES);
    columns.push({ name: `c${i}`, type: t.type, typeOid: t.oid });
  }
  const texts = columns.map((c, i) => (i === 0 ? String(1 + Math.floor(r() * 1000)) : r() < 0.1 ? null : TYPES.find((t) => t.oid === c.typeOid)!.gen(r)));
  const mask = columns
    .slice(1)
    .filter(() => r() < 0.15)
    .map((c) => c.name);
  const transforms = (): TableTransforms => {
    const t: TableTransforms = {};
    const coerce: Record<string, string> = {};
    const rename: Record<string, string> = {};
    for (const c of columns) {
      if (r() < 0.25) coerce[c.name] = mask.includes(c.name) ? 'text' : pick(r, c.name === 'id' ? ['bigint', 'text', 'numeric(12,2)'] : COERCE);
      if (r() < 0.3) rename[c.name] = `${c.name}_r${Math.floor(r() * 3)}`;
    }
    if (Object.keys(coerce).length > 0) t.coerce = coerce;
    if (Object.keys(rename).length > 0) t.rename = rename;
    if (r() < 0.5) t.tenant = { column: 'tenant', value: pick(r, ['acme', '{source}', '{schema}:{table}', 't-{tableId}']) };
    return t;
  };
  return {
    config: { table: 'public.t', key: ['id'], deleteMode: 'soft', mask, exclude: [], transforms: transforms() },
    later: transforms(),
    shape: { table: 'public.t', columns, key: ['id'] },
    texts,
  };
}

/** The stream path: the row as a test_decoding INSERT line, parsed by the capture's parser, as a slot record. */
function streamRecord(c: Case, commitLsn: string, index: number): string {
  const parts = c.shape.columns
    .map((col, i) => ` ${col.name}[${col.type}]:${c.texts[i] === null ? 'null' : TYPES.find((t) => t.oid === col.typeOid)!.literal(c.texts[i]!)}`)
    .join('');
  const parsed = parseTestDecodingLine(`table public.t: INSERT:${parts}`);
  if (parsed.kind !== 'change') throw new Error('not a change line');
  // The capture masks before publishing (lambda/core/tables/masking.ts), as the snapshot worker does.
  const row = applyColumnRules(Object.fromEntries(parsed.change.columns!.map((x) => [x.name, x.value])), c.config);
  const cols = applyColumnRulesToColumns(parsed.change.columns!, c.config).map((col) => ({ ...col, value: row[col.name]! }));
  return JSON.stringify(
    buildSlotRecord(
      { source: 'shop', xid: '900', commitLsn, commitTs: '2026-12-01T10:00:00.000000Z' },
      index,
      { table: 'public.t', op: 'insert', columns: cols, oldKey: null, unchanged: [] },
      ['id'],
    ),
  );
}

function setup(config: TableConfig) {
  const controlPlane = new MemoryControlPlane();
  const published: ChangeEvent[] = [];
  const changeLog: ChangeLogWriter<string> = {
    encode: (e) => JSON.stringify(e),
    async publishEncoded(records) {
      for (const x of records) published.push(validateChangeEvent(JSON.parse(x)));
    },
  };
  let tables = new TableConfigIndex([config]);
  const make = () => new Normalizer({ source: 'shop', tables, controlPlane, changeLog, metrics: noMetrics, logger: quiet });
  let normalizer = make();
  let seq = 0;
  return {
    controlPlane,
    published,
    reconfigure(next: TableConfig) {
      tables = new TableConfigIndex([next]);
      normalizer = make(); // a redeployed normalizer with the new configuration
    },
    async run(text: string) {
      const batch = normalizer.startBatch();
      await batch.add({ text, origin: `raw/shardId-000000000000/${++seq}` });
      await batch.flush();
    },
  };
}

type Outcome = { kind: 'event'; key: unknown; after: unknown; schemaVersion: number } | { kind: 'dead-letter'; code: string; reason: string };

async function outcome(env: ReturnType<typeof setup>, before: number, deadBefore: number): Promise<Outcome> {
  const dead = await env.controlPlane.listDeadLetters();
  if (dead.length > deadBefore) {
    expect(env.published.length).toBe(before); // a dead-lettered row never reaches the change log
    return { kind: 'dead-letter', code: dead.at(-1)!.code, reason: dead.at(-1)!.reason };
  }
  expect(env.published.length).toBe(before + 1);
  const e = env.published.at(-1)!;
  return { kind: 'event', key: e.key, after: e.after, schemaVersion: e.schemaVersion };
}

describe('transforms give the same output on the stream, snapshot and replay paths', () => {
  it(`random tables, rows and transforms (seed ${SEED}, ${RUNS} runs)`, async () => {
    console.log(`transforms-paths property: seed ${SEED} (CDC_PROPERTY_SEED), ${RUNS} runs (CDC_TRANSFORM_PROPERTY_RUNS)`);
    const r = seededRandom(SEED);
    let deadLettered = 0;
    let coerced = 0;
    for (let run = 0; run < RUNS; run++) {
      const c = genCase(r);
      const ctx = `seed ${SEED} run ${run}: ${JSON.stringify({ config: c.config, later: c.later, texts: c.texts })}`;
      const stream = setup(c.config);
      const stream1 = streamRecord(c, '0/5000', 0);
      await stream.run(stream1);
      const a = await outcome(stream, 0, 0);

      const snap = setup(c.config);
      await snap.run(
        JSON.stringify(chunkRecords('shop', c.shape, { lowWatermark: '0/5001', rows: [c.texts], readAt: '2026-12-01T10:00:01.000000Z' }, c.config)[0]),
      );
      const b = await outcome(snap, 0, 0);
      expect(b.kind, ctx).toBe(a.kind);
      if (a.kind === 'event' && b.kind === 'event') {
        expect(b.key, ctx).toEqual(a.key);
        expect(b.after, ctx).toEqual(a.after);
        expect(b.schemaVersion, ctx).toBe(a.schemaVersion);
        if (c.config.transforms?.coerce) coerced++;
      } else if (a.kind === 'dead-letter' && b.kind === 'dead-letter') {
        expect(b.code, ctx).toBe(a.code);
        expect(b.reason, ctx).toBe(a.reason);
        expect(a.code, ctx).toMatch(/^TRANSFORM_/);
        deadLettered++;
      }

      // Replay: the transforms change; a newer record registers them; the old record comes again.
      if (a.kind !== 'event') continue;
      stream.reconfigure({ ...c.config, transforms: c.later });
      await stream.run(streamRecord(c, '0/6000', 0));
      const published = stream.published.length;
      const dead = (await stream.controlPlane.listDeadLetters()).length;
      await stream.run(stream1);
      const replay = await outcome(stream, published, dead);
      expect(replay, ctx).toEqual(a);
    }
    console.log(`transforms-paths property: ${RUNS} runs, ${coerced} with coercions applied, ${deadLettered} dead-lettered on both paths`);
    expect(deadLettered).toBeGreaterThan(0);
    expect(coerced).toBeGreaterThan(0);
  });
});
