/**
 * Every statement the Redshift dialect emits passes the Redshift grammar check
 * (test/helpers/redshift-grammar.ts), and the check refuses what Redshift does not take.
 */
import { describe, expect, it } from 'vitest';
import { seededRandom } from '../../../local/seeded-random.ts';
import {
  copyManifestSql,
  createLedgerSql,
  createTableSql,
  evolveSql,
  existingColumnsSql,
  lastLoadSql,
  loadDoneSql,
  mergeSql,
  nextLoadIdSql,
  pendingCountSql,
  pendingStatsSql,
  insertTruncationsSql,
  recordLoadSql,
  RS_CHANGELOG_CDC,
  type RedshiftTable,
} from '../../../lambda/core/warehouse/redshift-sql.ts';
import { keyChangeDeleteSql, keyChangeDonorSql } from '../../../lambda/core/warehouse/redshift-key-sql.ts';
import { redshiftColumn } from '../../../lambda/core/warehouse/redshift-types.ts';
import { insertNewValuesSql, mergeSql as portableMergeSql, warehouseTable } from '../../../lambda/core/warehouse/warehouse-sql.ts';
import { baseEstimateSql } from '../../../lambda/core/warehouse/merge-nested-loops.ts';
import { redshiftProblems } from '../../helpers/redshift-grammar.ts';
import { completeHeldSql, heldCountsSql, heldKeysSql, heldRowsSql, keyRowsSql, removeHeldSql } from '../../../lambda/core/warehouse/redshift-handover-sql.ts';
import { UnsafeIdentifierError } from '../../../lambda/core/shared/errors.ts';

const SOURCE_TYPES = [
  'integer',
  'smallint',
  'bigint',
  'text',
  'varchar(20)',
  'char(3)',
  'uuid',
  'jsonb',
  'json',
  'integer[]',
  'bytea',
  'numeric(12,4)',
  'numeric',
  'numeric(50,2)',
  'real',
  'double precision',
  'boolean',
  'date',
  'timestamp',
  'timestamptz',
  'time',
  'timetz',
  'interval',
  'money',
  'mood_enum',
];
const ROLE = 'arn:aws:iam::123456789012:role/cdc-copy';

function randomTable(rand: () => number, i: number): RedshiftTable {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const keyTypes = ['integer', 'bigint', 'text', 'uuid', 'varchar(10)'];
  const key = Array.from({ length: 1 + Math.floor(rand() * 2) }, (_, k) => redshiftColumn(`k${k}`, pick(keyTypes)));
  const data = Array.from({ length: Math.floor(rand() * 6) }, (_, d) => redshiftColumn(`c${d}_${rand() < 0.3 ? 'Mixed' : 'x'}`, pick(SOURCE_TYPES)));
  return { t: warehouseTable(`src${i}`, `public.T${i}able`), key, data, hard: rand() < 0.5 };
}

/** Every statement the dialect makes for `r`. */
function statementsOf(r: RedshiftTable): string[] {
  return [
    ...createTableSql(r),
    ...mergeSql(r, 42),
    ...mergeSql(r, 42, true),
    ...evolveSql({ ...r, lacksTruncations: true }, r).transactional,
    insertTruncationsSql(r, 7, [
      { position: '0000000000000100/000001', commitTs: '2026-12-06T00:00:00Z', txId: '12', schemaVersion: 1, appliedAt: '2026-12-06T00:00:01Z' },
      { position: '0000000000000200/000000', commitTs: '2026-12-06T00:00:02Z', txId: null, schemaVersion: 2, appliedAt: '2026-12-06T00:00:03Z' },
    ]),
    pendingStatsSql(r),
    keyChangeDeleteSql(
      r,
      r.key.map(() => "o'1"),
      '0000000000000100/000001',
    ),
    keyChangeDonorSql(
      r,
      r.key.map(() => '1'),
      '0000000000000100/000001',
      r.data.length > 0 ? r.data : r.key,
    ),
    ...Object.values(
      evolveSql(r, {
        ...r,
        data: [...r.data.map((c) => (c.kind === 'varchar' ? { ...c, type: 'varchar(65535)', maxBytes: 65_535 } : c)), redshiftColumn('added_col', 'text')],
      }),
    ).flat(),
    ...evolveSql({ ...r, hard: false }, { ...r, hard: true }).transactional,
    ...evolveSql({ ...r, lacksHandover: true }, { ...r, data: [...r.data, redshiftColumn('added_col', 'text')] }).transactional,
    // Held primary-key changes (docs/primary-key-changes.md, "On Redshift").
    heldKeysSql(r),
    heldRowsSql(r),
    heldCountsSql([r, { ...r, t: warehouseTable('other', 'public.Second') }]),
    keyRowsSql(r, [r.key.map(() => "o'1"), r.key.map(() => '2')]),
    completeHeldSql(
      r,
      9,
      { key: r.key.map(() => '2'), position: '0000000000000100/000001', op: 'insert', missing: r.data.slice(0, 1).map((c) => c.name) },
      { key: r.key.map(() => "o'1"), position: '0000000000000100/000000' },
      'c0:too-long',
    ),
    completeHeldSql(r, 9, { key: r.key.map(() => '2'), position: '0000000000000100/000002', op: 'update', missing: r.data.map((c) => c.name) }, null, null),
    removeHeldSql(r, [
      { key: r.key.map(() => '2'), position: '0000000000000100/000001', op: 'insert' },
      { key: r.key.map(() => '2'), position: '0000000000000100/000002', op: 'update' },
    ]),
    copyManifestSql(r, 's3://staging-bucket/cdc/loads/7/t0-orders.manifest', ROLE),
    copyManifestSql(r, 's3://staging-bucket/cdc/loads/7/t0-orders.manifest', ROLE, 'eu-west-1'),
    pendingCountSql(r),
    existingColumnsSql(r),
    createLedgerSql('cdc_loader'),
    nextLoadIdSql('cdc_loader'),
    lastLoadSql('cdc_loader'),
    loadDoneSql('cdc_loader', 'cdc/loads/7'),
    recordLoadSql('cdc_loader', { loadId: 7, loadKey: 'cdc/loads/7', objects: 3, events: 10_000, at: new Date('2026-12-06T00:00:00Z') }),
    'BEGIN',
    'COMMIT',
    'ROLLBACK',
  ];
}

describe('the Redshift dialect against the Redshift grammar check', () => {
  it('every statement it emits passes, over random tables (seed printed)', () => {
    const seed = Math.floor(Math.random() * 0x7fffffff);
    const runs = 200;
    console.log(`redshift-sql grammar: ${runs} tables, seed ${seed}`);
    const rand = seededRandom(seed);
    let n = 0;
    for (let i = 0; i < runs; i++) {
      for (const s of statementsOf(randomTable(rand, i))) {
        expect(redshiftProblems(s), `seed ${seed}: ${s}`).toEqual([]);
        n++;
      }
    }
    expect(n).toBeGreaterThan(runs * 10);
  });

  it('refuses PostgreSQL-only constructs and what Redshift does not take', () => {
    const t = warehouseTable('s', 'public.orders');
    const bad: [string, RegExp][] = [
      [insertNewValuesSql('"s"."t"', ['a'], 1), /ON CONFLICT|bind parameter/],
      ['INSERT INTO "s"."t" ("a") VALUES (1) RETURNING "a"', /RETURNING/],
      ['COPY "s"."t" ("a") FROM STDIN', /FROM STDIN/],
      ['SELECT d."a" FROM "s"."t" d WHERE CAST(d."j" AS varchar(10)) = \'1\' AND d."j"::jsonb ->> \'x\' = \'1\'', /:: cast/],
      ['SELECT DISTINCT ON ("a") "a" FROM "s"."t"', /DISTINCT ON/],
      ['CREATE TABLE IF NOT EXISTS "s"."t" ("a" text)', /text type/],
      ['CREATE TABLE IF NOT EXISTS "s"."t" ("a" varchar(70000))', /outside Redshift's limits/],
      ['CREATE TABLE IF NOT EXISTS "s"."t" ("a" numeric(39,2))', /outside Redshift's limits/],
      ['CREATE TABLE IF NOT EXISTS "s"."t" ("a" jsonb)', /jsonb/],
      ['CREATE TABLE IF NOT EXISTS "s"."t" ("a" integer[])', /subscript|expected/],
      [
        'MERGE INTO "s"."t" USING (SELECT 1 AS "a") s ON "t"."a" = s."a" WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT ("a") VALUES (s."a")',
        /source must be a table/,
      ],
      [
        'MERGE INTO "s"."t" USING "x" s ON "t"."a" = s."a" WHEN MATCHED AND s."a" > 1 THEN DELETE WHEN NOT MATCHED THEN INSERT ("a") VALUES (s."a")',
        /WHEN MATCHED AND/,
      ],
      ['LOCK TABLE "s"."t" IN SHARE UPDATE EXCLUSIVE MODE', /LOCK … IN … MODE|not a statement form/],
      ['TRUNCATE "s"."t"', /TRUNCATE/],
      ['CREATE TABLE IF NOT EXISTS "s"."Mixed" ("a" bigint)', /not lower case/],
      [`COPY "s"."t" ("a") FROM 's3://b/k' IAM_ROLE '${ROLE}' MANIFEST FORMAT AS CSV MAXERROR 100`, /COPY parameter maxerror/],
      [baseEstimateSql(), /current_setting|pg_relation_size|:: cast|bind parameter|regclass|ANY/],
    ];
    for (const [sql, why] of bad) expect(redshiftProblems(sql).join('; '), sql).toMatch(why);
    // The PostgreSQL dialect's merge is not Redshift's (string_agg/jsonb functions, ON CONFLICT in the append): the check refuses it.
    const pgMerge = portableMergeSql(t, {
      key: ['id'],
      mirrorColumns: ['_cdc_deleted', 'id', '_cdc_position', '_cdc_deleted_at', '_cdc_applied_at'],
      changelogColumns: ['_cdc_position', 'id'],
      hard: false,
      deletedKeys: false,
      truncations: false,
      engine: 'postgres',
      pending: { from: '0', to: '10' },
    });
    expect(pgMerge.flatMap(redshiftProblems).join('; ')).toMatch(/is not one the dialect|ON CONFLICT/);
  });

  it('folds every name it emits to lower case', () => {
    const r: RedshiftTable = {
      t: warehouseTable('src', 'public.Orders'),
      key: [redshiftColumn('OrderId', 'integer')],
      data: [redshiftColumn('Note', 'text')],
      hard: true,
    };
    for (const s of statementsOf(r)) for (const [, name] of s.matchAll(/"((?:[^"]|"")*)"/g)) expect(name, s).toBe(name!.toLowerCase());
  });
});

describe('RS_CHANGELOG_CDC', () => {
  it("is the load id, the event's columns of the PostgreSQL changelog, the unheld columns and the applied time, in that order", () => {
    expect(RS_CHANGELOG_CDC).toEqual([
      { name: '_cdc_load', type: 'bigint NOT NULL' },
      { name: '_cdc_position', type: 'varchar(24) NOT NULL' },
      { name: '_cdc_op', type: 'varchar(8) NOT NULL' },
      { name: '_cdc_commit_ts', type: 'timestamptz NOT NULL' },
      { name: '_cdc_schema_version', type: 'integer NOT NULL' },
      { name: '_cdc_tx_id', type: 'varchar(256)' },
      { name: '_cdc_synthetic', type: 'boolean NOT NULL' },
      { name: '_cdc_unheld', type: 'varchar(65535)' },
      { name: '_cdc_applied_at', type: 'timestamptz NOT NULL' },
    ]);
  });
});

describe('copyManifestSql', () => {
  it('refuses what is not an S3 URI the loader makes, a role ARN or a region', () => {
    const r: RedshiftTable = { t: warehouseTable('s', 'public.t'), key: [redshiftColumn('id', 'integer')], data: [], hard: false };
    expect(copyManifestSql(r, 's3://bkt/p/a.manifest', ROLE)).toBe(
      `COPY "s_public"."_cdc_changelog_t" ("_cdc_load", "_cdc_position", "_cdc_op", "_cdc_commit_ts", "_cdc_schema_version", "_cdc_tx_id", "_cdc_synthetic", "_cdc_unheld", "_cdc_applied_at", "id") ` +
        `FROM 's3://bkt/p/a.manifest' IAM_ROLE '${ROLE}' MANIFEST FORMAT AS CSV GZIP TIMEFORMAT 'auto' DATEFORMAT 'auto' COMPUPDATE OFF STATUPDATE OFF`,
    );
    expect(() => copyManifestSql(r, "s3://bkt/p/a.csv' --", ROLE)).toThrow(UnsafeIdentifierError);
    expect(() => copyManifestSql(r, 's3://bkt/p/a.csv', "arn:aws:iam::1:role/r'")).toThrow(UnsafeIdentifierError);
    expect(() => copyManifestSql(r, 's3://bkt/p/a.csv', ROLE, "eu-west-1' x")).toThrow(UnsafeIdentifierError);
  });
});
