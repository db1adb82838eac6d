/**
 * Exact numbers in change events (docs/exact-numbers.md).
 *
 * A JSON number in a capture record (DMS writes `int8` and `numeric` columns as JSON numbers)
 * is only a JavaScript number in an event when the number says exactly what the record said:
 *
 * - an integer literal whose value is a safe integer (|v| ≤ 2^53 − 1) → a number;
 * - any other literal whose shortest JavaScript text (`String(Number(literal))`) is the literal
 *   itself (`1.5`, `0.25`, `-3.75`) → a number;
 * - everything else (`9007199254740993`, `12.30`, `1e5`, `3.14159265358979323846`) → a string
 *   holding the literal exactly as the record wrote it.
 *
 * This is the same representation the slot path uses (lambda/core/test-decoding.ts: `bigint`
 * beyond 2^53 and every `numeric` as its decimal text), so two distinct values never become
 * the same number, and every consumer reads them the same way: the warehouse gets the text as a
 * parameter and casts it to the column type, key text and partition keys are built from the
 * value's text (`keyValueText`), and the verdict compares decimal texts exactly
 * (`sameDecimal`).
 *
 * `parseJsonExact` is a complete JSON parser (RFC 8259) that applies this rule to every number;
 * plain `JSON.parse` would turn 9007199254740993 into 9007199254740992.
 */
import { InvalidRecordError } from './errors.ts';
import type { JsonValue } from './event.ts';

/** The value of one JSON number literal under the exact-number rule (see the module comment). */
export function exactNumber(literal: string): number | string {
  const n = Number(literal);
  if (INTEGER.test(literal)) return Number.isSafeInteger(n) ? n : literal;
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
    if (plain && i > digits && i - digits <= 15 && (t.charCodeAt(digits) !== 0x30 || i - digits === 1)) {
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

const DECIMAL = /^([-+]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([-+]?[0-9]+))?$/;

/**
 * The canonical text of a decimal number (`-0012.3400e1` → `-123.4`, `-0` → `0`), exact for
 * any number of digits, or null when `s` is not a decimal number.
 */
export function canonicalDecimal(s: string): string | null {
  const m = DECIMAL.exec(s);
  if (!m || (m[2] === '' && (m[3] ?? '') === '')) return null;
  let digits = `${m[2]}${m[3] ?? ''}`;
  const exponent = Number(m[4] ?? '0');
  if (Math.abs(exponent) > 1000) return null; // not a value any column of ours prints
  let point = m[2]!.length + exponent; // digits before the decimal point
  const lead = digits.length - digits.replace(/^0+/, '').length;
  digits = digits.slice(lead);
  point -= lead;
  digits = digits.replace(/0+$/, '');
  if (digits === '') return '0';
  const sign = m[1] === '-' ? '-' : '';
  if (point <= 0) return `${sign}0.${'0'.repeat(-point)}${digits}`;
  if (point >= digits.length) return `${sign}${digits}${'0'.repeat(point - digits.length)}`;
  return `${sign}${digits.slice(0, point)}.${digits.slice(point)}`;
}

/** Whether two texts denote the same decimal number exactly (`12.5` = `12.50`; `9007199254740993` ≠ `9007199254740992`); null when either is not a number. */
export function sameDecimal(a: string, b: string): boolean | null {
  const ca = canonicalDecimal(a);
  const cb = canonicalDecimal(b);
  return ca === null || cb === null ? null : ca === cb;
}
