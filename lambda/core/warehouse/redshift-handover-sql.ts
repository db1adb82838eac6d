/**
 * The statements of primary-key changes held on Redshift (docs/primary-key-changes.md, "On Redshift"). Pure:
 * SQL text over `_cdc_handover_<t>` (`createHandoverSql`), the changelog and the truncations.
 *
 * A held event is a row of the handover table: its changelog row without a load id (its absent columns NULL),
 * `_cdc_missing` (the columns it lacks) and, for a key change's insert half, `_cdc_before` (its old key, a JSON
 * list of staged texts). The loader completes it inside a load's transaction: one `INSERT … SELECT` into the
 * changelog that takes the missing columns from the donor's changelog row and the rest from the held row, then
 * one `DELETE` of what it completed or dropped.
 */
import { CdcColumn } from './warehouse-sql.ts';
import {
  changelogColumns,
  HANDOVER_BEFORE,
  HANDOVER_MISSING,
  LOAD_COLUMN,
  RS_CHANGELOG_CDC,
  rsIdent,
  rsInt,
  rsLiteral,
  rsText,
  rsQualified,
  type RedshiftTable,
} from './redshift-sql.ts';
import { keyLiterals, stagedTextOf } from './redshift-key-sql.ts';
import { UNHELD_COLUMN } from './redshift-types.ts';

import { RANK } from './redshift-sql.ts';
const pos = rsIdent(CdcColumn.POSITION);
const op = rsIdent(CdcColumn.OP);

/** The handover table's columns a held row is staged in (`stageHeld`'s field order): the changelog's but the load id, then its own two. */
export function handoverColumns(r: RedshiftTable): string[] {
  return [...changelogColumns(r).filter((c) => c !== LOAD_COLUMN), HANDOVER_MISSING, HANDOVER_BEFORE];
}

const keyTexts = (r: RedshiftTable, alias: string): string[] => r.key.map((c, i) => `${stagedTextOf(c, alias)} AS k${i}`);

/** The held keys and positions (key texts `k0`, `k1`, …; `at_pos`): what an applier holds its batch's later events of a key behind. */
export function heldKeysSql(r: RedshiftTable): string {
  return `SELECT ${[...keyTexts(r, 'h'), `h.${pos} AS at_pos`].join(', ')} FROM ${rsQualified(r.t.schema, r.t.handover)} h`;
}

/** How many rows each of `tables`' handover tables holds (`i`: the table's index in `tables`, `n`), in one statement. */
export function heldCountsSql(tables: readonly RedshiftTable[]): string {
  if (tables.length === 0) throw new RangeError('heldCountsSql needs at least one table');
  return tables.map((r, i) => `SELECT ${rsInt(i)} AS i, COUNT(*) AS n FROM ${rsQualified(r.t.schema, r.t.handover)}`).join(' UNION ALL ');
}

/** Every held row's identity and what it lacks, and the newest truncate's position (`truncated`, '' for none): the loader's completion pass reads it. */
export function heldRowsSql(r: RedshiftTable): string {
  const truncated = `(SELECT COALESCE(MAX(x.${pos}), '') FROM ${rsQualified(r.t.schema, r.t.truncations)} x) AS truncated`;
  const cols = [
    ...keyTexts(r, 'h'),
    `h.${pos} AS at_pos`,
    `h.${op} AS op`,
    `h.${rsIdent(HANDOVER_MISSING)} AS missing`,
    `h.${rsIdent(HANDOVER_BEFORE)} AS old_key`,
    `h.${rsIdent(UNHELD_COLUMN)} AS unheld`,
    truncated,
  ];
  return `SELECT ${cols.join(', ')} FROM ${rsQualified(r.t.schema, r.t.handover)} h`;
}

/** The changelog rows of `keys` (staged texts), oldest first (a redelivery after its first load): position, op and marker of each. */
export function keyRowsSql(r: RedshiftTable, keys: readonly (readonly string[])[]): string {
  if (keys.length === 0) throw new RangeError('keyRowsSql needs at least one key');
  const match = keys.map((k) => `(${keyLiterals(r, 'c', k)})`).join(' OR ');
  const cols = [...keyTexts(r, 'c'), `c.${pos} AS at_pos`, `c.${op} AS op`, `c.${rsIdent(UNHELD_COLUMN)} AS unheld`];
  return `SELECT ${cols.join(', ')} FROM ${rsQualified(r.t.schema, r.t.changelog)} c WHERE ${match} ORDER BY c.${pos}, c.${rsIdent(LOAD_COLUMN)}`;
}

/** One held event: its key (staged texts), position and op. */
export interface HeldId {
  key: readonly string[];
  position: string;
  op: string;
}

const heldMatch = (r: RedshiftTable, alias: string, h: HeldId): string =>
  `${keyLiterals(r, alias, h.key)} AND ${alias}.${pos} = ${rsLiteral(h.position)} AND ${alias}.${op} = ${rsLiteral(h.op)}`;

/**
 * The held event `h` completed into the changelog with load `loadId`: its `missing` columns from the donor's
 * changelog row (the old key's, or its own key's, image just before it: `donor`, key and position; the first load
 * of a redelivered row), NULL without a donor (a partial update over no row), the rest from the held row; its
 * marker is `unheld` (the held row's and the donor's of the columns taken). A held row stored twice (its batch
 * delivered again) is completed once.
 */
export function completeHeldSql(
  r: RedshiftTable,
  loadId: number,
  h: HeldId & { missing: readonly string[] },
  donor: { key: readonly string[]; position: string } | null,
  unheld: string | null,
): string {
  const missing = new Set(h.missing.map((m) => m.toLowerCase()));
  const own = RS_CHANGELOG_CDC.filter((c) => c.name !== LOAD_COLUMN).map((c) =>
    c.name === UNHELD_COLUMN ? (unheld === null ? 'NULL' : rsText(unheld)) : `h.${rsIdent(c.name)}`,
  );
  const data = r.data.map((c) => (missing.has(c.name.toLowerCase()) ? (donor === null ? 'NULL' : `d.${rsIdent(c.name)}`) : `h.${rsIdent(c.name)}`));
  const select = [String(rsInt(loadId)), ...own, ...r.key.map((c) => `h.${rsIdent(c.name)}`), ...data];
  const held =
    `(SELECT x.*, row_number() OVER (ORDER BY x.${rsIdent(CdcColumn.APPLIED_AT)}) AS ${rsIdent(RANK)} ` +
    `FROM ${rsQualified(r.t.schema, r.t.handover)} x WHERE ${heldMatch(r, 'x', h)}) h`;
  const from =
    donor === null
      ? `${held} WHERE h.${rsIdent(RANK)} = 1`
      : `${held}, (SELECT c.*, row_number() OVER (ORDER BY c.${rsIdent(LOAD_COLUMN)}) AS ${rsIdent(RANK)} ` +
        `FROM ${rsQualified(r.t.schema, r.t.changelog)} c WHERE ${keyLiterals(r, 'c', donor.key)} AND c.${pos} = ${rsLiteral(donor.position)} ` +
        `AND c.${op} <> 'delete') d WHERE h.${rsIdent(RANK)} = 1 AND d.${rsIdent(RANK)} = 1`;
  const cols = changelogColumns(r).map(rsIdent).join(', ');
  return `INSERT INTO ${rsQualified(r.t.schema, r.t.changelog)} (${cols}) SELECT ${select.join(', ')} FROM ${from}`;
}

/** Removes the held events `ids` (every stored copy): completed or dropped in the same transaction. */
export function removeHeldSql(r: RedshiftTable, ids: readonly HeldId[]): string {
  if (ids.length === 0) throw new RangeError('removeHeldSql needs at least one held event');
  const t = rsIdent(r.t.handover);
  return `DELETE FROM ${rsQualified(r.t.schema, r.t.handover)} WHERE ${ids.map((h) => `(${heldMatch(r, t, h)})`).join(' OR ')}`;
}
