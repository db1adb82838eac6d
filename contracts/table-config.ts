/**
 * The captured-table settings the constructs write into `CDC_TABLE_CONFIG` (`EnvName.TABLE_CONFIG`)
 * and the handlers parse (lambda/core/table-config.ts): one definition of the shape and of the
 * delete modes for both sides. Dependency-free on purpose.
 */

/** How sinks apply deletes (invariant 7, docs/architecture.md §2): the values of `DeleteMode` in lib/ and lambda/core/. */
export const DELETE_MODES = ['soft', 'hard'] as const;
/** One of `DELETE_MODES`. */
export type DeleteModeValue = (typeof DELETE_MODES)[number];

/** One entry of `CDC_TABLE_CONFIG`. */
export interface TableConfig {
  /** `schema.table` as named in the source. */
  table: string;
  /** Primary-key columns in key order, when declared (DMS records do not name the key). */
  key?: string[];
  deleteMode: DeleteModeValue;
  /** Columns that enter the log only as a hash. */
  mask: string[];
  /** Columns that never enter the log. */
  exclude: string[];
  /** Snapshot the table's existing rows when it is first captured (docs/snapshot.md). @default true */
  snapshot?: boolean;
  /** Acknowledges a mask or exclude added while the table is already captured (`LateRulesAcknowledgement`). */
  acknowledgeLateRules?: string;
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
  deleteMode: DeleteModeValue;
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
export function findRuleConflict(declared: readonly DeclaredTableRules[], rules: readonly Pick<TableRule, 'match' | 'excludeTables' | 'mask' | 'exclude'>[]): string | undefined {
  const columnRules = (r: Pick<TableRule, 'mask' | 'exclude'>): string[] => [...r.mask, ...r.exclude];
  for (const r of rules) {
    for (const t of declared) {
      if (!matchesTablePattern(r.match, t.table)) continue;
      const ex = r.excludeTables.find((p) => matchesTablePattern(p, t.table));
      if (ex !== undefined) return `table ${t.table} is declared alone but rule ${r.match} excludes it (${ex}): on DMS the exclusion may win over the table's own selection; narrow the exclusion`;
      const cols = columnRules(r).filter((c) => t.columns === undefined || t.columns.includes(c));
      if (cols.length > 0) return `table ${t.table} is declared alone but also matches rule ${r.match}, whose column rules (${cols.join(', ')}) DMS would apply to it too; exclude it from the rule's pattern or move the column rules to the declared tables`;
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
