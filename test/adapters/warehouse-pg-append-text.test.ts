/**
 * The one-pass decode (lambda/core/sink/appendable-event.ts) and the COPY text written from it
 * (lambda/adapters/warehouse-pg-append-text.ts) against today's path: `JSON.parse` +
 * `validateChangeEvent` + `changelogCopyText`. Over random event texts as the normalizer writes
 * them (`encodeChangeEvent`, values as the capture gives them: safe integers, floats that round
 * trip, numerics, NaN and infinities, bytea, dates and times as text, JSON values, COPY's special
 * characters, control characters, lone surrogates, non-ASCII and long text, NULLs, deletes,
 * before images) and over texts changed by hand (whitespace, other orders, escapes in names,
 * numbers validation refuses, truncates, `missing`, `handover`, cut texts): every text the decode
 * takes, today's path takes too, with the same fields (by type) and the same COPY bytes for
 * random changelog columns, and the applier's lazy event reads as today's event (fields, its plain
 * event, `JSON.stringify`); everything else is a fallback (null). Seed and count printed;
 * `SEED=<n>` repeats a run.
 */
import { describe, expect, it } from 'vitest';
import { encodeChangeEvent } from '../../lambda/adapters/change-log-kinesis.ts';
import { appendableCopyText } from '../../lambda/adapters/warehouse-pg-append-text.ts';
import { appendableOf, lazyEventOf, parsedEvent, plainEvent } from '../../lambda/core/sink/lazy-event.ts';
import { changelogCopyText } from '../../lambda/adapters/warehouse-pg-copy-text.ts';
import { decodeAppendable, type AppendableEvent } from '../../lambda/core/sink/appendable-event.ts';
import { validateChangeEvent, type ChangeEvent, type JsonValue } from '../../lambda/core/shared/event.ts';
import { CHANGELOG_CDC_COLUMNS } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { rng } from '../helpers/rng.ts';

/** Values as the capture writes them (lambda/core/capture/logical-text.ts: numbers only when they round trip, the rest as text). */
const TEXTS = [
  '-32768',
  'NaN',
  'Infinity',
  '-Infinity',
  '1e-30',
  '123456789012345678901234567890.123456789',
  '-0.000',
  '9223372036854775807',
  '3.4028235e+38',
  '-0',
  '\\x00ff',
  '\\x',
  'infinity',
  '4713-01-01 BC',
  '294276-12-31 23:59:59.999999',
  '2024-02-29 23:59:59.999999+05:30',
  '1 year 2 mons 3 days 04:05:06.789',
  '(NaN,Infinity)',
  '{a,b}',
  '{"a": 1, "b": [true, null]}',
  '😀 ünïcødé 中文',
  'quote \' dq " bs \\ nl \n tab \t cr \r',
  '',
  'NULL',
  '\\N',
  'ctl \u0001\b\f\u001f end',
  'lone \ud800 and \udfff',
  '\u2028\u2029',
];
const NUMBERS = [0, 1, -1, 32767, -2147483648, 9007199254740991, -9007199254740991, 0.1, 5e-324, 1.5e-300, 123.456, -0.25, 1e21 / 1e6];
const NAMES = ['id', 'k2', 'name', 'note', 'amount', 'flag', 'doc', 'Ünï', 'col with space'];
/** Names JSON escapes: now and then (the decode falls back for them). */
const RARE_NAMES = ['a"q', 'tab\tname'];
const RESERVED = CHANGELOG_CDC_COLUMNS.map((c) => c.name);

function randomEvent(r: () => number): ChangeEvent {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const value = (): JsonValue => {
    const k = r();
    if (k < 0.003) return pick(['x', 'é', '😀', '\\']).repeat(20_000 + Math.floor(r() * 60_000));
    if (k < 0.4) return pick(TEXTS);
    if (k < 0.55) return Math.floor(r() * 2e6) - 1e6;
    if (k < 0.65) return pick(NUMBERS);
    if (k < 0.72) return r() < 0.5;
    if (k < 0.82) return null;
    if (k < 0.9) return { b: pick(TEXTS), a: [1, 2.5, pick(TEXTS), null, { '\t': false }] };
    if (k < 0.95) return [pick(TEXTS), -0.5, []];
    return `${pick(TEXTS)}${pick(TEXTS)}`;
  };
  const op = pick(['insert', 'update', 'delete', 'snapshot'] as const);
  const key: Record<string, JsonValue> = { id: r() < 0.5 ? Math.floor(r() * 1e12) : pick(TEXTS) };
  if (r() < 0.3) key.k2 = r() < 0.5 ? pick(TEXTS) : r() < 0.5;
  const after: Record<string, JsonValue> | null = op === 'delete' ? null : {};
  if (after) for (const c of NAMES) if (r() < 0.6) after[c] = c in key && r() < 0.8 ? key[c]! : value();
  if (after) for (const c of RARE_NAMES) if (r() < 0.005) after[c] = value();
  const raw = {
    v: 1,
    source: pick(['src', 'orders_db']),
    table: pick(['public.t', 'app.Ünï tåble']),
    op,
    key,
    after,
    before: r() < 0.3 ? { ...key, note: value() } : null,
    missing: [],
    position: (1e6 + Math.floor(r() * 9e6)).toString(16).padStart(24, '0'),
    commitTs: pick(['2026-12-06T10:00:00.000Z', '2026-12-06 10:00:00.123456+00']),
    txId: r() < 0.2 ? null : String(Math.floor(r() * 1e6)),
    schemaVersion: 1 + Math.floor(r() * 3),
    capture: pick(['dms', 'slot', 'poll', 'snapshot'] as const),
    synthetic: r() < 0.1,
  };
  return validateChangeEvent(raw);
}

/** Texts the normalizer does not write, or writes only for events the append does not take: each must fall back or match today's path. */
const EDITS: Array<[string, (t: string) => string]> = [
  ['a space after a colon', (t) => t.replace('":', '": ')],
  ['fields reordered', (t) => t.replace('{"v":1,"source":', '{"source":').replace(',"table":', ',"v":1,"table":')],
  ['an escaped name', (t) => t.replace('"id":', '"\\u0069d":')],
  ['a duplicate name', (t) => t.replace('"key":{', '"key":{"id":1,')],
  ['a prototype name', (t) => t.replace('"key":{', '"key":{"__proto__":1,')],
  ['an index name', (t) => t.replace('"key":{', '"key":{"7":1,')],
  ['-0', (t) => t.replace(/"id":[^,}]+/, '"id":-0')],
  ['an unsafe integer', (t) => t.replace(/"id":[^,}]+/, '"id":9007199254740993')],
  ['an exponent', (t) => t.replace(/"id":[^,}]+/, '"id":1E5')],
  ['a fraction written long', (t) => t.replace(/"id":[^,}]+/, '"id":2.50')],
  ['a null key value', (t) => t.replace(/"id":[^,}]+/, '"id":null')],
  ['an object key value', (t) => t.replace(/"id":[^,}]+/, '"id":{}')],
  ['an empty key', (t) => t.replace(/"key":\{[^}]*\}/, '"key":{}')],
  ['a truncate', (t) => t.replace(/"op":"[a-z]+"/, '"op":"truncate"')],
  ['missing columns', (t) => t.replace('"missing":[]', '"missing":["zz"]')],
  ['a handover', (t) => t.replace(/}$/, ',"handover":["zz"]}')],
  ['a cut text', (t) => t.slice(0, t.length - 1 - (t.length % 7))],
  ['trailing text', (t) => `${t} `],
  ['an upper-case position', (t) => t.replace(/"position":"0/, '"position":"A')],
  ['a bad commit time', (t) => t.replace(/"commitTs":"[^"]*"/, '"commitTs":"yesterday"')],
  ['a string schema version', (t) => t.replace(/"schemaVersion":(\d+)/, '"schemaVersion":"$1"')],
  ['a bad escape', (t) => t.replace('\\"', '\\x')],
  ['a raw control character', (t) => t.replace('"note":"', '"note":"\u0001')],
  ['an envelope version 2', (t) => t.replace('{"v":1', '{"v":2')],
];

/** Today's event for a text, or the error it is refused with. */
function today(text: string): ChangeEvent | Error {
  try {
    return validateChangeEvent(JSON.parse(text));
  } catch (e) {
    return e as Error;
  }
}

function bytesOf(chunks: Iterable<Buffer>): Buffer {
  return Buffer.concat([...chunks]);
}

describe('the append from the event texts in one pass', () => {
  it('takes what today takes, with the same fields and COPY bytes, and falls back otherwise, over random texts', () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1e9);
    const runs = 200;
    const r = rng(seed);
    let texts = 0;
    let taken = 0;
    let plainTaken = 0;
    let plain = 0;
    for (let run = 0; run < runs; run++) {
      const n = 1 + Math.floor(r() * (run % 20 === 0 ? 1500 : 30));
      const batch: Array<{ a: AppendableEvent; e: ChangeEvent }> = [];
      for (let i = 0; i < n; i++) {
        let text = Buffer.from(encodeChangeEvent(randomEvent(r), Infinity).data).toString('utf8');
        const edited = r() < 0.15;
        if (edited) text = EDITS[Math.floor(r() * EDITS.length)]![1](text);
        texts++;
        if (!edited) plain++;
        const at = `seed ${seed}, run ${run}, text ${i}: ${text.slice(0, 300)}`;
        const a = decodeAppendable(text);
        const e = today(text);
        if (a === null) continue;
        taken++;
        if (!edited) plainTaken++;
        expect(e, `${at}: taken by the decode but refused today`).not.toBeInstanceOf(Error);
        const ev = e as ChangeEvent;
        const fields = { ...ev, key: undefined, after: undefined, before: undefined, missing: undefined, v: undefined };
        expect(
          { ...fields, hasBefore: ev.before !== null, keyNames: Object.keys(ev.key), afterNames: ev.after ? Object.keys(ev.after) : null },
          at,
        ).toStrictEqual({
          source: a.source,
          table: a.table,
          op: a.op,
          position: a.position,
          commitTs: a.commitTs,
          txId: a.txId,
          schemaVersion: a.schemaVersion,
          capture: a.capture,
          synthetic: a.synthetic,
          key: undefined,
          after: undefined,
          before: undefined,
          missing: undefined,
          v: undefined,
          hasBefore: a.hasBefore,
          keyNames: a.shape.keyNames,
          afterNames: a.shape.afterNames,
        });
        expect(ev.missing, at).toStrictEqual([]);
        expect(parsedEvent(a), at).toStrictEqual(ev);
        // The applier's lazy event: the same event however it is read (fields, its plain event, serialised).
        const lazy = lazyEventOf(text)!;
        expect(appendableOf(lazy)?.text, at).toBe(text);
        expect(JSON.stringify(lazy), at).toBe(JSON.stringify(ev));
        const read = { v: lazy.v, source: lazy.source, table: lazy.table, op: lazy.op, key: lazy.key, after: lazy.after, before: lazy.before };
        const rest = { missing: lazy.missing, position: lazy.position, commitTs: lazy.commitTs, txId: lazy.txId, schemaVersion: lazy.schemaVersion };
        expect({ ...read, ...rest, capture: lazy.capture, synthetic: lazy.synthetic }, at).toStrictEqual(ev);
        expect(plainEvent(lazy), at).toStrictEqual(ev);
        expect(appendableOf({ ...plainEvent(lazy) }), `${at}: a copy is not lazy`).toBeUndefined();
        batch.push({ a, e: ev });
      }
      const columns = [...NAMES, ...RARE_NAMES, ...RESERVED, 'absent'].filter(() => r() < 0.8).sort(() => r() - 0.5);
      const appliedAt = r() < 0.9 ? new Date(1.7e12 + Math.floor(r() * 1e10)).toISOString() : 'odd\tapplied\\at';
      const want = bytesOf(
        changelogCopyText(
          batch.map((b) => b.e),
          columns,
          appliedAt,
        ),
      );
      const got = bytesOf(
        appendableCopyText(
          batch.map((b) => b.a),
          columns,
          appliedAt,
        ),
      );
      expect(got.equals(want), `seed ${seed}, run ${run}: COPY bytes of ${batch.length} events, columns ${JSON.stringify(columns)}`).toBe(true);
    }
    console.log(`one-pass append decode: seed ${seed}, ${runs} batches, ${texts} texts, ${taken} taken (${plainTaken} of ${plain} unedited)`);
    // The normalizer's texts are what the decode is for: it must take nearly all of them (a decode that falls back always would pass the rest).
    expect(plainTaken / plain).toBeGreaterThan(0.95);
  });

  it('falls back for a JSON value nested deeper than its scan can recurse, which today’s path reads', () => {
    const e = randomEvent(rng(11));
    const depth = 100_000;
    const deep = `${'['.repeat(depth)}${']'.repeat(depth)}`;
    const plain = Buffer.from(encodeChangeEvent({ ...e, op: 'insert', after: { ...e.key, doc: 0 }, before: null, missing: [] }, Infinity).data).toString(
      'utf8',
    );
    expect(decodeAppendable(plain), 'the same event, shallow, is taken').not.toBeNull();
    const text = plain.replace('"doc":0', `"doc":${deep}`);
    // A throw here would fail the whole batch (groupByTable rethrows what is not a CdcError), every retry again.
    expect(decodeAppendable(text)).toBeNull();
    expect(lazyEventOf(text)).toBeNull();
    expect(today(text)).toMatchObject({ op: 'insert' });
  });

  it('writes through today’s text when a column is a name an object’s prototype has', () => {
    const text = Buffer.from(encodeChangeEvent(randomEvent(rng(7)), Infinity).data).toString('utf8');
    const a = decodeAppendable(text)!;
    const columns = ['constructor', '__proto__', 'id', RESERVED[0]!];
    expect(bytesOf(appendableCopyText([a], columns, 'x')).equals(bytesOf(changelogCopyText([today(text) as ChangeEvent], columns, 'x')))).toBe(true);
  });
});
