/**
 * The Redshift dialect's reads of rows by their key's value (docs/warehouse-apply.md, "Redshift: the applier"): what
 * completes an update that lacks columns (the view's row) and a primary-key change's insert half (its old key's
 * changelog rows). Pure: SQL text. Key values are staged texts written with `rsText`.
 */
import { rsIdent, rsLiteral, rsQualified, rsText, LOAD_COLUMN, RANK, type RedshiftTable } from './redshift-sql.ts';
import { UNHELD_COLUMN, type RedshiftColumn } from './redshift-types.ts';
import { CdcColumn } from './warehouse-sql.ts';

/** A column's value as the text `redshiftText` stages (varbyte comes back as hex without its `\x`). */
export function stagedTextOf(c: RedshiftColumn, alias: string): string {
  const col = `${alias}.${rsIdent(c.name)}`;
  switch (c.kind) {
    case 'varchar':
      return col;
    case 'super':
      return `JSON_SERIALIZE(${col})`;
    case 'varbyte':
      return `TO_HEX(${col})`;
    case 'boolean':
      return `CASE WHEN ${col} IS NULL THEN NULL WHEN ${col} THEN 'true' ELSE 'false' END`;
    default:
      return `CAST(${col} AS varchar(256))`;
  }
}

/**
 * The view's current values of `columns` for `keys` (key values as staged text), each as the text
 * a staged field holds: what an update that does not carry every column is completed with
 * (docs/warehouse-apply.md, "Redshift: the applier"). The key columns come back first, as text too; `unheld` is
 * the row's marker text (which of its NULLs are values Redshift could not hold).
 */
export function currentRowsSql(r: RedshiftTable, keys: readonly (readonly string[])[], columns: readonly RedshiftColumn[]): string {
  if (keys.length === 0) throw new RangeError('currentRowsSql needs at least one key');
  const { t } = r;
  const match = keys.map((k) => `(${r.key.map((c, i) => `v.${rsIdent(c.name)} = CAST(${rsText(k[i]!)} AS ${c.type})`).join(' AND ')})`).join(' OR ');
  const cols = [...r.key, ...columns].map((c, i) => `${stagedTextOf(c, 'v')} AS c${i}`);
  return `SELECT ${cols.join(', ')}, v.${rsIdent(UNHELD_COLUMN)} AS unheld FROM ${rsQualified(t.schema, t.view)} v WHERE ${match}`;
}

/** `key` (values as staged text) matched on the alias `alias`. */
export function keyLiterals(r: RedshiftTable, alias: string, key: readonly string[]): string {
  return r.key.map((c, i) => `${alias}.${rsIdent(c.name)} = CAST(${rsText(key[i]!)} AS ${c.type})`).join(' AND ');
}

/**
 * Whether the delete half of a primary-key change (old key `oldKey`, at `position`) is in the changelog (`n`):
 * then every earlier event of the old key is too (its shard loads them in order), so its image just before
 * the change is known (docs/primary-key-changes.md; docs/warehouse-apply.md, "Redshift: the applier").
 */
export function keyChangeDeleteSql(r: RedshiftTable, oldKey: readonly string[], position: string): string {
  const pos = rsIdent(CdcColumn.POSITION);
  return (
    `SELECT COUNT(*) AS n FROM ${rsQualified(r.t.schema, r.t.changelog)} c WHERE ${keyLiterals(r, 'c', oldKey)} ` +
    `AND c.${pos} = ${rsLiteral(position)} AND c.${rsIdent(CdcColumn.OP)} = 'delete'`
  );
}

/**
 * The old key's image just before a primary-key change at `position`: its newest changelog row below it (the
 * changelog keeps every loaded event; the old key's row after a truncate was loaded before its delete half);
 * `op` says whether it is a delete (no image), `unheld` is its marker text. The values of `columns` come back as
 * staged text (`c0`, `c1`, …), what the change's insert half is completed with.
 */
export function keyChangeDonorSql(r: RedshiftTable, oldKey: readonly string[], position: string, columns: readonly RedshiftColumn[]): string {
  const pos = rsIdent(CdcColumn.POSITION);
  const ranked =
    `SELECT c.*, row_number() OVER (PARTITION BY ${r.key.map((k) => `c.${rsIdent(k.name)}`).join(', ')} ORDER BY c.${pos} DESC, c.${rsIdent(LOAD_COLUMN)}) AS ${rsIdent(RANK)} ` +
    `FROM ${rsQualified(r.t.schema, r.t.changelog)} c WHERE ${keyLiterals(r, 'c', oldKey)} AND c.${pos} < ${rsLiteral(position)}`;
  const cols = columns.map((c, i) => `${stagedTextOf(c, 'h')} AS c${i}`);
  return `SELECT ${[`h.${rsIdent(CdcColumn.OP)} AS op`, `h.${rsIdent(UNHELD_COLUMN)} AS unheld`, ...cols].join(', ')} FROM (${ranked}) h WHERE h.${rsIdent(RANK)} = 1`;
}
