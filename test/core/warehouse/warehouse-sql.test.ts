import { describe, expect, it } from 'vitest';
import { UnsafeIdentifierError } from '../../../lambda/core/shared/errors.ts';
import { fitIdentifier, MAX_IDENTIFIER_BYTES } from '../../../lambda/core/warehouse/warehouse-names.ts';
import {
  addColumnSql,
  appendChangelogSql,
  applyStageSql,
  assertSourceColumn,
  catalogType,
  clearStagesSql,
  createChangelogSql,
  createDeletedKeysSql,
  createMirrorSql,
  createSchemaSql,
  createStagesSql,
  createTruncationsSql,
  createHandoverSql,
  lockHandoverSql,
  countHandoverSql,
  readHandoverSql,
  clearHandoverSql,
  createViewSql,
  lockMirrorSql,
  recordTruncationSql,
  storedTruncationSql,
  truncateMirrorSql,
  dropStagesSql,
  insertValuesSql,
  mirrorRowsSql,
  rowsPerStatement,
  sinkType,
  stageNames,
  storedStateSql,
  warehouseTable,
  MAX_PARAMETERS,
  TEXT_TYPE,
  partnerInsertsSql,
  createDeltaSql,
  createOverlayViewSql,
  overlayAggregateSql,
  lockDeltaSql,
  mergeSql,
  qualified,
  catalogLiteralSql,
  mergeIntoEmptySql,
  baseRowsSql,
  csvBody,
  mirrorLayout,
  MIRROR_CDC_COLUMNS,
} from '../../../lambda/core/warehouse/warehouse-sql.ts';
import { deltaStatsSql, pendingBoundsSql } from '../../../lambda/core/warehouse/watermark-sql.ts';

describe('sinkType', () => {
  it.each([
    ['integer', 'bigint'],
    ['smallint', 'bigint'],
    ['bigint', 'bigint'],
    ['INT4', 'bigint'],
    ['INT8', 'bigint'],
    ['real', 'double precision'],
    ['double precision', 'double precision'],
    ['REAL8', 'double precision'],
    ['float(24)', 'double precision'],
    ['numeric(12,2)', 'numeric(38,2)'],
    ['numeric(10)', 'numeric(38,0)'],
    ['DECIMAL(5, 3)', 'numeric(38,3)'],
    ['numeric', TEXT_TYPE],
    ['numeric(60,2)', TEXT_TYPE],
    ['boolean', 'boolean'],
    ['BOOLEAN', 'boolean'],
    ['date', 'date'],
    ['timestamp without time zone', 'timestamp'],
    ['timestamp(3) without time zone', 'timestamp'],
    ['timestamp with time zone', 'timestamptz'],
    ['timestamptz', 'timestamptz'],
    ['DATETIME', 'timestamp'],
    ['text', TEXT_TYPE],
    ['character varying(20)', TEXT_TYPE],
    ['character(3)', TEXT_TYPE],
    ['jsonb', TEXT_TYPE],
    ['uuid', TEXT_TYPE],
    ['integer[]', TEXT_TYPE],
    ['time without time zone', TEXT_TYPE],
    ['WSTRING', TEXT_TYPE],
    ['NCLOB', TEXT_TYPE],
    ['UINT8', TEXT_TYPE],
  ])('%s → %s', (sourceId, sink) => {
    expect(sinkType(sourceId)).toBe(sink);
  });

  it('maps an unknown type to text', () => {
    expect(sinkType(null)).toBe(TEXT_TYPE);
  });

  it('maps every text-carried type to unbounded text on PostgreSQL, varchar(65535) on Redshift (docs/types.md)', () => {
    for (const t of ['text', 'bytea', 'json', 'jsonb', 'numeric', 'integer[]', 'interval', null]) {
      expect(sinkType(t, 'postgres'), String(t)).toBe('text');
      expect(sinkType(t, 'redshift'), String(t)).toBe(TEXT_TYPE);
    }
    expect(sinkType('bigint', 'postgres')).toBe('bigint');
    expect(sinkType('numeric(12,2)', 'postgres')).toBe('numeric(38,2)');
  });

  it('absorbs every integer widening without a column-type change', () => {
    expect(new Set(['smallint', 'integer', 'bigint'].map((t) => sinkType(t))).size).toBe(1);
  });

  it('reads catalog types back in the same spelling', () => {
    const col = (data_type: string, extra: Partial<Parameters<typeof catalogType>[0]> = {}) =>
      catalogType({ table_name: 't', column_name: 'c', data_type, character_maximum_length: null, numeric_precision: null, numeric_scale: null, ...extra });
    expect(col('bigint')).toBe(sinkType('integer'));
    expect(col('numeric', { numeric_precision: 38, numeric_scale: '2' })).toBe(sinkType('numeric(12,2)'));
    expect(col('character varying', { character_maximum_length: '65535' })).toBe(sinkType('text'));
    expect(col('timestamp with time zone')).toBe(sinkType('timestamptz'));
    expect(col('timestamp without time zone')).toBe(sinkType('timestamp'));
  });
});

describe('warehouse names', () => {
  it('derives the schema and table names', () => {
    expect(warehouseTable('demo', 'public.orders')).toEqual({
      source: 'demo',
      tableId: 'public.orders',
      schema: 'demo_public',
      changelog: '_cdc_changelog_orders',
      mirror: '_cdc_mirror_orders',
      deletedKeys: '_cdc_deleted_keys_orders',
      truncations: '_cdc_truncations_orders',
      handover: '_cdc_handover_orders',
      delta: '_cdc_delta_orders',
      watermark: '_cdc_watermark_orders',
      appendOrder: '_cdc_append_order_orders',
      view: 'orders',
    });
    // A source id with `_` writes it as `$`, so the first `_` ends the source (docs/architecture.md §5.4, "Names").
    expect(warehouseTable('a_b', 'c.orders').schema).toBe('a$b_c');
    expect(warehouseTable('a', 'b_c.orders').schema).toBe('a_b_c');
    expect(() => warehouseTable('demo', 'public._cdc_mirror_x')).toThrow(/reserved for the platform/);
    expect(() => warehouseTable('demo', 'public._CDC_x')).toThrow(/reserved for the platform/);
    expect(warehouseTable('demo', 'public.orders', { schema: 'demo_public_shadow' })).toMatchObject({
      schema: 'demo_public_shadow',
      mirror: '_cdc_mirror_orders',
      view: 'orders',
    });
    expect(() => warehouseTable('demo', 'public.orders', { schema: 'x.y' })).toThrow(UnsafeIdentifierError);
  });

  it('shortens long names with a stable hash instead of letting PostgreSQL truncate them', () => {
    const long = 'a'.repeat(60);
    const t = warehouseTable('demo', `public.${long}`);
    for (const n of [t.changelog, t.mirror, t.deletedKeys]) expect(n.length).toBe(MAX_IDENTIFIER_BYTES);
    expect(t.deletedKeys.startsWith('_cdc_deleted_keys_aaa')).toBe(true);
    expect(warehouseTable('demo', `public.${long}`)).toEqual(t);
    expect(fitIdentifier(`${long}_cdc_mirror_x`)).not.toBe(fitIdentifier(`${long}_cdc_mirror_y`));
  });

  it.each(['a.b.c', 'public.', 'public.a\\b', `public.${'é'.repeat(32)}`, 'public.t\u0000'])('refuses table id %j by name', (id) => {
    expect(() => warehouseTable('demo', id)).toThrow(UnsafeIdentifierError);
  });

  it('carries any other name PostgreSQL accepts, quoted with " doubled (docs/onboarding.md, "Names")', () => {
    const t = warehouseTable('demo', 'Sales Dept."Orders" 2026');
    expect(t).toMatchObject({ schema: 'demo_Sales Dept', view: '"Orders" 2026', mirror: '_cdc_mirror_"Orders" 2026' });
    expect(qualified(t.schema, t.view)).toBe('"demo_Sales Dept"."""Orders"" 2026"');
    expect(qualified(t.schema, warehouseTable('demo', "public.o'neil").view)).toBe(`"demo_Sales Dept"."o'neil"`);
    expect(catalogLiteralSql(warehouseTable('demo', "public.o'neil"))).toContain("'o''neil'");
    expect(assertSourceColumn('Total with tax', 'public.t')).toBe('Total with tax');
    expect(assertSourceColumn('a"b', 'public.t')).toBe('a"b');
  });

  it('refuses column names that cannot be carried or that use the platform prefix', () => {
    expect(assertSourceColumn('amount', 'public.t')).toBe('amount');
    expect(() => assertSourceColumn('x'.repeat(64), 'public.t')).toThrow(UnsafeIdentifierError);
    expect(() => assertSourceColumn('_cdc_position', 'public.t')).toThrow(/reserved/);
    expect(() => assertSourceColumn('_CDC_deleted', 'public.t')).toThrow(/reserved/);
  });

  it('gives each sink-table shape its own stage tables', () => {
    const t = warehouseTable('demo', 'public.t');
    const a = stageNames(t, ['id', 'a'], ['id', 'a']);
    expect(stageNames(t, ['id', 'a'], ['id', 'a'])).toEqual(a);
    expect(stageNames(t, ['id', 'a', 'b'], ['id', 'a', 'b']).events).not.toBe(a.events);
  });
});

describe('SQL text', () => {
  const t = warehouseTable('demo', 'public.orders');
  const key = [{ name: 'id', type: 'bigint' }];
  const data = [
    { name: 'status', type: TEXT_TYPE },
    { name: 'amount', type: 'numeric(38,2)' },
  ];
  const mirrorColumns = ['id', 'status', 'amount', '_cdc_position', '_cdc_deleted', '_cdc_deleted_at', '_cdc_applied_at'];
  const stages = stageNames(t, mirrorColumns, ['_cdc_position', 'id', 'status', 'amount']);
  const sets = [
    { id: 0, columns: ['status', 'amount'] },
    { id: 1, columns: ['status'] },
  ];
  const everything = (hard: boolean): string[] => [
    createSchemaSql(t),
    createChangelogSql(t, key, data),
    createMirrorSql(t, key, data),
    createDeletedKeysSql(t, key),
    createViewSql(t, mirrorColumns),
    addColumnSql(t.schema, t.mirror, { name: 'note', type: TEXT_TYPE }),
    createStagesSql(t, stages),
    clearStagesSql(stages, false),
    dropStagesSql(stages),
    insertValuesSql('"x"', ['a', 'b'], 3),
    appendChangelogSql(t, ['id'], ['_cdc_position', 'id', 'status'], stages),
    storedStateSql(t, ['id'], hard, stages),
    mirrorRowsSql(t, ['id'], 2),
    ...applyStageSql(t, { stages, key: ['id'], mirrorColumns, sets, hard, deletedKeys: hard }),
    ...applyStageSql(t, { stages, key: ['id'], mirrorColumns, sets, hard, deletedKeys: hard, truncations: true }),
    createTruncationsSql(t),
    lockMirrorSql(t),
    storedTruncationSql(t),
    recordTruncationSql(t),
    ...truncateMirrorSql(t, { hard, deletedKeys: hard }),
    createHandoverSql(t),
    lockHandoverSql(t),
    countHandoverSql(t),
    readHandoverSql(t),
    clearHandoverSql(t),
    partnerInsertsSql(t, 2),
    // Append-first (docs/warehouse-apply.md): the delta, the base+delta view, the merge (Redshift's lock).
    createDeltaSql(t, [
      { name: '_cdc_position', type: 'varchar(24) NOT NULL' },
      { name: 'id', type: 'bigint' },
    ]),
    createOverlayViewSql(t, mirrorColumns, ['id'], { deletedKeys: hard, truncations: true }),
    createOverlayViewSql(t, mirrorColumns, ['id'], { deletedKeys: false, truncations: false }),
    overlayAggregateSql(t, mirrorColumns, ['id'], { deletedKeys: hard, truncations: true }),
    overlayAggregateSql(t, mirrorColumns, ['id'], { deletedKeys: false, truncations: false }, { sum: '"id"', where: '"id" > $1' }),
    lockDeltaSql(t, 'redshift'),
    deltaStatsSql(t),
    ...mergeSql(t, {
      key: ['id'],
      mirrorColumns,
      changelogColumns: ['_cdc_position', '_cdc_op', 'id', 'status', 'amount'],
      hard,
      deletedKeys: hard,
      truncations: true,
      pending: { from: '0', to: '10' },
    }),
    // The merge into an empty base (a rebuild's fresh shadow) and its check.
    baseRowsSql(t, { deletedKeys: hard, truncations: true }),
    ...mergeIntoEmptySql(t, {
      key: ['id'],
      mirrorColumns,
      changelogColumns: ['_cdc_position', '_cdc_op', 'id', 'status', 'amount'],
      hard,
      deletedKeys: hard,
      truncations: true,
      pending: { from: '0', to: '10' },
    }),
  ];

  it('uses only what PostgreSQL and Redshift both accept (except the PostgreSQL-only occasional stage TRUNCATE)', () => {
    expect(clearStagesSql(stages, true)).toMatch(/^TRUNCATE "cdc_events_[0-9a-f]{8}", "cdc_writes_[0-9a-f]{8}"$/);
    expect(clearStagesSql(stages, false)).toMatch(/^DELETE FROM "cdc_events_[0-9a-f]{8}"; DELETE FROM "cdc_writes_[0-9a-f]{8}"$/);
    for (const sql of [...everything(false), ...everything(true)]) {
      expect(sql).not.toMatch(
        /ON CONFLICT|\bMERGE\b|DISTINCT ON|RETURNING|ON COMMIT|\bTRUNCATE\b|\bnow\(\)|CURRENT_TIMESTAMP|\bVALUES\s*\(.*\)\s+AS\b|ADD COLUMN IF NOT EXISTS|::/i,
      );
    }
  });

  it('the merge reads the changelog between the watermark and its bound, writes nothing to the changelog, and ends by moving the watermark (docs/warehouse-apply.md, "Objects per captured table")', () => {
    const o = {
      key: ['id'],
      mirrorColumns: ['_cdc_deleted', 'id', 'status', '_cdc_position', '_cdc_deleted_at', '_cdc_applied_at'],
      changelogColumns: ['_cdc_position', '_cdc_op', 'id', 'status'],
      hard: false,
      deletedKeys: false,
      truncations: true,
      pending: { from: '7', to: '42' },
    };
    for (const sqls of [mergeSql(t, o), mergeIntoEmptySql(t, o)]) {
      expect(
        sqls.some((x) => x.startsWith(`INSERT INTO ${qualified(t.schema, t.changelog)}`) || x.startsWith(`DELETE FROM ${qualified(t.schema, t.changelog)}`)),
      ).toBe(false);
      expect(sqls.join('; ')).toContain('"_cdc_seq" > 7 AND c."_cdc_seq" <= 42');
      expect(sqls.filter((x) => x.includes(qualified(t.schema, t.watermark)))).toEqual([
        `UPDATE ${qualified(t.schema, t.watermark)} SET "_cdc_seq" = 42 WHERE "_cdc_seq" < 42`,
      ]);
    }
    expect(() => mergeSql(t, { ...o, pending: { from: '0', to: '1; DROP TABLE x' } })).toThrow(RangeError);
  });

  it('Redshift load path: CSV that round-trips NULL, empty text, quotes, commas and newlines', () => {
    expect(
      csvBody([
        ['a', null, ''],
        ['say "hi", then\nleave', '1', null],
      ]),
    ).toBe('"a",,""\n"say ""hi"", then\nleave","1",\n');
  });

  it('quotes every identifier', () => {
    expect(createMirrorSql(t, key, data)).toBe(
      'CREATE TABLE IF NOT EXISTS "demo_public"."_cdc_mirror_orders" ("_cdc_deleted" boolean NOT NULL, "id" bigint NOT NULL, "status" varchar(65535), "amount" numeric(38,2), ' +
        '"_cdc_position" varchar(24) NOT NULL, "_cdc_deleted_at" timestamptz, "_cdc_applied_at" timestamptz NOT NULL, PRIMARY KEY ("id"))',
    );
    expect(createChangelogSql(t, key, data)).toContain('PRIMARY KEY ("_cdc_position", "id")');
  });

  it('makes new mirrors with the tombstone flag as their first column (a live-row count reads no data column, docs/performance-log.md, "Reconciliation: the tombstone flag first in the mirror"), in the order mirrorLayout gives', () => {
    const layout = mirrorLayout(key, data).map((c) => c.name);
    expect(layout[0]).toBe('_cdc_deleted');
    expect(layout).toEqual(['_cdc_deleted', 'id', 'status', 'amount', '_cdc_position', '_cdc_deleted_at', '_cdc_applied_at']);
    const created = /\((.*), PRIMARY KEY/
      .exec(createMirrorSql(t, key, data))![1]!
      .split(', ')
      .map((d) => JSON.parse(d.split(' ')[0]!) as string);
    expect(created).toEqual(layout);
    expect(new Set(MIRROR_CDC_COLUMNS.map((c) => c.name))).toEqual(new Set(['_cdc_position', '_cdc_deleted', '_cdc_deleted_at', '_cdc_applied_at']));
    // The view shows the same columns in the same order over a mirror of either layout (earlier mirrors: every platform column after the data).
    expect(createViewSql(t, layout)).toBe(createViewSql(t, mirrorColumns));
    expect(createOverlayViewSql(t, layout, ['id'], { deletedKeys: true, truncations: true })).toBe(
      createOverlayViewSql(t, mirrorColumns, ['id'], { deletedKeys: true, truncations: true }),
    );
  });

  it('builds a view that hides tombstones and the tombstone columns', () => {
    expect(createViewSql(t, mirrorColumns)).toBe(
      'CREATE OR REPLACE VIEW "demo_public"."orders" AS SELECT "id", "status", "amount", "_cdc_position", "_cdc_applied_at" FROM "demo_public"."_cdc_mirror_orders" WHERE NOT "_cdc_deleted"',
    );
  });

  it('numbers parameters row by row and keeps statements under the parameter limit', () => {
    expect(insertValuesSql('"s"', ['a', 'b'], 2)).toBe('INSERT INTO "s" ("a", "b") VALUES ($1, $2), ($3, $4)');
    expect(rowsPerStatement(40) * 40).toBeLessThanOrEqual(MAX_PARAMETERS);
    expect(rowsPerStatement(100_000)).toBe(1);
    expect(() => insertValuesSql('"s"', ['a', 'b'], MAX_PARAMETERS)).toThrow(RangeError);
  });

  it('guards every mirror write by position', () => {
    const soft = applyStageSql(t, { stages, key: ['id'], mirrorColumns, sets, hard: false, deletedKeys: false });
    expect(soft).toHaveLength(3); // two UPDATEs (one per column set) and one INSERT
    expect(soft[0]).toContain('"status" = stg."status", "amount" = stg."amount", "_cdc_position" = stg."_cdc_position"');
    expect(soft[1]).toContain('SET "status" = stg."status", "_cdc_position"');
    expect(soft[1]).not.toContain('"amount" =');
    for (const u of soft.slice(0, 2)) expect(u).toContain('"_cdc_mirror_orders"."_cdc_position" < stg."_cdc_position"');
    expect(soft[2]).toMatch(
      /^INSERT INTO "demo_public"."_cdc_mirror_orders" .* WHERE NOT EXISTS \(SELECT 1 FROM "demo_public"."_cdc_mirror_orders" m WHERE m."id" = stg."id"\)$/,
    );
  });

  it('oneUpdate: one UPDATE for every column set, a column keeping its own value for the sets without it (the merge, docs/warehouse-apply.md, "The merge")', () => {
    const one = applyStageSql(t, { stages, key: ['id'], mirrorColumns, sets, hard: false, deletedKeys: false, oneUpdate: true });
    expect(one).toHaveLength(2); // one UPDATE and the INSERT
    expect(one[0]).toContain(
      'SET "status" = stg."status", "amount" = CASE WHEN stg."_cdc_set" IN (0) THEN stg."amount" ELSE "_cdc_mirror_orders"."amount" END',
    );
    expect(one[0]).toContain('"_cdc_mirror_orders"."_cdc_position" < stg."_cdc_position"');
    expect(one[0]).not.toContain('stg."_cdc_set" =');
    const merge = mergeSql(t, {
      key: ['id'],
      mirrorColumns,
      changelogColumns: ['_cdc_position', '_cdc_op', 'id', 'status', 'amount'],
      hard: false,
      deletedKeys: false,
      truncations: true,
      pending: { from: '0', to: '10' },
    });
    expect(merge.filter((x) => x.startsWith('UPDATE "demo_public"."_cdc_mirror_orders"'))).toHaveLength(1);
  });

  it('the delta stats: a count of the delta view, or on PostgreSQL two steps of the append-order index (docs/warehouse-apply.md, "When a merge is due")', () => {
    expect(deltaStatsSql(t)).toBe('SELECT COUNT(*) AS n, MIN("_cdc_applied_at") AS oldest FROM "demo_public"."_cdc_delta_orders"');
    const fast = deltaStatsSql(t, { byAppendOrder: true });
    expect(fast).not.toContain('COUNT(');
    expect(fast).not.toContain(qualified(t.schema, t.delta));
    expect(fast).toContain('ORDER BY f."_cdc_seq" LIMIT 1');
    expect(pendingBoundsSql(t, '42')).toContain('42 AS "to"');
    expect(pendingBoundsSql(t, '42')).toContain('c."_cdc_seq" > w."_cdc_seq" AND c."_cdc_seq" <= 42');
    expect(() => pendingBoundsSql(t, '1; DROP TABLE x')).toThrow(RangeError);
  });

  it('in hard-delete mode deletes tombstoned rows and remembers their keys', () => {
    const hard = applyStageSql(t, { stages, key: ['id'], mirrorColumns, sets, hard: true, deletedKeys: true }).join(';\n');
    expect(hard).toContain('DELETE FROM "demo_public"."_cdc_mirror_orders" USING');
    expect(hard).toContain('INSERT INTO "demo_public"."_cdc_deleted_keys_orders"');
    expect(hard).toContain(
      'AND NOT EXISTS (SELECT 1 FROM "demo_public"."_cdc_deleted_keys_orders" d WHERE d."id" = stg."id" AND d."_cdc_position" >= stg."_cdc_position")',
    );
    expect(storedStateSql(t, ['id'], true, stages)).toContain('UNION ALL');
  });
});
