/**
 * A Redshift grammar check for the statements the Redshift dialect emits (docs/warehouse-apply.md,
 * "Redshift: what is checked here"). No maintained npm parser has a Redshift grammar:
 * node-sql-parser's `redshift` build parses PostgreSQL's grammar (it accepts `ON CONFLICT`,
 * `RETURNING` and `::jsonb`, and rejects Redshift's `MERGE`, `COPY … IAM_ROLE`, `SUPER`,
 * `VARBYTE`, `DELETE … USING` and `CREATE TEMP TABLE … AS`). So this is a checker of its own, built
 * from Redshift's SQL reference for exactly the statement forms the dialect uses:
 * - each statement must be one of those forms, parsed head to tail (`CREATE TABLE` column types
 *   from Redshift's type list with its limits, `MERGE` with exactly one `WHEN MATCHED THEN
 *   UPDATE|DELETE` and one `WHEN NOT MATCHED THEN INSERT … VALUES`, its source a table, `COPY`
 *   from S3 with an IAM role and only the parameters listed, …);
 * - expressions may use only Redshift's operators and the functions listed, with balanced
 *   parentheses;
 * - a deny-list of PostgreSQL-only constructs, matched on tokens (never inside literals).
 * It returns the problems found (empty: the statement passes).
 */

type Tok = { k: 'id' | 'qid' | 'str' | 'num' | 'op'; v: string };

function tokenize(sql: string): Tok[] {
  const out: Tok[] = [];
  let i = 0;
  while (i < sql.length) {
    const c = sql[i]!;
    if (/\s/.test(c)) {
      i++;
    } else if (c === "'" || c === '"') {
      let j = i + 1;
      let v = '';
      for (;;) {
        if (j >= sql.length) throw new Error(`unterminated ${c}`);
        if (sql[j] === c && sql[j + 1] === c) {
          v += c;
          j += 2;
        } else if (sql[j] === c) break;
        else v += sql[j++];
      }
      out.push({ k: c === "'" ? 'str' : 'qid', v });
      i = j + 1;
    } else if (/[A-Za-z_]/.test(c)) {
      const m = /^[A-Za-z_][A-Za-z0-9_$]*/.exec(sql.slice(i))![0];
      out.push({ k: 'id', v: m.toLowerCase() });
      i += m.length;
    } else if (/[0-9]/.test(c)) {
      const m = /^[0-9]+(\.[0-9]+)?/.exec(sql.slice(i))![0];
      out.push({ k: 'num', v: m });
      i += m.length;
    } else {
      const m = /^(::|->>|->|#>>|#>|@>|<@|\?\||\?&|<>|<=|>=|!=|\|\||[=<>+\-*/%(),.;?#@$[\]{}:!&|^~])/.exec(sql.slice(i));
      if (!m) throw new Error(`unexpected character ${c}`);
      out.push({ k: 'op', v: m[0] });
      i += m[0].length;
    }
  }
  return out;
}

/** PostgreSQL-only constructs that must never reach Redshift (token sequences, lower case). */
export const POSTGRES_ONLY: readonly { name: string; seq: readonly string[] }[] = [
  { name: 'ON CONFLICT', seq: ['on', 'conflict'] },
  { name: 'RETURNING', seq: ['returning'] },
  { name: 'COPY … FROM STDIN', seq: ['from', 'stdin'] },
  { name: 'DISTINCT ON', seq: ['distinct', 'on'] },
  { name: ':: cast', seq: ['::'] },
  { name: 'jsonb operator ->', seq: ['->'] },
  { name: 'jsonb operator ->>', seq: ['->>'] },
  { name: 'jsonb operator #>', seq: ['#>'] },
  { name: 'jsonb operator #>>', seq: ['#>>'] },
  { name: 'containment @>', seq: ['@>'] },
  { name: 'containment <@', seq: ['<@'] },
  { name: 'jsonb ?|', seq: ['?|'] },
  { name: 'jsonb ?&', seq: ['?&'] },
  { name: 'array constructor', seq: ['array', '['] },
  { name: 'subscript', seq: ['['] },
  { name: '= ANY(array)', seq: ['any', '('] },
  { name: 'jsonb type', seq: ['jsonb'] },
  { name: 'bytea type', seq: ['bytea'] },
  { name: 'uuid type', seq: ['uuid'] },
  { name: 'serial type', seq: ['serial'] },
  { name: 'text type (Redshift: VARCHAR(256))', seq: ['text'] },
  { name: 'ON COMMIT', seq: ['on', 'commit'] },
  { name: 'LATERAL', seq: ['lateral'] },
  { name: 'WITH ORDINALITY', seq: ['ordinality'] },
  { name: 'FILTER (WHERE …)', seq: ['filter', '('] },
  { name: 'unnest', seq: ['unnest'] },
  { name: 'generate_series', seq: ['generate_series'] },
  { name: 'LOCK … IN … MODE', seq: ['mode'] },
  { name: 'TRUNCATE (commits the transaction on Redshift)', seq: ['truncate'] },
  { name: 'CREATE DOMAIN', seq: ['domain'] },
  { name: 'bind parameter', seq: ['$'] },
  { name: 'regclass', seq: ['regclass'] },
  { name: 'WHEN NOT MATCHED BY', seq: ['matched', 'by'] },
  { name: 'WHEN MATCHED AND (a condition)', seq: ['matched', 'and'] },
  { name: 'DO NOTHING', seq: ['do', 'nothing'] },
  { name: 'IF NOT EXISTS on ADD COLUMN', seq: ['column', 'if'] },
];

/** Redshift functions the dialect may call. */
const FUNCTIONS = new Set([
  'row_number',
  'count',
  'max',
  'min',
  'sum',
  'coalesce',
  'cast',
  'nullif',
  'lower',
  'upper',
  'json_parse',
  'json_serialize',
  'to_hex',
  'getdate',
  'sysdate',
  // A backslash in a text value (rsText): CHR(92), since a backslash inside a Redshift literal is an escape.
  'chr',
]);
/** Keywords that may appear in expressions and FROM clauses. */
const EXPR_KEYWORDS = new Set([
  'select',
  'from',
  'where',
  'and',
  'or',
  'not',
  'exists',
  'in',
  'is',
  'null',
  'true',
  'false',
  'case',
  'when',
  'then',
  'else',
  'end',
  'as',
  'union',
  'all',
  'join',
  'left',
  'inner',
  'on',
  'over',
  'partition',
  'by',
  'order',
  'asc',
  'desc',
  'limit',
  'distinct',
  'group',
  'having',
  'between',
  'like',
]);
/** Redshift's column types: name → check of its arguments. */
const TYPES: Record<string, (args: number[]) => boolean> = {
  smallint: (a) => a.length === 0,
  integer: (a) => a.length === 0,
  bigint: (a) => a.length === 0,
  real: (a) => a.length === 0,
  boolean: (a) => a.length === 0,
  date: (a) => a.length === 0,
  time: (a) => a.length === 0,
  timetz: (a) => a.length === 0,
  timestamp: (a) => a.length === 0,
  timestamptz: (a) => a.length === 0,
  super: (a) => a.length === 0,
  varchar: (a) => a.length === 1 && a[0]! >= 1 && a[0]! <= 65_535,
  char: (a) => a.length === 1 && a[0]! >= 1 && a[0]! <= 4_096,
  varbyte: (a) => a.length === 1 && a[0]! >= 1 && a[0]! <= 1_024_000,
  numeric: (a) => a.length === 2 && a[0]! >= 1 && a[0]! <= 38 && a[1]! >= 0 && a[1]! <= 37 && a[1]! <= a[0]!,
  decimal: (a) => a.length === 2 && a[0]! >= 1 && a[0]! <= 38 && a[1]! >= 0 && a[1]! <= 37 && a[1]! <= a[0]!,
};
const COPY_PARAMS = new Set(['manifest', 'gzip', 'compupdate', 'statupdate', 'timeformat', 'dateformat', 'region', 'format', 'as', 'csv', 'off', 'on']);

class Parser {
  i = 0;
  readonly problems: string[] = [];
  constructor(readonly t: Tok[]) {}
  peek(o = 0): Tok | undefined {
    return this.t[this.i + o];
  }
  is(v: string, o = 0): boolean {
    const x = this.peek(o);
    return x !== undefined && (x.k === 'id' || x.k === 'op') && x.v === v;
  }
  eat(v: string): void {
    if (!this.is(v)) throw new Error(`expected ${v.toUpperCase()} at token ${this.i} (${this.peek()?.v ?? 'end'})`);
    this.i++;
  }
  maybe(v: string): boolean {
    if (this.is(v)) {
      this.i++;
      return true;
    }
    return false;
  }
  name(): string {
    const x = this.peek();
    if (!x || (x.k !== 'qid' && x.k !== 'id')) throw new Error(`expected a name at token ${this.i}`);
    if (x.k === 'qid' && x.v !== x.v.toLowerCase()) this.problems.push(`quoted name "${x.v}" is not lower case: Redshift folds it`);
    this.i++;
    return x.v;
  }
  qname(): void {
    this.name();
    if (this.maybe('.')) this.name();
  }
  str(): string {
    const x = this.peek();
    if (x?.k !== 'str') throw new Error(`expected a string literal at token ${this.i}`);
    this.i++;
    return x.v;
  }
  int(): number {
    const x = this.peek();
    if (x?.k !== 'num' || x.v.includes('.')) throw new Error(`expected an integer at token ${this.i}`);
    this.i++;
    return Number(x.v);
  }
  names(): void {
    this.eat('(');
    do this.name();
    while (this.maybe(','));
    this.eat(')');
  }
  type(): void {
    const x = this.name();
    let t = x;
    if (t === 'double' && this.maybe('precision')) t = 'real';
    if (t === 'character' && this.maybe('varying')) t = 'varchar';
    const args: number[] = [];
    if (this.maybe('(')) {
      do args.push(this.int());
      while (this.maybe(','));
      this.eat(')');
    }
    const check = TYPES[t];
    if (!check) this.problems.push(`type ${x} is not a Redshift type`);
    else if (!check(args)) this.problems.push(`type ${x}(${args.join(',')}) is outside Redshift's limits`);
  }
  /** An expression or query fragment up to a token in `stop` at depth 0 (or the end): tokens checked, parentheses balanced. */
  fragment(stop: readonly string[] = []): void {
    let depth = 0;
    const start = this.i;
    while (this.i < this.t.length) {
      const x = this.peek()!;
      if (depth === 0 && (x.k === 'id' || x.k === 'op') && stop.includes(x.v)) break;
      if (x.k === 'op') {
        if (x.v === '(') depth++;
        else if (x.v === ')') {
          if (depth === 0) break;
          depth--;
        } else if (!['=', '<>', '<', '>', '<=', '>=', '+', '-', '*', '/', '.', ',', '||', '%'].includes(x.v))
          this.problems.push(`operator ${x.v} in an expression`);
      } else if (x.k === 'id' && x.v === 'case') {
        depth++;
      } else if (x.k === 'id' && x.v === 'end' && depth > 0) {
        depth--;
      } else if (x.k === 'id') {
        const call = this.is('(', 1);
        if (
          call &&
          !FUNCTIONS.has(x.v) &&
          !['in', 'exists', 'as', 'over', 'from', 'where', 'and', 'or', 'not', 'on', 'select', 'by'].includes(x.v) &&
          !TYPES[x.v]
        )
          this.problems.push(`function ${x.v} is not one the dialect may call`);
        if (!call && !EXPR_KEYWORDS.has(x.v) && !TYPES[x.v] && x.v !== 'precision' && x.v !== 'double') {
          // A bare word: an unquoted name (alias). Allowed only as a plain lower-case identifier.
          if (!/^[a-z_][a-z0-9_]*$/.test(x.v)) this.problems.push(`word ${x.v}`);
        }
      }
      this.i++;
    }
    if (depth !== 0) throw new Error('unbalanced parentheses');
    if (this.i === start) throw new Error(`empty expression at token ${this.i}`);
  }
  end(): void {
    this.maybe(';');
    if (this.i !== this.t.length) throw new Error(`unexpected ${this.peek()!.v} at token ${this.i}`);
  }
}

function statement(p: Parser): void {
  if (p.maybe('begin') || p.maybe('commit') || p.maybe('rollback')) return p.end();
  if (p.maybe('create')) {
    if (p.maybe('schema')) {
      p.eat('if');
      p.eat('not');
      p.eat('exists');
      p.name();
      return p.end();
    }
    if (p.maybe('temp')) {
      p.eat('table');
      p.name();
      p.eat('as');
      p.fragment();
      return p.end();
    }
    if (p.maybe('or')) {
      p.eat('replace');
      p.eat('view');
      p.qname();
      p.eat('as');
      p.fragment();
      return p.end();
    }
    p.eat('table');
    p.eat('if');
    p.eat('not');
    p.eat('exists');
    p.qname();
    p.eat('(');
    do {
      if (p.maybe('primary')) {
        p.eat('key');
        p.names();
      } else {
        p.name();
        p.type();
        if (p.maybe('not')) p.eat('null');
      }
    } while (p.maybe(','));
    p.eat(')');
    return p.end();
  }
  if (p.maybe('insert')) {
    p.eat('into');
    p.qname();
    p.names();
    if (p.maybe('values')) {
      do {
        p.eat('(');
        p.fragment();
        p.eat(')');
      } while (p.maybe(','));
    } else p.fragment();
    return p.end();
  }
  if (p.maybe('update')) {
    p.qname();
    p.eat('set');
    p.fragment();
    return p.end();
  }
  if (p.maybe('delete')) {
    p.eat('from');
    p.qname();
    if (p.maybe('using')) p.fragment(['where']);
    if (p.maybe('where')) p.fragment();
    return p.end();
  }
  if (p.maybe('drop')) {
    if (!p.maybe('table')) p.eat('view');
    p.qname();
    return p.end();
  }
  if (p.maybe('alter')) {
    p.eat('table');
    p.qname();
    if (p.maybe('add')) {
      p.eat('column');
      p.name();
      p.type();
    } else {
      p.eat('alter');
      p.eat('column');
      p.name();
      p.eat('type');
      p.type();
    }
    return p.end();
  }
  if (p.maybe('merge')) {
    p.eat('into');
    p.qname();
    p.eat('using');
    if (p.is('(')) throw new Error("MERGE's source must be a table (Redshift takes no subquery there)");
    p.qname();
    if (!p.is('on')) p.name();
    p.eat('on');
    p.fragment(['when']);
    p.eat('when');
    p.eat('matched');
    p.eat('then');
    if (p.maybe('update')) {
      p.eat('set');
      p.fragment(['when']);
    } else p.eat('delete');
    p.eat('when');
    p.eat('not');
    p.eat('matched');
    p.eat('then');
    p.eat('insert');
    p.names();
    p.eat('values');
    p.eat('(');
    p.fragment();
    p.eat(')');
    return p.end();
  }
  if (p.maybe('copy')) {
    p.qname();
    p.names();
    p.eat('from');
    if (!p.str().startsWith('s3://')) throw new Error('COPY reads from s3:// only');
    p.eat('iam_role');
    p.str();
    while (p.i < p.t.length && !p.is(';')) {
      const x = p.peek()!;
      if (x.k === 'str') p.i++;
      else if (x.k === 'id' && COPY_PARAMS.has(x.v)) p.i++;
      else throw new Error(`COPY parameter ${x.v} is not one the loader uses`);
    }
    return p.end();
  }
  if (p.is('select')) {
    p.fragment();
    return p.end();
  }
  throw new Error(`not a statement form of the Redshift dialect: ${p.peek()?.v ?? 'empty'}`);
}

/** The problems of one statement under the Redshift grammar check (empty: it passes). */
export function redshiftProblems(sql: string): string[] {
  let tokens: Tok[];
  try {
    tokens = tokenize(sql);
  } catch (err) {
    return [(err as Error).message];
  }
  const out: string[] = [];
  const words = tokens.map((x) => (x.k === 'id' || x.k === 'op' ? x.v : `\u0000${x.k}`));
  for (const d of POSTGRES_ONLY) {
    for (let i = 0; i + d.seq.length <= words.length; i++) {
      if (d.seq.every((s, j) => words[i + j] === s)) {
        out.push(`PostgreSQL-only: ${d.name}`);
        break;
      }
    }
  }
  const p = new Parser(tokens);
  try {
    statement(p);
  } catch (err) {
    out.push((err as Error).message);
  }
  return [...out, ...p.problems];
}
