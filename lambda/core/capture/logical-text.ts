/**
 * A pure parser for the text that PostgreSQL's `test_decoding` output plugin writes, as returned
 * by `pg_logical_slot_peek_changes(slot, NULL, NULL, 'include-xids', '1', 'include-timestamp', '1')`
 * (one row per line: `lsn`, `xid`, `data`). The slot capture does the I/O; this module does the
 * text, and `groupTransactions` turns rows into committed transactions with their commit LSN.
 *
 * Lines (format of test_decoding in PostgreSQL 10 to 18):
 *
 *     BEGIN 754
 *     table public.t1: INSERT: id[integer]:1 v[text]:'a''b'
 *     table public.t1: UPDATE: id[integer]:1 big[text]:unchanged-toast-datum
 *     table public.t1: UPDATE: old-key: id[integer]:1 new-tuple: id[integer]:2 v[text]:'z'
 *     table public.t1: DELETE: id[integer]:2            (or `DELETE: (no-tuple-data)`)
 *     table public.t1, public."Odd Name": TRUNCATE: (no-flags)   (or `restart_seqs`, `cascade`)
 *     message: transactional: 1 prefix: p, sz: 5 content:hello
 *     COMMIT 754 (at 2026-11-29 12:00:00.123456+00)
 *
 * Names are printed with `quote_identifier` (`public."Odd Name"`, `"x y"[text]`); type names are
 * `format_type_be` output (`integer`, `integer[]`, `timestamp with time zone`, no type modifier;
 * the capture adds modifiers from the catalog, docs/schema-drift.md).
 *
 * Values become JSON:
 * - `null` → null; `unchanged-toast-datum` → not a value: the column is listed in `unchanged`.
 * - booleans (`true`/`false`) → boolean.
 * - `smallint`, `integer`, `oid` → number.
 * - `bigint` → number when it is a safe integer (|v| ≤ 2^53 − 1), otherwise its exact decimal text
 *   (a string), so no digit is ever lost.
 * - `numeric` → always its decimal text (a string): scale and precision are kept (`1.10`).
 * - `real`, `double precision` → number when JavaScript writes the number back as the same text
 *   (`0.1`, `1.5`); otherwise that text, exactly (a string): `-0`, `NaN`, `Infinity`,
 *   `-Infinity`, whole numbers of magnitude 2^53 or more (`3.4028235e+38`), and any text whose
 *   JavaScript spelling differs (`1e-05`, 17 significant digits).
 * - A `smallint`, `integer` or `oid` is always a number (PostgreSQL writes no `-0` for them).
 * - bit strings (`B'1010'`) → the bits as a string (`1010`).
 * - everything else (text, dates, arrays, json, …) is printed quoted and becomes its text, a string.
 */
import { InvalidRecordError } from '../shared/errors.ts';
import type { JsonValue } from '../shared/event.ts';
import type { SlotChange, SlotColumn } from './slot-record.ts';

/** One parsed change of a row (or one table of a TRUNCATE). */
export interface TestDecodingChange extends SlotChange {
  /** Schema and table name, unquoted. */
  schema: string;
  name: string;
}

/** One line of test_decoding output, parsed. */
export type TestDecodingLine =
  | { kind: 'begin'; xid: string | null }
  | { kind: 'commit'; xid: string | null; commitTs: string | null }
  | { kind: 'change'; change: TestDecodingChange }
  | { kind: 'truncate'; changes: TestDecodingChange[]; restartSeqs: boolean; cascade: boolean }
  | { kind: 'message'; transactional: boolean; prefix: string; content: string };

/** Thrown for a line the parser does not understand; `offset` is where in the line it stopped. */
export class TestDecodingParseError extends InvalidRecordError {
  constructor(
    readonly line: string,
    readonly offset: number,
    reason: string,
  ) {
    super('test_decoding', `${reason} at offset ${offset} of ${JSON.stringify(line.length > 120 ? `${line.slice(0, 120)}…` : line)}`);
  }
}

/**
 * Whether a UTF-16 code unit ends a plain (unquoted) identifier: white space (what `\s` matches),
 * `"`, `.`, `:`, `[`, `]` or `,`. Scanned code unit by code unit, without a regular expression's
 * match object per name (docs/performance-log.md, "35. The slot capture's work per change").
 */
function endsPlainIdentifier(ch: number): boolean {
  if (ch > 0x20 && ch < 0x7f) return ch === 0x22 || ch === 0x2e || ch === 0x3a || ch === 0x5b || ch === 0x5d || ch === 0x2c;
  if (ch < 0x80) return ch === 0x20 || (ch >= 0x09 && ch <= 0x0d);
  return (
    ch === 0xa0 ||
    ch === 0x1680 ||
    (ch >= 0x2000 && ch <= 0x200a) ||
    ch === 0x2028 ||
    ch === 0x2029 ||
    ch === 0x202f ||
    ch === 0x205f ||
    ch === 0x3000 ||
    ch === 0xfeff
  );
}

class Cursor {
  pos = 0;
  constructor(readonly text: string) {}
  fail(reason: string): never {
    throw new TestDecodingParseError(this.text, this.pos, reason);
  }
  startsWith(s: string): boolean {
    return this.text.startsWith(s, this.pos);
  }
  expect(s: string): void {
    if (!this.startsWith(s)) this.fail(`expected ${JSON.stringify(s)}`);
    this.pos += s.length;
  }
  /**
   * Reads an identifier as `quote_identifier` prints it: plain, or double-quoted with `""` escapes.
   * `slot` names its place in the line (schema, table, n-th column): a plain name equal to the last
   * one read there is that same string, not a new one (`recent`).
   */
  identifier(what: string, slot: number): string {
    if (this.text[this.pos] === '"') {
      let out = '';
      this.pos++;
      for (;;) {
        const q = this.text.indexOf('"', this.pos);
        if (q < 0) this.fail(`unterminated quoted ${what}`);
        out += this.text.slice(this.pos, q);
        this.pos = q + 1;
        if (this.text[this.pos] === '"') {
          out += '"';
          this.pos++;
        } else return out;
      }
    }
    const text = this.text;
    const known = recentIdentifiers[slot];
    const knownEnd = recentEnd(text, this.pos, known);
    if (knownEnd >= 0 && (knownEnd === text.length || endsPlainIdentifier(text.charCodeAt(knownEnd)))) {
      this.pos = knownEnd;
      return known!;
    }
    let end = this.pos;
    while (end < text.length && !endsPlainIdentifier(text.charCodeAt(end))) end++;
    if (end === this.pos) this.fail(`expected a ${what}`);
    const name = text.slice(this.pos, end);
    this.pos = end;
    if (slot < RECENT_SLOTS) recentIdentifiers[slot] = name;
    return name;
  }
}

/**
 * The names and types read last at each place of a line (schema, table, n-th column), so that the
 * same name on the next line is the same string instead of a new one: most lines repeat the last
 * one's names and types, and fewer new strings per change is less for the garbage collector to
 * copy (docs/performance-log.md, "35. The slot capture's work per change"). Only names and types
 * are reused, never values; a name is reused only where a fresh read would give exactly it.
 */
const RECENT_SLOTS = 256;
const recentIdentifiers: string[] = [];
const recentTypes: string[] = [];
/** Column slots start after the schema's and the table's. */
const FIRST_COLUMN_SLOT = 2;

/** Where `known` ends when `text` has it at `pos`; -1 when it has not, or there is none. */
function recentEnd(text: string, pos: number, known: string | undefined): number {
  return known !== undefined && text.startsWith(known, pos) ? pos + known.length : -1;
}

/** Reads `schema.table` (each part possibly quoted). */
function qualifiedName(c: Cursor): { schema: string; name: string } {
  const schema = c.identifier('schema name', 0);
  c.expect('.');
  const name = c.identifier('table name', 1);
  return { schema, name };
}

/**
 * Reads a type name up to the `]` that closes it (type names may contain `[]` and quoted parts).
 * The type read last at `slot`, when the text has it there followed by `]`, is that same string: a
 * scan of it ends exactly there, as it did when it was read.
 */
function typeName(c: Cursor, slot: number): string {
  const text = c.text;
  const known = recentTypes[slot];
  const knownEnd = recentEnd(text, c.pos, known);
  if (knownEnd >= 0 && text.charCodeAt(knownEnd) === 0x5d /* ] */) {
    c.pos = knownEnd;
    return known!;
  }
  const type = scanTypeName(c);
  if (slot < RECENT_SLOTS) recentTypes[slot] = type;
  return type;
}

function scanTypeName(c: Cursor): string {
  const text = c.text;
  const start = c.pos;
  let depth = 0;
  let quoted = false;
  for (; c.pos < text.length; c.pos++) {
    const ch = text.charCodeAt(c.pos);
    if (quoted) {
      if (ch === 0x22 /* " */) quoted = false;
    } else if (ch === 0x22) quoted = true;
    else if (ch === 0x5b /* [ */) depth++;
    else if (ch === 0x5d /* ] */) {
      if (depth === 0) {
        const type = text.slice(start, c.pos);
        if (type === '') c.fail('expected a type name');
        return type;
      }
      depth--;
    }
  }
  return c.fail('unterminated type name');
}

const SAFE_INTEGER = /^-?[0-9]+$/;

/** Maps an unquoted literal (numbers, booleans) of a given type to JSON. */
function unquotedValue(c: Cursor, raw: string, type: string): JsonValue {
  const v = literalValue(raw, type);
  return v === NOT_A_LITERAL ? c.fail(literalProblem) : v;
}

/**
 * The JSON value of a literal test_decoding prints unquoted (integers, floats, numeric, booleans),
 * given the type name it prints in brackets (`bigint`, `numeric`, …); `fail` is called with the
 * reason when the text is not such a literal of that type. The one conversion of these values:
 * the capture's parser and the snapshot's rows (lambda/core/snapshot/snapshot.ts) both use it, so a value
 * is the same on both paths (docs/snapshot.md).
 */
export function unquotedLiteralValue(raw: string, type: string, fail: (reason: string) => never): JsonValue {
  const v = literalValue(raw, type);
  return v === NOT_A_LITERAL ? fail(literalProblem) : v;
}

/** What `literalValue` returns for a text that is no literal of the type; the reason is in `literalProblem`. */
const NOT_A_LITERAL: unique symbol = Symbol('not a literal');
let literalProblem = '';

function notALiteral(reason: string): typeof NOT_A_LITERAL {
  literalProblem = reason;
  return NOT_A_LITERAL;
}

/** `unquotedLiteralValue`'s conversion, without a function or object made per value (docs/performance-log.md, "35. The slot capture's work per change"). */
function literalValue(raw: string, type: string): JsonValue | typeof NOT_A_LITERAL {
  if (raw === 'true' || raw === 'false') {
    if (type !== 'boolean') return notALiteral(`boolean literal for a column of type ${type}`);
    return raw === 'true';
  }
  switch (type) {
    case 'smallint':
    case 'integer':
    case 'oid': {
      if (!SAFE_INTEGER.test(raw)) return notALiteral(`expected an integer, got ${JSON.stringify(raw)}`);
      return Number(raw);
    }
    case 'bigint': {
      if (!SAFE_INTEGER.test(raw)) return notALiteral(`expected an integer, got ${JSON.stringify(raw)}`);
      const n = Number(raw);
      return Number.isSafeInteger(n) ? n : raw;
    }
    case 'numeric':
      if (!/^(-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?|NaN|-?Infinity)$/.test(raw)) return notALiteral(`expected a numeric, got ${JSON.stringify(raw)}`);
      return raw;
    case 'real':
    case 'double precision': {
      if (raw === 'NaN' || raw === 'Infinity' || raw === '-Infinity') return raw;
      const n = Number(raw);
      if (!Number.isFinite(n) || !/^-?[0-9.]+([eE][-+]?[0-9]+)?$/.test(raw)) return notALiteral(`expected a floating-point number, got ${JSON.stringify(raw)}`);
      // A number only when JavaScript writes it back as the same text: `-0` (written `0`), a
      // 17-digit text (`0.10000000000000001`), an exponent spelled otherwise (`1e-05`) keep their
      // exact text. A whole number of 2^53 or more (`3.4028235e+38`, `1e+20`) as a JSON number
      // reads like an integer that lost digits, which every event refuses (docs/exact-numbers.md):
      // its text too, like NaN.
      return String(n) === raw && !(Number.isInteger(n) && !Number.isSafeInteger(n)) ? n : raw;
    }
    default:
      return notALiteral(`unquoted value ${JSON.stringify(raw)} for a column of type ${type}`);
  }
}

/** Reads a single-quoted literal with `''` escapes; may span lines. */
function quoted(c: Cursor): string {
  c.expect("'");
  let out = '';
  for (;;) {
    const q = c.text.indexOf("'", c.pos);
    if (q < 0) c.fail('unterminated quoted value');
    out += c.text.slice(c.pos, q);
    c.pos = q + 1;
    if (c.text.charCodeAt(c.pos) === 0x27 /* ' */) {
      out += "'";
      c.pos++;
    } else return out;
  }
}

interface Tuple {
  columns: SlotColumn[];
  unchanged: string[];
  /** The printed type of each unchanged column. */
  unchangedTypes: Record<string, string>;
}

/**
 * The columns of the tuple being read, reused from line to line: a tuple's array is copied from it
 * at its exact length, and a tuple without unchanged values shares one empty `unchanged` list and
 * makes no object for their types. Fewer and smaller objects kept per change, for the garbage
 * collector to copy while a batch is built (docs/performance-log.md, "47. The slot capture: DMS
 * records written from the parsed change").
 */
const scratch: SlotColumn[] = [];
const NO_UNCHANGED: string[] = Object.freeze([]) as unknown as string[];
const NO_UNCHANGED_TYPES: Record<string, string> = Object.freeze({}) as Record<string, string>;

/** Reads ` name[type]:value` pairs until the end of the line or a section keyword (` new-tuple:`). */
function tuple(c: Cursor, stopAt: string | null): Tuple {
  let n = 0;
  let unchanged = NO_UNCHANGED;
  let unchangedTypes = NO_UNCHANGED_TYPES;
  const text = c.text;
  while (c.pos < text.length) {
    if (stopAt !== null && text.startsWith(stopAt, c.pos)) break;
    c.expect(' ');
    const slot = FIRST_COLUMN_SLOT + n + unchanged.length;
    const name = c.identifier('column name', slot);
    c.expect('[');
    const type = typeName(c, slot);
    c.expect(']:');
    const first = text.charCodeAt(c.pos);
    if (first === 0x27 /* ' */) {
      scratch[n++] = { name, type, value: quoted(c) };
    } else if (first === 0x42 /* B */ && text.charCodeAt(c.pos + 1) === 0x27) {
      c.pos++;
      scratch[n++] = { name, type, value: quoted(c) };
    } else {
      const int = INTEGER_TYPES.has(type) ? shortInteger(text, c.pos) : null;
      if (int !== null) {
        c.pos = int.end;
        scratch[n++] = { name, type, value: int.value };
        continue;
      }
      const end = c.text.indexOf(' ', c.pos);
      const raw = c.text.slice(c.pos, end < 0 ? c.text.length : end);
      c.pos += raw.length;
      if (raw === '') c.fail(`missing value of column ${JSON.stringify(name)}`);
      if (raw === 'null') scratch[n++] = { name, type, value: null };
      else if (raw === 'unchanged-toast-datum') {
        if (unchanged === NO_UNCHANGED) {
          unchanged = [];
          unchangedTypes = {};
        }
        unchanged.push(name);
        unchangedTypes[name] = type;
      } else scratch[n++] = { name, type, value: unquotedValue(c, raw, type) };
    }
  }
  return { columns: scratch.slice(0, n), unchanged, unchangedTypes };
}

/** The types test_decoding prints as unquoted integers (`literalValue`'s integers). */
const INTEGER_TYPES: ReadonlySet<string> = new Set(['smallint', 'integer', 'oid', 'bigint']);
/** What `shortInteger` read: the value and where its text ends (reused: no object per value). */
const readInteger = { value: 0, end: 0 };

/**
 * An integer of at most 15 digits (always a safe integer) at `pos`, ending at a space or the end of
 * the line, read without its text; null for anything else, which the general path reads (and
 * refuses as it did). Its value is `literalValue`'s: `Number` of the text, `-0` for `-0`.
 */
function shortInteger(text: string, pos: number): { value: number; end: number } | null {
  let i = pos;
  const negative = text.charCodeAt(i) === 0x2d; /* - */
  if (negative) i++;
  const start = i;
  let v = 0;
  for (; i < text.length; i++) {
    const d = text.charCodeAt(i) - 0x30;
    if (d < 0 || d > 9) break;
    v = v * 10 + d;
  }
  const digits = i - start;
  if (digits === 0 || digits > 15 || (i < text.length && text.charCodeAt(i) !== 0x20)) return null;
  readInteger.value = negative ? -v : v;
  readInteger.end = i;
  return readInteger;
}

const OPERATIONS = ['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE'] as const;

/** The operation a change line names at `pos` (`INSERT:` …), read without a match object; null for none. */
function operationAt(line: string, pos: number): (typeof OPERATIONS)[number] | null {
  for (const op of OPERATIONS) if (line.startsWith(op, pos) && line.charCodeAt(pos + op.length) === 0x3a /* : */) return op;
  return null;
}
const TX_RE = /^(BEGIN|COMMIT)(?: ([0-9]+))?(?: \(at (.+)\))?$/;
const TS_RE = /^(\d{4,})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?([+-])(\d{2})(?::?(\d{2}))?(?::?(\d{2}))?( BC)?$/;

/**
 * Converts a `timestamp with time zone` as PostgreSQL prints it with `DateStyle=ISO`
 * (`2026-11-29 12:00:00.123456+00`, `…+05:30`) to ISO-8601 UTC with microseconds
 * (`2026-11-29T12:00:00.123456Z`). Throws `InvalidRecordError` for other shapes, so the
 * capture's session must keep `DateStyle` at `ISO` (the default); any `TimeZone` works.
 */
export function pgTimestampToIso(text: string): string {
  const m = TS_RE.exec(text);
  if (!m || m[12]) throw new InvalidRecordError('commitTs', `expected a timestamp like '2026-11-29 12:00:00.123456+00', got ${JSON.stringify(text)}`);
  const [, y, mo, d, h, mi, s, frac, sign, oh, om, os] = m;
  const micros = (frac ?? '').padEnd(6, '0');
  const offsetSeconds = (sign === '-' ? -1 : 1) * (Number(oh) * 3600 + Number(om ?? 0) * 60 + Number(os ?? 0));
  const ms = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s)) - offsetSeconds * 1000;
  const iso = new Date(ms).toISOString(); // …T12:00:00.000Z (whole seconds: the offset has no fraction)
  return `${iso.slice(0, 19)}.${micros}Z`;
}

/** The last table a change named, and its `schema.table` (the same string for the next change of it). */
const lastTable = { schema: '', name: '', table: '.' };

function tableChange(
  schema: string,
  name: string,
  op: TestDecodingChange['op'],
  columns: SlotColumn[] | null,
  oldKey: SlotColumn[] | null,
  unchanged: string[],
  unchangedTypes?: Record<string, string>,
): TestDecodingChange {
  if (schema !== lastTable.schema || name !== lastTable.name) {
    lastTable.schema = schema;
    lastTable.name = name;
    lastTable.table = `${schema}.${name}`;
  }
  const change: TestDecodingChange = { schema, name, table: lastTable.table, op, columns, oldKey, unchanged };
  if (unchangedTypes !== undefined) change.unchangedTypes = unchangedTypes;
  return change;
}

/**
 * The first table a change line names (`schema.table`, unquoted), or null when the line does not
 * start like a change line: what a line that failed to parse further on was about.
 */
export function tableOfLine(line: string): string | null {
  try {
    const c = new Cursor(line);
    c.expect('table ');
    const { schema, name } = qualifiedName(c);
    return `${schema}.${name}`;
  } catch {
    return null;
  }
}

/**
 * Parses one line of test_decoding output. Throws `TestDecodingParseError` (an
 * `InvalidRecordError`) with the offset where the line stopped making sense.
 */
export function parseTestDecodingLine(line: string): TestDecodingLine {
  // A row change (`table …`) is neither a BEGIN, a COMMIT nor a message: no regular expression tried on it.
  const first = line.charCodeAt(0);
  const tx = first === 0x42 /* B */ || first === 0x43 /* C */ ? TX_RE.exec(line) : null;
  if (tx) {
    const xid = tx[2] ?? null;
    if (tx[1] === 'BEGIN') {
      if (tx[3] !== undefined) throw new TestDecodingParseError(line, 0, 'BEGIN carries no timestamp');
      return { kind: 'begin', xid };
    }
    return { kind: 'commit', xid, commitTs: tx[3] === undefined ? null : pgTimestampToIso(tx[3]) };
  }
  const msg = first === 0x6d /* m */ ? /^message: transactional: ([01]) prefix: (.*?), sz: ([0-9]+) content:/s.exec(line) : null;
  if (msg) {
    const content = line.slice(msg[0].length);
    return { kind: 'message', transactional: msg[1] === '1', prefix: msg[2]!, content };
  }
  const c: Cursor = new Cursor(line);
  c.expect('table ');
  const tables = [qualifiedName(c)];
  while (c.startsWith(', ')) {
    c.pos += 2;
    tables.push(qualifiedName(c));
  }
  c.expect(': ');
  const op = operationAt(line, c.pos);
  if (op === null) c.fail('expected INSERT:, UPDATE:, DELETE: or TRUNCATE:');
  c.pos += op.length + 1;
  if (op === 'TRUNCATE') {
    const flags = line.slice(c.pos);
    if (flags !== ' (no-flags)' && !/^( restart_seqs)?( cascade)?$/.test(flags)) c.fail('expected TRUNCATE flags');
    return {
      kind: 'truncate',
      restartSeqs: flags.includes(' restart_seqs'),
      cascade: flags.includes(' cascade'),
      changes: tables.map((t) => tableChange(t.schema, t.name, 'truncate', null, null, NO_UNCHANGED)),
    };
  }
  if (tables.length !== 1) c.fail(`${op} names exactly one table`);
  const { schema, name } = tables[0]!;
  const noData = c.startsWith(' (no-tuple-data)') && c.pos + ' (no-tuple-data)'.length === line.length;
  switch (op) {
    case 'INSERT': {
      if (noData) c.fail('INSERT without tuple data');
      const t = tuple(c, null);
      if (t.unchanged.length > 0) c.fail('INSERT with an unchanged TOAST value');
      return { kind: 'change', change: tableChange(schema, name, 'insert', t.columns, null, NO_UNCHANGED) };
    }
    case 'DELETE': {
      // Without a replica identity only the fact of the delete is known; the slot record refuses it (no key).
      const old = noData ? null : tuple(c, null);
      return { kind: 'change', change: tableChange(schema, name, 'delete', null, old ? old.columns : null, NO_UNCHANGED) };
    }
    default: {
      let oldKey: SlotColumn[] | null = null;
      if (c.startsWith(' old-key:')) {
        c.pos += ' old-key:'.length;
        oldKey = tuple(c, ' new-tuple:').columns;
        c.expect(' new-tuple:');
      }
      if (c.startsWith(' (no-tuple-data)') && c.pos + ' (no-tuple-data)'.length === line.length) c.fail('UPDATE without tuple data');
      const t = tuple(c, null);
      return {
        kind: 'change',
        change: tableChange(schema, name, 'update', t.columns, oldKey, t.unchanged, t.unchanged.length > 0 ? t.unchangedTypes : undefined),
      };
    }
  }
}

/** One row of `pg_logical_slot_peek_changes`: the LSN (text), the xid (text) and the line. */
export interface SlotRow {
  lsn: string;
  xid: string | null;
  data: string;
}

/** A committed transaction: what the slot capture turns into slot records (index = position in `changes`). */
export interface DecodedTransaction {
  xid: string;
  /** LSN of the `COMMIT` row: the transaction's commit position. */
  commitLsn: string;
  /** Commit time, ISO-8601 UTC. */
  commitTs: string;
  changes: TestDecodingChange[];
}

/**
 * Groups peeked rows into committed transactions, in order. Returns the complete transactions
 * and how many rows they span (`consumed`): rows after the last `COMMIT` belong to a transaction
 * whose end was not read yet and are left for the next peek. `message` lines are skipped (the
 * platform does not use logical messages). Needs `include-xids` and `include-timestamp`; throws
 * `TestDecodingParseError` for an unparsable line and `InvalidRecordError` for a row sequence
 * that breaks BEGIN…COMMIT nesting.
 */
export function groupTransactions(rows: readonly SlotRow[]): { transactions: DecodedTransaction[]; consumed: number } {
  const transactions: DecodedTransaction[] = [];
  let consumed = 0;
  let open: { xid: string; changes: TestDecodingChange[] } | null = null;
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i]!;
    const line = parseTestDecodingLine(row.data);
    switch (line.kind) {
      case 'begin':
        if (open) throw new InvalidRecordError(rowAt(row, i), `BEGIN inside transaction ${open.xid}`);
        if (line.xid === null) throw new InvalidRecordError(rowAt(row, i), "BEGIN without a transaction id: peek with 'include-xids', '1'");
        open = { xid: line.xid, changes: [] };
        break;
      case 'commit': {
        if (!open) throw new InvalidRecordError(rowAt(row, i), 'COMMIT without BEGIN');
        const tx: { xid: string; changes: TestDecodingChange[] } = open;
        if (line.xid !== tx.xid) throw new InvalidRecordError(rowAt(row, i), `COMMIT ${line.xid} closes transaction ${tx.xid}`);
        if (line.commitTs === null) throw new InvalidRecordError(rowAt(row, i), "COMMIT without a timestamp: peek with 'include-timestamp', '1'");
        transactions.push({ xid: tx.xid, commitLsn: row.lsn, commitTs: line.commitTs, changes: tx.changes });
        open = null;
        consumed = i + 1;
        break;
      }
      case 'change':
        if (!open) throw new InvalidRecordError(rowAt(row, i), 'row change outside a transaction');
        open.changes.push(line.change);
        break;
      case 'truncate':
        if (!open) throw new InvalidRecordError(rowAt(row, i), 'TRUNCATE outside a transaction');
        open.changes.push(...line.changes);
        break;
      case 'message':
        if (!open) consumed = i + 1; // a non-transactional message between transactions
        break;
    }
  }
  return { transactions, consumed };
}

function rowAt(row: SlotRow, i: number): string {
  return `row ${i} (lsn ${row.lsn})`;
}
