/**
 * The test_decoding parser as it was before its scanning was tuned (lambda/core/capture/logical-text.ts,
 * docs/performance-log.md, "35. The slot capture's work per change"), kept unchanged as the
 * reference the randomized equivalence test (test/core/capture/logical-text-equivalence.test.ts)
 * holds the tuned parser to: same lines parsed to the same values, same errors at the same offsets.
 * Not used by the platform.
 */
import { InvalidRecordError } from '../../lambda/core/shared/errors.ts';
import type { JsonValue } from '../../lambda/core/shared/event.ts';
import type { SlotColumn } from '../../lambda/core/capture/slot-record.ts';
import {
  pgTimestampToIso,
  type DecodedTransaction,
  type SlotRow,
  type TestDecodingChange,
  type TestDecodingLine,
} from '../../lambda/core/capture/logical-text.ts';

/** Thrown for a line the parser does not understand; `offset` is where in the line it stopped. */
class TestDecodingParseError extends InvalidRecordError {
  constructor(
    readonly line: string,
    readonly offset: number,
    reason: string,
  ) {
    super('test_decoding', `${reason} at offset ${offset} of ${JSON.stringify(line.length > 120 ? `${line.slice(0, 120)}…` : line)}`);
  }
}

const PLAIN_IDENTIFIER = /[^\s".:[\],]+/y;

class Cursor {
  pos = 0;
  constructor(readonly text: string) {}
  fail(reason: string): never {
    throw new TestDecodingParseError(this.text, this.pos, reason);
  }
  done(): boolean {
    return this.pos >= this.text.length;
  }
  startsWith(s: string): boolean {
    return this.text.startsWith(s, this.pos);
  }
  expect(s: string): void {
    if (!this.startsWith(s)) this.fail(`expected ${JSON.stringify(s)}`);
    this.pos += s.length;
  }
  /** Reads an identifier as `quote_identifier` prints it: plain, or double-quoted with `""` escapes. */
  identifier(what: string): string {
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
    // Sticky: matches at `pos` without copying the rest of the line (docs/performance-log.md, "3. Capture").
    PLAIN_IDENTIFIER.lastIndex = this.pos;
    const m = PLAIN_IDENTIFIER.exec(this.text);
    if (!m) this.fail(`expected a ${what}`);
    this.pos += m[0].length;
    return m[0];
  }
}

/** Reads `schema.table` (each part possibly quoted). */
function qualifiedName(c: Cursor): { schema: string; name: string } {
  const schema = c.identifier('schema name');
  c.expect('.');
  const name = c.identifier('table name');
  return { schema, name };
}

/** Reads a type name up to the `]` that closes it (type names may contain `[]` and quoted parts). */
function typeName(c: Cursor): string {
  const start = c.pos;
  let depth = 0;
  let quoted = false;
  for (; c.pos < c.text.length; c.pos++) {
    const ch = c.text[c.pos];
    if (quoted) {
      if (ch === '"') quoted = false;
    } else if (ch === '"') quoted = true;
    else if (ch === '[') depth++;
    else if (ch === ']') {
      if (depth === 0) {
        const type = c.text.slice(start, c.pos);
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
  return unquotedLiteralValue(raw, type, (reason) => c.fail(reason));
}

/**
 * The JSON value of a literal test_decoding prints unquoted (integers, floats, numeric, booleans),
 * given the type name it prints in brackets (`bigint`, `numeric`, …); `fail` is called with the
 * reason when the text is not such a literal of that type. The one conversion of these values:
 * the capture's parser and the snapshot's rows (lambda/core/snapshot/snapshot.ts) both use it, so a value
 * is the same on both paths (docs/snapshot.md).
 */
function unquotedLiteralValue(raw: string, type: string, fail: (reason: string) => never): JsonValue {
  const c = { fail };
  if (raw === 'true' || raw === 'false') {
    if (type !== 'boolean') c.fail(`boolean literal for a column of type ${type}`);
    return raw === 'true';
  }
  switch (type) {
    case 'smallint':
    case 'integer':
    case 'oid': {
      if (!SAFE_INTEGER.test(raw)) c.fail(`expected an integer, got ${JSON.stringify(raw)}`);
      return Number(raw);
    }
    case 'bigint': {
      if (!SAFE_INTEGER.test(raw)) c.fail(`expected an integer, got ${JSON.stringify(raw)}`);
      const n = Number(raw);
      return Number.isSafeInteger(n) ? n : raw;
    }
    case 'numeric':
      if (!/^(-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?|NaN|-?Infinity)$/.test(raw)) c.fail(`expected a numeric, got ${JSON.stringify(raw)}`);
      return raw;
    case 'real':
    case 'double precision': {
      if (raw === 'NaN' || raw === 'Infinity' || raw === '-Infinity') return raw;
      const n = Number(raw);
      if (!Number.isFinite(n) || !/^-?[0-9.]+([eE][-+]?[0-9]+)?$/.test(raw)) c.fail(`expected a floating-point number, got ${JSON.stringify(raw)}`);
      // A number only when JavaScript writes it back as the same text: `-0` (written `0`), a
      // 17-digit text (`0.10000000000000001`), an exponent spelled otherwise (`1e-05`) keep their
      // exact text. A whole number of 2^53 or more (`3.4028235e+38`, `1e+20`) as a JSON number
      // reads like an integer that lost digits, which every event refuses (docs/exact-numbers.md):
      // its text too, like NaN.
      return String(n) === raw && !(Number.isInteger(n) && !Number.isSafeInteger(n)) ? n : raw;
    }
    default:
      return c.fail(`unquoted value ${JSON.stringify(raw)} for a column of type ${type}`);
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
    if (c.text[c.pos] === "'") {
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

/** Reads ` name[type]:value` pairs until the end of the line or a section keyword (` new-tuple:`). */
function tuple(c: Cursor, stopAt: string | null): Tuple {
  const columns: SlotColumn[] = [];
  const unchanged: string[] = [];
  const unchangedTypes: Record<string, string> = {};
  while (!c.done()) {
    if (stopAt !== null && c.startsWith(stopAt)) break;
    c.expect(' ');
    const name = c.identifier('column name');
    c.expect('[');
    const type = typeName(c);
    c.expect(']:');
    if (c.startsWith("'")) {
      columns.push({ name, type, value: quoted(c) });
    } else if (c.startsWith("B'")) {
      c.pos++;
      columns.push({ name, type, value: quoted(c) });
    } else {
      const end = c.text.indexOf(' ', c.pos);
      const raw = c.text.slice(c.pos, end < 0 ? c.text.length : end);
      c.pos += raw.length;
      if (raw === '') c.fail(`missing value of column ${JSON.stringify(name)}`);
      if (raw === 'null') columns.push({ name, type, value: null });
      else if (raw === 'unchanged-toast-datum') {
        unchanged.push(name);
        unchangedTypes[name] = type;
      } else columns.push({ name, type, value: unquotedValue(c, raw, type) });
    }
  }
  return { columns, unchanged, unchangedTypes };
}

const OPERATION = /(INSERT|UPDATE|DELETE|TRUNCATE):/y;
const TX_RE = /^(BEGIN|COMMIT)(?: ([0-9]+))?(?: \(at (.+)\))?$/;

function tableChange(schema: string, name: string, fields: Omit<TestDecodingChange, 'schema' | 'name' | 'table'>): TestDecodingChange {
  return { schema, name, table: `${schema}.${name}`, ...fields };
}

/**
 * Parses one line of test_decoding output. Throws `TestDecodingParseError` (an
 * `InvalidRecordError`) with the offset where the line stopped making sense.
 */
export function referenceParseTestDecodingLine(line: string): TestDecodingLine {
  const tx = TX_RE.exec(line);
  if (tx) {
    const xid = tx[2] ?? null;
    if (tx[1] === 'BEGIN') {
      if (tx[3] !== undefined) throw new TestDecodingParseError(line, 0, 'BEGIN carries no timestamp');
      return { kind: 'begin', xid };
    }
    return { kind: 'commit', xid, commitTs: tx[3] === undefined ? null : pgTimestampToIso(tx[3]) };
  }
  const msg = /^message: transactional: ([01]) prefix: (.*?), sz: ([0-9]+) content:/s.exec(line);
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
  OPERATION.lastIndex = c.pos;
  const op = OPERATION.exec(line);
  if (!op) c.fail('expected INSERT:, UPDATE:, DELETE: or TRUNCATE:');
  c.pos += op[0].length;
  if (op[1] === 'TRUNCATE') {
    const flags = line.slice(c.pos);
    if (flags !== ' (no-flags)' && !/^( restart_seqs)?( cascade)?$/.test(flags)) c.fail('expected TRUNCATE flags');
    return {
      kind: 'truncate',
      restartSeqs: flags.includes(' restart_seqs'),
      cascade: flags.includes(' cascade'),
      changes: tables.map((t) => tableChange(t.schema, t.name, { op: 'truncate', columns: null, oldKey: null, unchanged: [] })),
    };
  }
  if (tables.length !== 1) c.fail(`${op[1]} names exactly one table`);
  const { schema, name } = tables[0]!;
  const noData = c.startsWith(' (no-tuple-data)') && c.pos + ' (no-tuple-data)'.length === line.length;
  switch (op[1]) {
    case 'INSERT': {
      if (noData) c.fail('INSERT without tuple data');
      const t = tuple(c, null);
      if (t.unchanged.length > 0) c.fail('INSERT with an unchanged TOAST value');
      return { kind: 'change', change: tableChange(schema, name, { op: 'insert', columns: t.columns, oldKey: null, unchanged: [] }) };
    }
    case 'DELETE': {
      // Without a replica identity only the fact of the delete is known; the slot record refuses it (no key).
      const old = noData ? null : tuple(c, null);
      return { kind: 'change', change: tableChange(schema, name, { op: 'delete', columns: null, oldKey: old ? old.columns : null, unchanged: [] }) };
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
        change: tableChange(schema, name, {
          op: 'update',
          columns: t.columns,
          oldKey,
          unchanged: t.unchanged,
          ...(t.unchanged.length > 0 ? { unchangedTypes: t.unchangedTypes } : {}),
        }),
      };
    }
  }
}

/**
 * Groups peeked rows into committed transactions, in order. Returns the complete transactions
 * and how many rows they span (`consumed`): rows after the last `COMMIT` belong to a transaction
 * whose end was not read yet and are left for the next peek. `message` lines are skipped (the
 * platform does not use logical messages). Needs `include-xids` and `include-timestamp`; throws
 * `TestDecodingParseError` for an unparsable line and `InvalidRecordError` for a row sequence
 * that breaks BEGIN…COMMIT nesting.
 */
export function referenceGroupTransactions(rows: readonly SlotRow[]): { transactions: DecodedTransaction[]; consumed: number } {
  const transactions: DecodedTransaction[] = [];
  let consumed = 0;
  let open: { xid: string; changes: TestDecodingChange[] } | null = null;
  rows.forEach((row, i) => {
    const line = referenceParseTestDecodingLine(row.data);
    const where = (): string => `row ${i} (lsn ${row.lsn})`;
    switch (line.kind) {
      case 'begin':
        if (open) throw new InvalidRecordError(where(), `BEGIN inside transaction ${open.xid}`);
        if (line.xid === null) throw new InvalidRecordError(where(), "BEGIN without a transaction id: peek with 'include-xids', '1'");
        open = { xid: line.xid, changes: [] };
        break;
      case 'commit': {
        if (!open) throw new InvalidRecordError(where(), 'COMMIT without BEGIN');
        const tx: { xid: string; changes: TestDecodingChange[] } = open;
        if (line.xid !== tx.xid) throw new InvalidRecordError(where(), `COMMIT ${line.xid} closes transaction ${tx.xid}`);
        if (line.commitTs === null) throw new InvalidRecordError(where(), "COMMIT without a timestamp: peek with 'include-timestamp', '1'");
        transactions.push({ xid: tx.xid, commitLsn: row.lsn, commitTs: line.commitTs, changes: tx.changes });
        open = null;
        consumed = i + 1;
        break;
      }
      case 'change':
        if (!open) throw new InvalidRecordError(where(), 'row change outside a transaction');
        open.changes.push(line.change);
        break;
      case 'truncate':
        if (!open) throw new InvalidRecordError(where(), 'TRUNCATE outside a transaction');
        open.changes.push(...line.changes);
        break;
      case 'message':
        if (!open) consumed = i + 1; // a non-transactional message between transactions
        break;
    }
  });
  return { transactions, consumed };
}
