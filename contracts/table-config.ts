/**
 * The captured-table settings the constructs write into `CDC_TABLE_CONFIG` (`EnvName.TABLE_CONFIG`)
 * and the handlers parse (lambda/core/tables/table-config.ts): one definition of the shape and of the
 * delete modes for both sides. Dependency-free on purpose.
 */

/** How sinks apply deletes (invariant 7, docs/architecture.md §2): the values of `DeleteMode` in lib/ and lambda/core/. */
export const DELETE_MODES = ['soft', 'hard'] as const;
/** One of `DELETE_MODES`. */
export type DeleteMode = (typeof DELETE_MODES)[number];

/** One entry of `CDC_TABLE_CONFIG`. */
export interface TableConfig {
  /** `schema.table` as named in the source. */
  table: string;
  /** Primary-key columns in key order, when declared (DMS records do not name the key). */
  key?: string[];
  deleteMode: DeleteMode;
  /** Columns that enter the log only as a hash. */
  mask: string[];
  /** Columns that never enter the log. */
  exclude: string[];
  /** Snapshot the table's existing rows when it is first captured (docs/snapshot.md). @default true */
  snapshot?: boolean;
  /** Per-event transforms (docs/transforms.md). @default none */
  transforms?: TableTransforms;
  /** How the table is captured: from the source's log, or by polling `pollColumn` (docs/polling.md). @default 'log' */
  capture?: CaptureMode;
  /** The column a polled table is read by: a modified-at timestamp set by the server clock, or an `xid8` transaction-id column (docs/polling.md; an integer version is refused). Required with `capture: 'poll'`. */
  pollColumn?: string;
  /** Acknowledges a mask or exclude added while the table is already captured (`LateRulesAcknowledgement`). */
  acknowledgeLateRules?: string;
}

/** How a table is captured: `log` (logical decoding / DMS) or `poll` (docs/polling.md). */
export const CAPTURE_MODES = ['log', 'poll'] as const;
/** One of `CAPTURE_MODES`. */
export type CaptureMode = (typeof CAPTURE_MODES)[number];

/** A tenant column stamped into every row image (docs/transforms.md). */
export interface TenantStamp {
  /** The column written into every `after` image (text). */
  column: string;
  /** A constant, or a template with `{source}`, `{schema}`, `{table}`, `{tableId}`. */
  value: string;
}

/** Per-event transforms of one table (docs/transforms.md): applied in this order. */
export interface TableTransforms {
  /** Source column → sink type (`text`, `bigint`, `double precision`, `boolean`, `date`, `timestamptz`, `numeric(p,s)`). */
  coerce?: Record<string, string>;
  /** Source column → the name it has in the change log and every sink. */
  rename?: Record<string, string>;
  tenant?: TenantStamp;
}

const NUMERIC_COERCE = /^numeric\((\d+),(\d+)\)$/;
const PLAIN_COLUMN = /^[A-Za-z_][A-Za-z0-9_$]{0,62}$/;

/** True when `type` is a sink type a column may be coerced to (docs/transforms.md). */
export function isCoerceType(type: string): boolean {
  if (['text', 'bigint', 'double precision', 'boolean', 'date', 'timestamptz'].includes(type)) return true;
  const m = NUMERIC_COERCE.exec(type);
  return m !== null && Number(m[1]) >= 1 && Number(m[1]) <= 38 && Number(m[2]) <= Number(m[1]);
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const shown = (v: unknown): string =>
  v === undefined
    ? 'undefined'
    : typeof v === 'string'
      ? JSON.stringify(v)
      : Array.isArray(v)
        ? 'an array'
        : v === null
          ? 'null'
          : typeof v === 'object'
            ? 'an object'
            : String(v);

/**
 * Checks one table's `transforms` against its column rules (the one definition for the constructs
 * and the handlers): known fields only; coercion to a sink type; an excluded column cannot be
 * coerced or renamed (it never arrives); a masked column can only be coerced to `text` (it is a
 * hash); rename targets are plain column names, each used once; the tenant column is a plain name
 * that is not a rename target, and its value a constant or a template with `{source}`, `{schema}`,
 * `{table}`, `{tableId}`. Returns the transforms, or the field and the problem.
 */
export function checkTransforms(
  v: unknown,
  rules: { mask: readonly string[]; exclude: readonly string[] },
  field: string,
): { transforms: TableTransforms } | { field: string; problem: string } {
  const bad = (f: string, problem: string) => ({ field: f, problem });
  if (!isObject(v)) return bad(field, `expected an object with coerce, rename and tenant, got ${shown(v)}`);
  for (const f of Object.keys(v)) if (!['coerce', 'rename', 'tenant'].includes(f)) return bad(`${field}.${f}`, 'unknown field (known: coerce, rename, tenant)');
  const out: TableTransforms = {};
  if (v.coerce !== undefined) {
    if (!isObject(v.coerce)) return bad(`${field}.coerce`, `expected an object of column → sink type, got ${shown(v.coerce)}`);
    const coerce: Record<string, string> = {};
    for (const [c, type] of Object.entries(v.coerce)) {
      if (typeof type !== 'string' || !isCoerceType(type))
        return bad(
          `${field}.coerce.${c}`,
          `expected a sink type (text, bigint, double precision, boolean, date, timestamptz, numeric(p,s) with p ≤ 38), got ${shown(type)}`,
        );
      if (rules.exclude.includes(c)) return bad(`${field}.coerce.${c}`, 'the column is excluded; it never arrives to be coerced');
      if (rules.mask.includes(c) && type !== 'text')
        return bad(`${field}.coerce.${c}`, `the column is masked (a 64-character hash, docs/masking.md) and can only be text, not ${type}`);
      coerce[c] = type;
    }
    if (Object.keys(coerce).length > 0) out.coerce = coerce;
  }
  if (v.rename !== undefined) {
    if (!isObject(v.rename)) return bad(`${field}.rename`, `expected an object of column → new name, got ${shown(v.rename)}`);
    const rename: Record<string, string> = {};
    const targets = new Map<string, string>();
    for (const [from, to] of Object.entries(v.rename)) {
      if (typeof to !== 'string' || !PLAIN_COLUMN.test(to)) return bad(`${field}.rename.${from}`, `expected a plain column name, got ${shown(to)}`);
      if (rules.exclude.includes(from)) return bad(`${field}.rename.${from}`, 'the column is excluded; it never arrives to be renamed');
      const other = targets.get(to);
      if (other !== undefined) return bad(`${field}.rename.${from}`, `${JSON.stringify(other)} is renamed to ${JSON.stringify(to)} as well`);
      targets.set(to, from);
      rename[from] = to;
    }
    if (Object.keys(rename).length > 0) out.rename = rename;
  }
  if (v.tenant !== undefined) {
    const t = v.tenant;
    if (!isObject(t)) return bad(`${field}.tenant`, `expected { column, value }, got ${shown(t)}`);
    for (const f of Object.keys(t)) if (f !== 'column' && f !== 'value') return bad(`${field}.tenant.${f}`, 'unknown field (known: column, value)');
    if (typeof t.column !== 'string' || !PLAIN_COLUMN.test(t.column))
      return bad(`${field}.tenant.column`, `expected a plain column name, got ${shown(t.column)}`);
    if (typeof t.value !== 'string' || t.value === '')
      return bad(`${field}.tenant.value`, `expected a constant or a template with {source}, {schema}, {table}, {tableId}, got ${shown(t.value)}`);
    const unknown = /\{(?!source\}|schema\}|table\}|tableId\})[^}]*\}/.exec(t.value);
    if (unknown) return bad(`${field}.tenant.value`, `unknown placeholder ${unknown[0]} (known: {source}, {schema}, {table}, {tableId})`);
    if (out.rename && Object.values(out.rename).includes(t.column)) return bad(`${field}.tenant.column`, `${JSON.stringify(t.column)} is also a rename target`);
    out.tenant = { column: t.column, value: t.value };
  }
  return { transforms: out };
}

/**
 * Capture by pattern (docs/onboarding.md): one entry of `CDC_TABLE_RULES` (`EnvName.TABLE_RULES`),
 * or an entry with `match` in a `cdc local --table-config` file. Every table of the source whose
 * `schema.table` matches `match` and none of `excludeTables` is captured with these settings,
 * provided it is eligible (a usable key, carried column types); a table that matches but is
 * excluded or ineligible is named with its reason, never skipped silently.
 */
export interface TableRule {
  /** `schemaGlob.tableGlob`: `*` stands for any run of characters within one part (`public.*`, `sales.order_*`). */
  match: string;
  /** Patterns of tables the rule leaves out (DMS selection rules with `exclude`). */
  excludeTables: string[];
  /** Key columns of every matched table, when declared; else each table's primary key (locally, from the catalog). */
  key?: string[];
  deleteMode: DeleteMode;
  /** Columns masked in every matched table that has them. */
  mask: string[];
  /** Columns excluded from every matched table that has them. */
  exclude: string[];
  /** Snapshot a matched table's existing rows when it joins. @default true */
  snapshot?: boolean;
}

/** A table id part or pattern part: plain identifier characters, and `*` in patterns. */
const PATTERN_PART = /^[A-Za-z_*][A-Za-z0-9_$*]*$/;

/** Whether `pattern` is a valid `schemaGlob.tableGlob`. */
export function isTablePattern(pattern: string): boolean {
  const parts = pattern.split('.');
  return parts.length === 2 && parts.every((p) => PATTERN_PART.test(p));
}

function globMatches(glob: string, text: string): boolean {
  // Iterative wildcard match (`*` only): linear in practice, no regular expression built from input.
  let g = 0;
  let t = 0;
  let star = -1;
  let mark = 0;
  while (t < text.length) {
    if (g < glob.length && glob[g] !== '*' && glob[g] === text[t]) {
      g++;
      t++;
    } else if (g < glob.length && glob[g] === '*') {
      star = g++;
      mark = t;
    } else if (star >= 0) {
      g = star + 1;
      t = ++mark;
    } else return false;
  }
  while (g < glob.length && glob[g] === '*') g++;
  return g === glob.length;
}

/** Whether the table id `schema.table` matches the pattern (`*` never crosses the period). */
export function matchesTablePattern(pattern: string, tableId: string): boolean {
  const [ps, pt] = pattern.split('.');
  const [s, t] = tableId.split('.');
  if (ps === undefined || pt === undefined || s === undefined || t === undefined) return false;
  return globMatches(ps, s) && globMatches(pt, t);
}

function globsIntersect(a: string, b: string): boolean {
  // Is there a string both globs match? Walk both at once; a `*` may absorb one character of the other side or end.
  const memo = new Map<number, boolean>();
  const go = (i: number, j: number): boolean => {
    const k = i * (b.length + 1) + j;
    const hit = memo.get(k);
    if (hit !== undefined) return hit;
    let r: boolean;
    if (i === a.length && j === b.length) r = true;
    else if (i < a.length && a[i] === '*') r = go(i + 1, j) || (j < b.length && go(i, j + 1));
    else if (j < b.length && b[j] === '*') r = go(i, j + 1) || (i < a.length && go(i + 1, j));
    else r = i < a.length && j < b.length && a[i] === b[j] && go(i + 1, j + 1);
    memo.set(k, r);
    return r;
  };
  return go(0, 0);
}

/**
 * Whether every table id `inner` matches also matches `outer` (sufficient test: `outer` matches
 * `inner`'s text with `inner`'s `*` as a character only `outer`'s `*` can take).
 */
export function patternContains(outer: string, inner: string): boolean {
  return matchesTablePattern(outer, inner);
}

/** Whether some table id could match both patterns (ignoring exclusions: conservative). */
export function tablePatternsOverlap(a: string, b: string): boolean {
  const [as, at] = a.split('.');
  const [bs, bt] = b.split('.');
  return as !== undefined && at !== undefined && bs !== undefined && bt !== undefined && globsIntersect(as, bs) && globsIntersect(at, bt);
}

/**
 * Acknowledgement of a mask or exclude added to a table that is already captured: the text (who,
 * why, a ticket) goes into the audit log. Without it such a change is refused (docs/masking.md,
 * "Adding a rule to a live table").
 */
export type LateRulesAcknowledgement = string;

/**
 * The column rules of a deployment, as `CdcSource` passes them to its `Custom::CdcColumnRules`
 * resource (property `ColumnRules`, JSON): CloudFormation hands the handler the previous and the
 * new document on an update, and a mask or exclude added to a captured table without its
 * acknowledgement fails the deployment (docs/masking.md, "Adding a rule to a live table").
 */
export interface ColumnRulesDocument {
  /** Declared tables (`CapturedTable.of`), polled ones included; the heartbeat table is not listed. */
  tables: Array<{ table: string; mask: string[]; exclude: string[]; acknowledgeLateRules?: LateRulesAcknowledgement }>;
  /** Rules (`CapturedTable.matching`), in declaration order. */
  rules: Array<{ match: string; excludeTables: string[]; mask: string[]; exclude: string[]; acknowledgeLateRules?: LateRulesAcknowledgement }>;
}

/** What the rule conflict check needs of an explicitly declared table. */
export interface DeclaredTableRules {
  table: string;
  /** The table's columns when known (the heartbeat table's): a rule's column rules conflict only through them. */
  columns?: readonly string[];
}

/**
 * Returns why explicit tables and pattern rules cannot be compiled into DMS table mappings that
 * mean what they mean locally, or undefined (docs/onboarding.md, "Rules that overlap"). DMS
 * applies a column transformation (mask, remove-column) to every table its pattern matches,
 * whatever the selection rules say, and whether an explicit include or a pattern exclusion wins
 * is not a behaviour to rely on; so:
 * - a declared table matched by a rule's pattern is refused when the rule has column rules (unless
 *   none of them names a known column of the table), or when one of the rule's exclusions matches it;
 * - two rules that may match the same table are refused when either has column rules.
 */
export function findRuleConflict(
  declared: readonly DeclaredTableRules[],
  rules: readonly Pick<TableRule, 'match' | 'excludeTables' | 'mask' | 'exclude'>[],
): string | undefined {
  const columnRules = (r: Pick<TableRule, 'mask' | 'exclude'>): string[] => [...r.mask, ...r.exclude];
  for (const r of rules) {
    for (const t of declared) {
      if (!matchesTablePattern(r.match, t.table)) continue;
      const ex = r.excludeTables.find((p) => matchesTablePattern(p, t.table));
      if (ex !== undefined)
        return `table ${t.table} is declared alone but rule ${r.match} excludes it (${ex}): on DMS the exclusion may win over the table's own selection; narrow the exclusion`;
      const cols = columnRules(r).filter((c) => t.columns === undefined || t.columns.includes(c));
      if (cols.length > 0)
        return `table ${t.table} is declared alone but also matches rule ${r.match}, whose column rules (${cols.join(', ')}) DMS would apply to it too; exclude it from the rule's pattern or move the column rules to the declared tables`;
    }
  }
  for (let i = 0; i < rules.length; i++) {
    for (let j = i + 1; j < rules.length; j++) {
      const a = rules[i]!;
      const b = rules[j]!;
      if (!tablePatternsOverlap(a.match, b.match)) continue;
      // A rule's column rules reach the other rule's tables, unless the other rule excludes its whole pattern.
      const leaks = (x: typeof a, y: typeof a): boolean => columnRules(x).length > 0 && !y.excludeTables.some((ex) => patternContains(ex, x.match));
      if (leaks(a, b) || leaks(b, a)) {
        return `rules ${a.match} and ${b.match} may match the same table and one of them masks or excludes columns, which DMS would apply to the other's tables too; make the patterns disjoint (or exclude the narrower pattern from the broader rule)`;
      }
    }
  }
  return undefined;
}
