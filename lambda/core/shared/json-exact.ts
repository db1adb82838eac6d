/**
 * Exact numbers in change events (docs/exact-numbers.md).
 *
 * A JSON number in a capture record (DMS writes `int8` and `numeric` columns as JSON numbers)
 * is only a JavaScript number in an event when the number says exactly what the record said:
 *
 * - an integer literal whose value is a safe integer (|v| ≤ 2^53 − 1) → a number, except `-0`;
 * - any other literal whose shortest JavaScript text (`String(Number(literal))`) is the literal
 *   itself (`1.5`, `0.25`, `-3.75`) → a number;
 * - everything else (`9007199254740993`, `12.30`, `1e5`, `3.14159265358979323846`, `-0`) → a string
 *   holding the literal exactly as the record wrote it.
 *
 * This is the same representation the slot path uses (lambda/core/capture/logical-text.ts: `bigint`
 * beyond 2^53 and every `numeric` as its decimal text), so two distinct values never become
 * the same number, and every consumer reads them the same way: the warehouse gets the text as a
 * parameter and casts it to the column type, key text and partition keys are built from the
 * value's text (`keyValueText`), and reconciliation compares decimal texts exactly
 * (`decimalIdentity`, lambda/core/shared/same-value.ts).
 *
 * `parseJsonExact` is a complete JSON parser (RFC 8259) that applies this rule to every number;
 * plain `JSON.parse` would turn 9007199254740993 into 9007199254740992.
 */
import { InvalidRecordError } from './errors.ts';
import type { JsonValue } from './json-shape.ts';

/** The value of one JSON number literal under the exact-number rule (see the module comment). */
export function exactNumber(literal: string): number | string {
  const n = Number(literal);
  // `-0` as a number would be written `0` (JSON.stringify, String): its text keeps the sign.
  if (INTEGER.test(literal)) return Number.isSafeInteger(n) && !Object.is(n, -0) ? n : literal;
  return Number.isFinite(n) && String(n) === literal ? n : literal;
}

const INTEGER = /^-?[0-9]+$/;
const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?/y;

class Parser {
  pos = 0;
  constructor(readonly text: string) {}

  fail(reason: string): never {
    throw new InvalidRecordError('record', `not valid JSON: ${reason} at offset ${this.pos}`);
  }

  ws(): void {
    const t = this.text;
    while (this.pos < t.length) {
      const c = t.charCodeAt(this.pos);
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) this.pos++;
      else break;
    }
  }

  value(depth: number): JsonValue {
    if (depth > 512) this.fail('nesting deeper than 512');
    this.ws();
    switch (this.text.charCodeAt(this.pos)) {
      case 0x7b: // {
        return this.object(depth);
      case 0x5b: // [
        return this.array(depth);
      case 0x22: // "
        return this.string();
      case 0x74: // t
        return this.literal('true', true);
      case 0x66: // f
        return this.literal('false', false);
      case 0x6e: // n
        return this.literal('null', null);
      default:
        if (this.pos >= this.text.length) this.fail('unexpected end of input');
        return this.number();
    }
  }

  literal<T extends JsonValue>(word: string, v: T): T {
    if (!this.text.startsWith(word, this.pos)) this.fail(`unexpected token`);
    this.pos += word.length;
    return v;
  }

  number(): number | string {
    const t = this.text;
    const start = this.pos;
    let i = start;
    let plain = true; // only digits (and a leading minus): an integer literal
    if (t.charCodeAt(i) === 0x2d) i++;
    const digits = i;
    while (i < t.length) {
      const c = t.charCodeAt(i);
      if (c >= 0x30 && c <= 0x39) i++;
      else if (c === 0x2e || c === 0x65 || c === 0x45 || c === 0x2b || c === 0x2d) {
        plain = false;
        i++;
      } else break;
    }
    const literal = t.slice(start, i);
    // Fast path for the common small integer; everything else is checked against the grammar.
    // (Not `-0`: its sign would be lost; `exactNumber` keeps its text.)
    if (plain && i > digits && i - digits <= 15 && (t.charCodeAt(digits) !== 0x30 || (i - digits === 1 && digits === start))) {
      this.pos = i;
      return Number(literal);
    }
    NUMBER.lastIndex = start;
    const m = NUMBER.exec(t);
    if (!m || m[0].length !== literal.length) this.fail('unexpected token');
    this.pos = i;
    return exactNumber(literal);
  }

  string(): string {
    const t = this.text;
    const start = this.pos;
    let escaped = false;
    for (let i = start + 1; i < t.length; i++) {
      const c = t.charCodeAt(i);
      if (c === 0x22) {
        this.pos = i + 1;
        if (!escaped) return t.slice(start + 1, i);
        try {
          return JSON.parse(t.slice(start, i + 1)) as string;
        } catch {
          this.pos = start;
          return this.fail('bad escape in string');
        }
      }
      if (c === 0x5c) {
        escaped = true;
        i++;
      } else if (c < 0x20) {
        this.pos = i;
        this.fail('control character in string');
      }
    }
    this.pos = t.length;
    return this.fail('unterminated string');
  }

  array(depth: number): JsonValue[] {
    this.pos++;
    const out: JsonValue[] = [];
    this.ws();
    if (this.text[this.pos] === ']') {
      this.pos++;
      return out;
    }
    for (;;) {
      out.push(this.value(depth + 1));
      this.ws();
      const c = this.text[this.pos++];
      if (c === ']') return out;
      if (c !== ',') {
        this.pos--;
        this.fail("expected ',' or ']'");
      }
    }
  }

  object(depth: number): { [k: string]: JsonValue } {
    this.pos++;
    const out: { [k: string]: JsonValue } = {};
    this.ws();
    if (this.text[this.pos] === '}') {
      this.pos++;
      return out;
    }
    for (;;) {
      this.ws();
      if (this.text[this.pos] !== '"') this.fail('expected a property name');
      const k = this.string();
      this.ws();
      if (this.text[this.pos] !== ':') this.fail("expected ':'");
      this.pos++;
      const v = this.value(depth + 1);
      // Same semantics as JSON.parse for "__proto__": an own property, never the prototype.
      if (k === '__proto__') Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
      else out[k] = v;
      this.ws();
      const c = this.text[this.pos++];
      if (c === '}') return out;
      if (c !== ',') {
        this.pos--;
        this.fail("expected ',' or '}'");
      }
    }
  }
}

/**
 * Parses JSON text like `JSON.parse`, except that numbers follow the exact-number rule (see the
 * module comment). Throws `InvalidRecordError` (field `record`) naming the offset of a syntax error.
 */
export function parseJsonExact(text: string): JsonValue {
  const p = new Parser(text);
  const v = p.value(0);
  p.ws();
  if (p.pos !== text.length) p.fail('unexpected text after the value');
  return v;
}

/**
 * The text of a scalar value as the sinks receive it (SQL parameter, key text): strings as they
 * are, numbers in JavaScript's shortest form, booleans as `true`/`false`. Under the
 * exact-number rule a number's text is its literal, so `5` and `"5"` (an `int8` key from two
 * producers) are the same key, and `9007199254740993` and `9007199254740992` are not.
 */
export function keyValueText(v: string | number | boolean): string {
  return typeof v === 'string' ? v : String(v);
}

/**
 * A JSON text's structure as one comparable text, or null when `text` is not JSON: whitespace
 * between tokens dropped, strings by their characters (escapes undone), numbers by exact decimal
 * value (`decimalIdentity`: `1.0` and `1` alike, `9007199254740993` and `…992` not; never a
 * double). With `asJsonb`, objects as jsonb stores them: a duplicate key's last value wins and
 * members are sorted (order is not kept); without, members in order, duplicates kept (as `json`
 * keeps its text). Used by the value comparison (lambda/core/shared/same-value.ts).
 */
export function jsonStructure(text: string, asJsonb: boolean): string | null {
  try {
    const p = new StructureParser(text, asJsonb);
    const v = p.structure(0);
    p.ws();
    return p.pos === text.length ? v : null;
  } catch {
    return null;
  }
}

class StructureParser extends Parser {
  constructor(
    text: string,
    readonly asJsonb: boolean,
  ) {
    super(text);
  }

  structure(depth: number): string {
    if (depth > 512) this.fail('nesting deeper than 512');
    this.ws();
    const c = this.text[this.pos];
    if (c === '{') return this.members(depth);
    if (c === '[') {
      this.pos++;
      const items: string[] = [];
      this.ws();
      if (this.text[this.pos] === ']') {
        this.pos++;
        return '[]';
      }
      for (;;) {
        items.push(this.structure(depth + 1));
        this.ws();
        const d = this.text[this.pos++];
        if (d === ']') return `[${items.join(',')}]`;
        if (d !== ',') this.fail("expected ',' or ']'");
      }
    }
    if (c === '"') return JSON.stringify(this.string());
    if (c === 't' || c === 'f' || c === 'n') return String(this.value(depth));
    const start = this.pos;
    this.number();
    return `#${decimalIdentity(this.text.slice(start, this.pos))}`;
  }

  members(depth: number): string {
    this.pos++;
    const members: Array<[string, string]> = [];
    this.ws();
    if (this.text[this.pos] === '}') {
      this.pos++;
      return '{}';
    }
    for (;;) {
      this.ws();
      if (this.text[this.pos] !== '"') this.fail('expected a property name');
      const k = JSON.stringify(this.string());
      this.ws();
      if (this.text[this.pos] !== ':') this.fail("expected ':'");
      this.pos++;
      members.push([k, this.structure(depth + 1)]);
      this.ws();
      const d = this.text[this.pos++];
      if (d === '}') break;
      if (d !== ',') this.fail("expected ',' or '}'");
    }
    const kept = this.asJsonb ? [...new Map(members)].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)) : members;
    return `{${kept.map(([k, v]) => `${k}:${v}`).join(',')}}`;
  }
}

const DECIMAL_PARTS = /^([-+]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([-+]?[0-9]+))?$/;

/**
 * A decimal number's exact identity: `<sign><digits>e<exponent>` with no leading or trailing
 * zero digit (`12.50` → `125e-1`, `1e400` → `1e400`), zero as `0` (`-0` too, unless
 * `signedZero`: then `-0`); null when `s` is not a decimal number. No bound on digits or exponent.
 */
export function decimalIdentity(s: string, signedZero = false): string | null {
  const m = DECIMAL_PARTS.exec(s);
  if (!m || (m[2] === '' && (m[3] ?? '') === '')) return null;
  const frac = m[3] ?? '';
  const digits = `${m[2]}${frac}`.replace(/^0+/, '');
  const trimmed = digits.replace(/0+$/, '');
  const exponent = BigInt(m[4] ?? '0') - BigInt(frac.length) + BigInt(digits.length - trimmed.length);
  const negative = m[1] === '-';
  if (trimmed === '') return negative && signedZero ? '-0' : '0';
  return `${negative ? '-' : ''}${trimmed}e${exponent}`;
}
