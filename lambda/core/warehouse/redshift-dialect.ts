/**
 * The Redshift dialect's answers to the questions the warehouse dialect port asks of every engine
 * (docs/warehouse-apply.md, "Redshift"): the column type of a source type, whether a column held
 * takes a new version's values unchanged, what happens to a value Redshift cannot hold, whether
 * names fold, how a batch lands. Pure. The statements (layout, merge, view, COPY) are
 * lambda/core/warehouse/redshift-sql.ts; the values' checks lambda/core/warehouse/redshift-types.ts.
 */
import { redshiftColumn, redshiftText, type RedshiftColumn, type ValuePolicy, type ValueKind } from './redshift-types.ts';

/** A column type, or why the column is refused. */
export type RedshiftTypeChoice = { type: string } | { refused: string };
/** A value kept as its text, or the declared policy with its reason. */
export type RedshiftVerdict = { keep: true } | { keep: false; policy: ValuePolicy; reason: string };

/** The column a Redshift type string describes (as `redshiftColumn` makes them, or the catalog reads them). */
export function columnOfType(name: string, type: string): RedshiftColumn {
  const t = type.trim().toLowerCase();
  const sized = /^(varchar|character varying|varbyte)\((\d+)\)$/.exec(t);
  if (sized) return { name, type: t, kind: sized[1] === 'varbyte' ? 'varbyte' : 'varchar', maxBytes: Number(sized[2]) };
  const num = /^(?:numeric|decimal)\((\d+),\s*(\d+)\)$/.exec(t);
  if (num) return { name, type: t, kind: 'numeric', scale: Number(num[2]) };
  const kinds: Record<string, ValueKind> = {
    bigint: 'integer',
    integer: 'integer',
    smallint: 'integer',
    'double precision': 'float',
    real: 'float',
    boolean: 'boolean',
    date: 'date',
    timestamp: 'timestamp',
    'timestamp without time zone': 'timestamp',
    timestamptz: 'timestamp',
    'timestamp with time zone': 'timestamp',
    time: 'time',
    timetz: 'time',
    super: 'super',
  };
  const kind = kinds[t];
  if (kind === undefined) throw new RangeError(`${type} is not a type the Redshift dialect makes`);
  return kind === 'super' ? redshiftColumn(name, 'jsonb') : { name, type: t, kind };
}

export interface RedshiftDialectParts {
  readonly engine: 'redshift';
  /** Redshift folds quoted names unless `enable_case_sensitive_identifier` is on. */
  readonly foldsIdentifiers: true;
  readonly landing: 's3-manifest';
  columnType(sourceType: string | null): RedshiftTypeChoice;
  /** True when a column held as `have` takes values of a column made as `want` unchanged; a VARCHAR that must grow is `evolveSql`'s, before. */
  accepts(have: string, want: string): boolean;
  /** Whether `text` fits a column of Redshift type `type`, and if not, the column's policy (`policyOf`) and why. */
  valueVerdict(type: string, text: string): RedshiftVerdict;
}

/** The Redshift dialect's parts, with the value policy of the columns it answers for. */
export function redshiftDialectParts(policyOf: (type: string) => ValuePolicy = () => 'refuse-row'): RedshiftDialectParts {
  return {
    engine: 'redshift',
    foldsIdentifiers: true,
    landing: 's3-manifest',
    columnType: (sourceType) => ({ type: redshiftColumn('c', sourceType).type }),
    accepts(have, want) {
      if (have.trim().toLowerCase() === want.trim().toLowerCase()) return true;
      const [h, w] = [columnOfType('c', have), columnOfType('c', want)];
      return h.kind === 'varchar' && w.kind === 'varchar' && (h.maxBytes ?? 0) >= (w.maxBytes ?? 0);
    },
    valueVerdict(type, text) {
      const r = redshiftText(columnOfType('c', type), 'table', text);
      return 'text' in r ? { keep: true } : { keep: false, policy: policyOf(type), reason: `${r.reason}: ${r.detail}` };
    },
  };
}
