/**
 * Exact numbers (docs/exact-numbers.md): the lossless JSON parser, the number rule, and exact
 * decimal comparison. The randomized part compares `parseJsonExact` with `JSON.parse` on random
 * documents: count `CDC_PROPERTY_RUNS` (default 2,000), seed `CDC_PROPERTY_SEED` (default
 * random), both printed.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decimalIdentity, exactNumber, jsonStructure, keyValueText, parseJsonExact } from '../../../lambda/core/shared/json-exact.ts';
import { keyText } from '../../../lambda/core/shared/event.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 2_000);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);

describe('exactNumber', () => {
  it('keeps safe integers and exactly printable numbers as numbers', () => {
    expect(exactNumber('0')).toBe(0);
    expect(exactNumber('-42')).toBe(-42);
    expect(exactNumber('9007199254740991')).toBe(9007199254740991);
    expect(exactNumber('1.5')).toBe(1.5);
    expect(exactNumber('-0.25')).toBe(-0.25);
  });
  it('keeps every other literal as its exact text', () => {
    expect(exactNumber('9007199254740992')).toBe('9007199254740992');
    expect(exactNumber('9007199254740993')).toBe('9007199254740993');
    expect(exactNumber('-9223372036854775808')).toBe('-9223372036854775808');
    expect(exactNumber('12.30')).toBe('12.30');
    expect(exactNumber('-0')).toBe('-0');
    expect(exactNumber('-0.0')).toBe('-0.0');
    expect(parseJsonExact('[-0, 0, -0.0]')).toEqual(['-0', 0, '-0.0']);
    expect(exactNumber('1e5')).toBe('1e5');
    expect(exactNumber('3.14159265358979323846')).toBe('3.14159265358979323846');
    expect(exactNumber('123456789012345678901234567890.123456789')).toBe('123456789012345678901234567890.123456789');
  });
});

describe('parseJsonExact', () => {
  it('does not collapse 9007199254740993 and 9007199254740992 (plain JSON.parse does)', () => {
    const a = parseJsonExact('{"data":{"id":9007199254740993}}') as { data: { id: unknown } };
    const b = parseJsonExact('{"data":{"id":9007199254740992}}') as { data: { id: unknown } };
    expect(a.data.id).toBe('9007199254740993');
    expect(b.data.id).toBe('9007199254740992');
    expect(keyText({ id: a.data.id as string })).not.toBe(keyText({ id: b.data.id as string }));
    // the defect this replaces
    expect((JSON.parse('{"id":9007199254740993}') as { id: number }).id).toBe(9007199254740992);
  });

  it('parses strings, escapes, nesting, literals and whitespace like JSON.parse', () => {
    const text = ' {"a" : [1, -2.5, true, false, null, "x\\"y\\u00e9\\n", {"b": {}}, []], "__proto__": 1, "c": "é"} ';
    expect(parseJsonExact(text)).toEqual(JSON.parse(text));
    expect(Object.getPrototypeOf(parseJsonExact('{"__proto__": {"x": 1}}'))).toBe(Object.prototype);
  });

  it.each(['', '{', '{"a":1,}', '[1 2]', '01', '1.', '.5', '+1', '"abc', '"a\nb"', '{"a" 1}', 'tru', 'nul', '[1]x', '{a:1}', '"\\x"', '-'])(
    'refuses %j like JSON.parse does',
    (bad) => {
      expect(() => JSON.parse(bad)).toThrow();
      expect(() => parseJsonExact(bad)).toThrow(/^record: not valid JSON: .* at offset \d+$/);
    },
  );

  it(`agrees with JSON.parse on random documents whose numbers are exact (${RUNS} runs)`, () => {
    console.log(`json-exact property: ${RUNS} documents, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED} CDC_PROPERTY_RUNS=${RUNS})`);
    const exactNumbers = fc.oneof(
      fc.maxSafeInteger(),
      fc.double({ noNaN: true, noDefaultInfinity: true }).filter((d) => !Object.is(d, -0) && (!Number.isInteger(d) || Number.isSafeInteger(d))),
    );
    const doc = fc.letrec((tie) => ({
      value: fc.oneof({ depthSize: 'small' }, fc.string({ unit: 'binary' }), exactNumbers, fc.boolean(), fc.constant(null), tie('array'), tie('object')),
      array: fc.array(tie('value'), { maxLength: 5 }),
      object: fc.dictionary(fc.string({ unit: 'binary' }), tie('value'), { maxKeys: 5 }),
    })).value;
    fc.assert(
      fc.property(doc, fc.boolean(), (v, pretty) => {
        const text = JSON.stringify(v, null, pretty ? 2 : undefined);
        const parsed = parseJsonExact(text);
        // every number JSON.stringify writes is its shortest text, so both parsers agree exactly
        expect(JSON.stringify(parsed)).toBe(JSON.stringify(JSON.parse(text)));
      }),
      { numRuns: RUNS, seed: SEED },
    );
  });

  it(`reads every number literal by the exact-number rule wherever it stands, beside texts that look like numbers (${RUNS} runs)`, () => {
    // Literals of every form after any whitespace, in any position, beside strings that hold what a
    // literal looks like. The expected value is built with the text, from exactNumber.
    type Node = { lit: string } | { str: string } | boolean | null | Node[] | { obj: Array<[string, Node]> };
    const literal = fc.oneof(
      fc.integer({ min: -1000, max: 1000 }).map(String),
      fc.maxSafeInteger().map(String),
      fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }).map(String),
      fc.constantFrom('-0', '0', '-0.0', '12.30', '1e5', '1E-3', '2.5e+10', '0.1', '3.14159265358979323846', '9007199254740993', '123456789012345.0'),
      fc.double({ noNaN: true, noDefaultInfinity: true }).map((d) => JSON.stringify(d)),
    );
    // Strings that hold what a literal looks like: a timestamp, `:1.50,`, brackets, escapes.
    const text = fc.oneof(
      fc.string(),
      fc.constantFrom('2026-12-07 22:55:06.476075+00', 'a:1.50,', 'x,-0]', '[12.30]', 'k:9007199254740993}', '\\"', ':5', ',1e5 '),
    );
    const tree = fc.letrec<{ node: Node; array: Node[]; object: { obj: Array<[string, Node]> } }>((tie) => ({
      node: fc.oneof(
        { depthSize: 'small' },
        literal.map((lit) => ({ lit })),
        text.map((str) => ({ str })),
        fc.boolean(),
        fc.constant(null),
        tie('array'),
        tie('object'),
      ),
      array: fc.array(tie('node'), { maxLength: 5 }),
      object: fc.array(fc.tuple(fc.oneof(text, fc.constantFrom('__proto__', 'id')), tie('node')), { maxLength: 5 }).map((obj) => ({ obj })),
    }));
    const ws = fc.array(fc.constantFrom('', ' ', '\n', '\t', '\r\n  '), { minLength: 64, maxLength: 64 });
    const top = fc.oneof(tree.array, tree.object, tree.node);
    fc.assert(
      fc.property(top, ws, (root, spaces) => {
        let w = 0;
        const sp = (): string => spaces[w++ % spaces.length]!;
        const render = (n: Node): string => {
          if (n === null || typeof n === 'boolean') return String(n);
          if (Array.isArray(n)) return `[${sp()}${n.map((x) => `${render(x)}${sp()}`).join(`,${sp()}`)}]`;
          if ('lit' in n) return n.lit;
          if ('str' in n) return JSON.stringify(n.str);
          return `{${sp()}${n.obj.map(([k, v]) => `${JSON.stringify(k)}${sp()}:${sp()}${render(v)}${sp()}`).join(`,${sp()}`)}}`;
        };
        const expected = (n: Node): unknown => {
          if (n === null || typeof n === 'boolean') return n;
          if (Array.isArray(n)) return n.map(expected);
          if ('lit' in n) return exactNumber(n.lit);
          if ('str' in n) return n.str;
          const out: Record<string, unknown> = {};
          for (const [k, v] of n.obj) Object.defineProperty(out, k, { value: expected(v), enumerable: true, writable: true, configurable: true });
          return out;
        };
        const textOf = render(root);
        // toStrictEqual tells 5 from '5' and -0 from 0: values by their type.
        expect(parseJsonExact(textOf)).toStrictEqual(expected(root));
      }),
      { numRuns: RUNS, seed: SEED },
    );
  });

  it('refuses nesting deeper than 512, and names the offset of a trailing comma', () => {
    expect(() => parseJsonExact(`${'['.repeat(600)}1${']'.repeat(600)}`)).toThrow(/nesting deeper than 512/);
    expect(() => parseJsonExact(`${'['.repeat(500)}1${']'.repeat(500)}`)).not.toThrow();
    expect(() => parseJsonExact('{"a":1,"b":2,}')).toThrow(/^record: not valid JSON: .* at offset 13$/);
  });

  it(`keeps the digits of random integers beyond 2^53 and of random decimals (${RUNS} runs)`, () => {
    fc.assert(
      fc.property(fc.bigInt({ min: -(2n ** 80n), max: 2n ** 80n }), fc.nat({ max: 12 }), (n, scale) => {
        const int = n.toString();
        const dec = scale === 0 ? int : `${int}.${'7'.repeat(scale - 1)}0`;
        const v = parseJsonExact(`[${int},${dec}]`) as (string | number)[];
        expect(String(v[0])).toBe(int);
        expect(typeof v[0] === 'number' ? Number.isSafeInteger(v[0]) : true).toBe(true);
        expect(String(v[1])).toBe(dec);
      }),
      { numRuns: RUNS, seed: SEED },
    );
  });
});

describe('key text of exact values', () => {
  it(`distinct int8 values give distinct key texts, equal ones equal texts, whatever the producer's form (${RUNS} runs)`, () => {
    fc.assert(
      fc.property(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }), (a, b) => {
        const fromDms = (n: bigint) => exactNumber(n.toString()); // number when safe, else text
        const fromText = (n: bigint) => n.toString(); // e.g. a snapshot row read with pg
        expect(keyText({ id: fromDms(a) }) === keyText({ id: fromDms(b) })).toBe(a === b);
        expect(keyText({ id: fromDms(a) })).toBe(keyText({ id: fromText(a) }));
      }),
      { numRuns: RUNS, seed: SEED },
    );
  });
});

describe('decimalIdentity / jsonStructure / keyValueText', () => {
  it('identifies decimals exactly, digit by digit, with no bound on the exponent', () => {
    expect(decimalIdentity('9007199254740993')).not.toBe(decimalIdentity('9007199254740992'));
    expect(decimalIdentity('12.5')).toBe(decimalIdentity('12.50'));
    expect(decimalIdentity('1e5')).toBe(decimalIdentity('100000'));
    expect(decimalIdentity('-0')).toBe(decimalIdentity('0.00'));
    expect(decimalIdentity('-0', true)).toBe('-0');
    expect(decimalIdentity('-0.0e7', true)).toBe('-0');
    expect(decimalIdentity('0', true)).toBe('0');
    expect(decimalIdentity('0.000001')).toBe(decimalIdentity('1e-6'));
    expect(decimalIdentity('1e400')).not.toBe(decimalIdentity('1e401'));
    expect(decimalIdentity('1e+308')).toBe(decimalIdentity('1e308'));
    expect(decimalIdentity('abc')).toBeNull();
    expect(decimalIdentity('')).toBeNull();
    expect(decimalIdentity('NaN')).toBeNull();
    expect(decimalIdentity('-0012.3400e1')).toBe('-1234e-1');
  });
  it('reads JSON structure without doubles; jsonb drops order and duplicates, json keeps them', () => {
    expect(jsonStructure('{"a": 9007199254740993}', true)).not.toBe(jsonStructure('{"a":9007199254740992}', true));
    expect(jsonStructure('{"a": 1.0, "b": [1, 2]}', true)).toBe(jsonStructure('{"b":[1,2],"a":1}', true));
    expect(jsonStructure('{"a": 1, "a": 2}', true)).toBe(jsonStructure('{"a":2}', true));
    expect(jsonStructure('{"a": 1, "a": 2}', false)).not.toBe(jsonStructure('{"a":2}', false));
    expect(jsonStructure('{"a": 1, "b": 2}', false)).not.toBe(jsonStructure('{"b":2,"a":1}', false));
    expect(jsonStructure(' [ 1 , "x" ] ', false)).toBe(jsonStructure('[1,"x"]', false));
    expect(jsonStructure('["\\u00e9"]', false)).toBe(jsonStructure('["é"]', false));
    expect(jsonStructure('["12.30"]', true)).not.toBe(jsonStructure('[12.30]', true));
    expect(jsonStructure('{"a":1e400}', true)).not.toBe(jsonStructure('{"a":1e401}', true));
    expect(jsonStructure('{"a":', true)).toBeNull();
    expect(jsonStructure('[1] x', true)).toBeNull();
  });
  it('gives a key value the text a sink parameter gets', () => {
    expect(keyValueText(5)).toBe('5');
    expect(keyValueText('9007199254740993')).toBe('9007199254740993');
    expect(keyValueText(true)).toBe('true');
    expect(keyText({ id: 5 })).toBe(keyText({ id: '5' }));
  });
});
