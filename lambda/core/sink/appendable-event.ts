/**
 * The one-pass decode of a change event's JSON text for the append (docs/warehouse-apply.md, "The
 * critical path: append"; docs/performance-log.md, "57. The applier's decode in one pass"): one
 * scan of the text as the normalizer writes it (`JSON.stringify` of the event, fields in the
 * order `validateChangeEvent` builds them) that gives the fields the append reads and, per column
 * of the key and the after image, where its value's JSON is in the text, without building the
 * event's objects. It accepts only what it can give exactly as `JSON.parse` + `validateChangeEvent`
 * would, and answers null for anything else (whitespace, another field order or field, a truncate,
 * `missing` or `handover` columns, a name with an escape or one an object's prototype has, a
 * duplicate name, a number that validation refuses or that is not plain, a key value that is not a
 * scalar): the caller then takes today's path for that text, so every fallback is tested code.
 * Pure: no I/O.
 */
import { LOWER_IDENT } from '../../../contracts/identifiers.ts';
import type { CaptureMethod, ChangeOp } from '../shared/event.ts';
import { POSITION_LENGTH } from '../shared/position.ts';

/** How a value's JSON is written in the text (the span's third number). */
export const ValueKind = {
  /** A string without escapes: the span is its characters (no quotes), its value as they are. */
  PLAIN_STRING: 0,
  /** A string with escapes: the span includes its quotes (`JSON.parse` of it is the value). */
  ESCAPED_STRING: 1,
  /** A number whose text is `String` of its value (an integer of at most 15 digits). */
  PLAIN_NUMBER: 2,
  /** Any other number that validation accepts: its value is `Number` of the text. */
  NUMBER: 3,
  TRUE: 4,
  FALSE: 5,
  NULL: 6,
  /** An object or an array: the span is its JSON. */
  COMPOSITE: 7,
} as const;
export type ValueKind = (typeof ValueKind)[keyof typeof ValueKind];

/** The column names of the key and of the after image, in the text's order; shared by the events that have them. */
export interface RowShape {
  readonly keyNames: readonly string[];
  /** Null: no after image (a delete). */
  readonly afterNames: readonly string[] | null;
}

/** What the append needs of one event, read from its text in one pass. */
export interface AppendableEvent {
  readonly text: string;
  readonly source: string;
  readonly table: string;
  readonly op: Exclude<ChangeOp, 'truncate'>;
  readonly position: string;
  readonly commitTs: string;
  readonly txId: string | null;
  readonly schemaVersion: number;
  readonly capture: CaptureMethod;
  readonly synthetic: boolean;
  /** Whether the event has a before image (validation's only use of it here). */
  readonly hasBefore: boolean;
  readonly shape: RowShape;
  /** Per slot (the key's columns, then the after image's): start, end and `ValueKind` of its value in `text`. */
  readonly spans: readonly number[];
}

const Q = 0x22; // "
const BS = 0x5c; // backslash
const COMMA = 0x2c;
const COLON = 0x3a;
const OPEN = 0x7b; // {
const CLOSE = 0x7d; // }
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;

const OP_LIST: ReadonlyArray<AppendableEvent['op']> = ['update', 'insert', 'delete', 'snapshot'];
const CAPTURE_LIST: readonly CaptureMethod[] = ['slot', 'dms', 'poll', 'snapshot'];
const TABLE_ID = /^[^.]+\.[^.]+$/;

/** Thrown inside the scan for anything it does not take; caught by `decodeAppendable` (null). */
class NotAppendable {}
const NOT = new NotAppendable();

/** A raw control character: `JSON.parse` refuses one inside a string, and none may be outside. */
const CONTROL = /[\u0000-\u001f]/;

/**
 * The scan's state: the text, the cursor, where the next backslash is (-1: none after the cursor),
 * the spans found so far. Module state, not an object per event (the applier decodes every record).
 */
let T = '';
let at = 0;
let nextBackslash = -1;
let spans = new Int32Array(3 * 64);
let slots = 0;

/** The last texts that passed their checks (a batch repeats them: one source, one table, one transaction). */
let passedHead = '';
let passedSource = '';
let passedTable = '';
let passedCommitTs = '';
/** The last shape of an event with an after image and of one without (a delete): a table's events mostly have one of the two. */
let lastShape: Shape | null = null;
let lastDeleteShape: Shape | null = null;

/** A shape with each member's text as the text writes it (`{"name":` for the first, `,"name":` after). */
interface Shape extends RowShape {
  readonly keyMembers: readonly string[];
  readonly afterMembers: readonly string[] | null;
}

/** Reads one event's text; null when it is not one this pass renders exactly (take `JSON.parse` + `validateChangeEvent`). */
export function decodeAppendable(text: string): AppendableEvent | null {
  T = text;
  at = 0;
  slots = 0;
  try {
    if (CONTROL.test(text)) return null;
    nextBackslash = text.indexOf('\\');
    return event();
  } catch {
    // NOT, or anything else (a document nested deeper than this recursive scan's stack, which
    // `JSON.parse` reads): today's path decides, and names a bad record as it always did.
    return null;
  } finally {
    T = '';
  }
}

function event(): AppendableEvent {
  let source: string;
  let table: string;
  if (passedHead !== '' && has(passedHead, 0)) {
    at = passedHead.length;
    source = passedSource;
    table = passedTable;
  } else {
    lit('{"v":1,"source":');
    source = plainString();
    if (!LOWER_IDENT.test(source)) throw NOT;
    lit(',"table":');
    table = plainString();
    if (!TABLE_ID.test(table)) throw NOT;
    lit(',"op":"');
    passedSource = source;
    passedTable = table;
    passedHead = T.slice(0, at);
  }
  const op = opAt();
  lit(',"key":');
  const shape = op === 'delete' ? lastDeleteShape : lastShape;
  const keyNames = row(true, shape?.keyMembers ?? null, shape?.keyNames ?? null);
  if (keyNames.length === 0) throw NOT;
  lit(',"after":');
  let afterNames: string[] | null = null;
  if (has('null', at)) {
    if (op !== 'delete') throw NOT;
    at += 4;
  } else {
    if (op === 'delete') throw NOT;
    afterNames = row(false, shape?.afterMembers ?? null, shape?.afterNames ?? null);
  }
  lit(',"before":');
  let hasBefore = false;
  if (has('null', at)) at += 4;
  else {
    skipRow();
    hasBefore = true;
  }
  lit(',"missing":[],"position":"');
  const position = positionCopy(at);
  for (let i = 0; i < POSITION_LENGTH; i++) {
    const c = T.charCodeAt(at + i);
    if (!((c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66))) throw NOT;
  }
  at += POSITION_LENGTH;
  lit('","commitTs":');
  let commitTs: string;
  if (passedCommitTs !== '' && T.charCodeAt(at) === Q && has(passedCommitTs, at + 1) && T.charCodeAt(at + 1 + passedCommitTs.length) === Q) {
    commitTs = passedCommitTs;
    at += passedCommitTs.length + 2;
  } else {
    commitTs = plainString();
    if (Number.isNaN(Date.parse(commitTs))) throw NOT;
    passedCommitTs = commitTs;
  }
  lit(',"txId":');
  let txId: string | null = null;
  if (has('null', at)) at += 4;
  else txId = plainString();
  lit(',"schemaVersion":');
  const schemaVersion = positiveInteger();
  lit(',"capture":"');
  const capture = captureAt();
  let synthetic: boolean;
  if (has(',"synthetic":false}', at)) synthetic = false;
  else if (has(',"synthetic":true}', at)) synthetic = true;
  else throw NOT;
  if (at + (synthetic ? 18 : 19) !== T.length) throw NOT;
  return {
    text: T,
    source,
    table,
    op,
    position,
    commitTs,
    txId,
    schemaVersion,
    capture,
    synthetic,
    hasBefore,
    shape: shapeOf(shape, keyNames, afterNames),
    spans: spansCopy(),
  };
}

/**
 * The position at `pos`, a string of its own. A slice of 13 characters or more of a string keeps
 * the whole string alive, and the text is itself a slice of the piece its object was decoded in
 * (`utf8Lines`): the rebuild's replay keeps the position of every event it hands over until it
 * ends, so sliced positions kept every decoded archive object's text alive (docs/performance-log.md,
 * "59. The rebuild's replay through the one-pass decode"). Its two halves are shorter
 * and so are copies; their concatenation holds only them.
 */
function positionCopy(pos: number): string {
  const half = POSITION_LENGTH / 2;
  return T.slice(pos, pos + half) + T.slice(pos + half, pos + POSITION_LENGTH);
}

/** The op at the cursor (its opening quote read), through its closing quote. */
function opAt(): AppendableEvent['op'] {
  for (const op of OP_LIST) {
    if (has(op, at) && T.charCodeAt(at + op.length) === Q) {
      at += op.length + 1;
      return op;
    }
  }
  throw NOT;
}

/** The capture method at the cursor (its opening quote read), through its closing quote. */
function captureAt(): CaptureMethod {
  for (const c of CAPTURE_LIST) {
    if (has(c, at) && T.charCodeAt(at + c.length) === Q) {
      at += c.length + 1;
      return c;
    }
  }
  throw NOT;
}

/** Whether `s` is in the text at `pos` (a short one by a loop the compiler inlines: `startsWith` is a call per use). */
function has(s: string, pos: number): boolean {
  const n = s.length;
  if (n > 12) return T.startsWith(s, pos);
  if (pos + n > T.length) return false;
  for (let i = 0; i < n; i++) if (T.charCodeAt(pos + i) !== s.charCodeAt(i)) return false;
  return true;
}

/** The spans found, as the event keeps them (a small array: a typed array per event costs more to make). */
function spansCopy(): number[] {
  const n = 3 * slots;
  const out = new Array<number>(n);
  for (let i = 0; i < n; i++) out[i] = spans[i]!;
  return out;
}

/** `s` at the cursor, else not appendable. */
function lit(s: string): void {
  if (!has(s, at)) throw NOT;
  at += s.length;
}

/** The end (its closing quote) of the string whose opening quote is at `start`, and whether it has escapes (the cursor then after it). */
function stringEnd(start: number): boolean {
  const q = T.indexOf('"', start + 1);
  if (q < 0) throw NOT;
  if (nextBackslash < 0 || nextBackslash > q) {
    at = q + 1;
    return false;
  }
  // Escapes: step through them (strict JSON: valid escapes only).
  let i = start + 1;
  for (;;) {
    const c = T.charCodeAt(i);
    if (c === Q) break;
    if (Number.isNaN(c)) throw NOT;
    if (c === BS) {
      const x = T.charCodeAt(i + 1);
      if (x === 0x75 /* u */) {
        for (let k = 2; k < 6; k++) if (!isHex(T.charCodeAt(i + k))) throw NOT;
        i += 6;
        continue;
      }
      if (x !== Q && x !== BS && x !== 0x2f && x !== 0x62 && x !== 0x66 && x !== 0x6e && x !== 0x72 && x !== 0x74) throw NOT;
      i += 2;
      continue;
    }
    i++;
  }
  at = i + 1;
  nextBackslash = T.indexOf('\\', at);
  return true;
}

/** A string of no escapes at the cursor, its value. */
function plainString(): string {
  if (T.charCodeAt(at) !== Q) throw NOT;
  const start = at + 1;
  if (stringEnd(at)) throw NOT;
  return T.slice(start, at - 1);
}

/** A schema version as validation accepts it and `String` writes it: a positive integer of at most 15 digits. */
function positiveInteger(): number {
  const start = at;
  let i = start;
  const first = T.charCodeAt(i);
  if (first < 0x31 || first > 0x39) throw NOT;
  let n = first - 0x30;
  i++;
  for (let c = T.charCodeAt(i); isDigit(c); c = T.charCodeAt(++i)) n = n * 10 + (c - 0x30);
  if (i - start > 15) throw NOT;
  at = i;
  return n;
}

/**
 * An object of column values (the key or the after image), each value's span pushed; its names:
 * `names` (the previous shape's) while the text's members are `members`, else read from the text.
 */
function row(isKey: boolean, members: readonly string[] | null, names: readonly string[] | null): string[] {
  if (members !== null && names !== null) {
    const save = at;
    const saveSlots = slots;
    const saveBackslash = nextBackslash;
    let i = 0;
    for (; i < members.length; i++) {
      if (!has(members[i]!, at)) break;
      at += members[i]!.length;
      value(isKey, true);
    }
    if (i === members.length && (members.length === 0 ? has('{}', at) : T.charCodeAt(at) === CLOSE)) {
      at += members.length === 0 ? 2 : 1;
      return names as string[];
    }
    at = save;
    slots = saveSlots;
    nextBackslash = saveBackslash;
  }
  if (T.charCodeAt(at) !== OPEN) throw NOT;
  at++;
  const read: string[] = [];
  if (T.charCodeAt(at) === CLOSE) {
    at++;
    return read;
  }
  for (;;) {
    read.push(name());
    value(isKey, true);
    const c = T.charCodeAt(at++);
    if (c === CLOSE) return read;
    if (c !== COMMA) throw NOT;
  }
}

/** A member's name and its colon: no escapes. */
function name(): string {
  const n = plainString();
  if (T.charCodeAt(at) !== COLON) throw NOT;
  at++;
  return n;
}

/** The before image: checked as validation checks it (an object; no top-level number it refuses), nothing kept. */
function skipRow(): void {
  if (T.charCodeAt(at) !== OPEN) throw NOT;
  at++;
  if (T.charCodeAt(at) === CLOSE) {
    at++;
    return;
  }
  for (;;) {
    if (T.charCodeAt(at) !== Q) throw NOT;
    stringEnd(at);
    if (T.charCodeAt(at) !== COLON) throw NOT;
    at++;
    value(false, false);
    const c = T.charCodeAt(at++);
    if (c === CLOSE) return;
    if (c !== COMMA) throw NOT;
  }
}

/** One top-level value of a row, its span pushed when `keep`; a key's must be a string, number or boolean. */
function value(isKey: boolean, keep: boolean): void {
  const start = at;
  const c = T.charCodeAt(start);
  let kind: ValueKind;
  let s = start;
  let e: number;
  if (c === Q) {
    if (stringEnd(start)) {
      kind = ValueKind.ESCAPED_STRING;
      e = at;
    } else {
      kind = ValueKind.PLAIN_STRING;
      s = start + 1;
      e = at - 1;
    }
  } else if (c === 0x74 /* t */) {
    lit('true');
    kind = ValueKind.TRUE;
    e = at;
  } else if (c === 0x66 /* f */) {
    lit('false');
    kind = ValueKind.FALSE;
    e = at;
  } else if (c === 0x6e /* n */) {
    if (isKey) throw NOT;
    lit('null');
    kind = ValueKind.NULL;
    e = at;
  } else if (c === OPEN || c === OPEN_ARRAY) {
    if (isKey) throw NOT;
    skipComposite();
    kind = ValueKind.COMPOSITE;
    e = at;
  } else {
    kind = numberKind();
    e = at;
  }
  if (!keep) return;
  if (3 * slots + 3 > spans.length) {
    const more = new Int32Array(2 * spans.length);
    more.set(spans);
    spans = more;
  }
  spans[3 * slots] = s;
  spans[3 * slots + 1] = e;
  spans[3 * slots + 2] = kind;
  slots++;
}

/** Skips an object or array (strict JSON, no whitespace), nested to any depth. */
function skipComposite(): void {
  const close = T.charCodeAt(at) === OPEN ? CLOSE : CLOSE_ARRAY;
  at++;
  if (T.charCodeAt(at) === close) {
    at++;
    return;
  }
  for (;;) {
    if (close === CLOSE) {
      if (T.charCodeAt(at) !== Q) throw NOT;
      stringEnd(at);
      if (T.charCodeAt(at) !== COLON) throw NOT;
      at++;
    }
    nested();
    const c = T.charCodeAt(at++);
    if (c === close) return;
    if (c !== COMMA) throw NOT;
  }
}

/** Skips any JSON value inside a composite (no checks on its numbers beyond the grammar: validation makes none). */
function nested(): void {
  const c = T.charCodeAt(at);
  if (c === Q) stringEnd(at);
  else if (c === OPEN || c === OPEN_ARRAY) skipComposite();
  else if (c === 0x74) lit('true');
  else if (c === 0x66) lit('false');
  else if (c === 0x6e) lit('null');
  else numberText();
}

/** A top-level number of a row: `PLAIN_NUMBER` or `NUMBER`; not appendable when validation refuses it (-0, an integer beyond 2^53). */
function numberKind(): ValueKind {
  const start = at;
  const plain = numberText();
  const digits = at - start - (T.charCodeAt(start) === 0x2d ? 1 : 0);
  if (plain && digits <= 15) {
    if (digits === 1 && has('-0', start)) throw NOT;
    return ValueKind.PLAIN_NUMBER;
  }
  const n = Number(T.slice(start, at));
  if (Object.is(n, -0) || (Number.isInteger(n) && !Number.isSafeInteger(n))) throw NOT;
  return ValueKind.NUMBER;
}

/** Skips a number by JSON's grammar; whether it is an integer without fraction or exponent. */
function numberText(): boolean {
  let i = at;
  if (T.charCodeAt(i) === 0x2d) i++;
  const first = T.charCodeAt(i);
  if (first === 0x30) i++;
  else if (first >= 0x31 && first <= 0x39) while (isDigit(T.charCodeAt(i))) i++;
  else throw NOT;
  let plain = true;
  if (T.charCodeAt(i) === 0x2e) {
    plain = false;
    i++;
    if (!isDigit(T.charCodeAt(i))) throw NOT;
    while (isDigit(T.charCodeAt(i))) i++;
  }
  const x = T.charCodeAt(i);
  if (x === 0x65 || x === 0x45) {
    plain = false;
    i++;
    const sign = T.charCodeAt(i);
    if (sign === 0x2b || sign === 0x2d) i++;
    if (!isDigit(T.charCodeAt(i))) throw NOT;
    while (isDigit(T.charCodeAt(i))) i++;
  }
  at = i;
  return plain;
}

const isDigit = (c: number): boolean => c >= 0x30 && c <= 0x39;
const isHex = (c: number): boolean => (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46);

/** The shape of these names: `last` (the previous event's of its kind) when they are the same, else a new one if the names are usable. */
function shapeOf(last: Shape | null, keyNames: string[], afterNames: string[] | null): Shape {
  if (last !== null && last.keyNames === keyNames && last.afterNames === afterNames) return last;
  if (last !== null && sameNames(last.keyNames, keyNames) && sameNames(last.afterNames, afterNames)) return last;
  // A name an object's prototype has reads differently through `in` (as `changelogRow` reads), a
  // duplicate name is one member to `JSON.parse` (the last value), and a name that is an array
  // index comes first among an object's keys whatever the text's order: all take today's path.
  for (const names of [keyNames, afterNames ?? []]) {
    if (new Set(names).size !== names.length) throw NOT;
    for (const n of names) if (n in Object.prototype || isDigit(n.charCodeAt(0))) throw NOT;
  }
  const members = (names: readonly string[]): string[] => names.map((n, i) => `${i === 0 ? '{' : ','}${JSON.stringify(n)}:`);
  const shape = { keyNames, afterNames, keyMembers: members(keyNames), afterMembers: afterNames === null ? null : members(afterNames) };
  if (afterNames === null) lastDeleteShape = shape;
  else lastShape = shape;
  return shape;
}

function sameNames(a: readonly string[] | null, b: readonly string[] | null): boolean {
  if (a === null || b === null) return a === b;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
