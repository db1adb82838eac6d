/**
 * The tuned test_decoding parser (lambda/core/capture/logical-text.ts) against the parser as it was
 * before (test/helpers/logical-text-reference.ts, docs/performance-log.md, "35. The slot capture's
 * work per change"): over many random lines, well-formed and mutated, both parse a line to the same
 * values (same types, same key order) or refuse it with the same error at the same offset, and
 * group random row sequences to the same transactions or the same error. Seed and count printed.
 */
import { describe, expect, it } from 'vitest';
import { groupTransactions, parseTestDecodingLine, type SlotRow } from '../../../lambda/core/capture/logical-text.ts';
import { referenceGroupTransactions, referenceParseTestDecodingLine } from '../../helpers/logical-text-reference.ts';
import { rng } from '../../helpers/rng.ts';

const PLAIN_NAMES = ['public', 'items', 'items2', 't1', 'ids', 'Ünï', 'a$b', '_x', 'id', 'user_id', 'ä9'];
const ODD_NAMES = ['Odd Name', 'a"b', 'x.y', 'a:b', '[x]', 'c,d', 'x\u00a0y', 'x\u2028y', 'tab\there', '', 'new-tuple:', ' old-key:'];
const TYPES = [
  'integer',
  'bigint',
  'smallint',
  'oid',
  'text',
  'numeric',
  'double precision',
  'real',
  'boolean',
  'integer[]',
  'timestamp with time zone',
  'character varying',
  'bit varying',
  '"Odd Type"',
  'public."my[type]"',
  'x[][]',
];
/** Characters a mutation inserts: the parser's delimiters, white space of every kind `\s` knows, quotes, letters. */
const NOISE = [' ', '"', "'", '[', ']', ':', '.', ',', '\u00a0', '\u2003', '\ufeff', '\t', '\n', 'B', 'x', '0', '-', '(', ')', 'é'];

type Rand = () => number;
const pick = <T>(r: Rand, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;

function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

function ident(r: Rand): string {
  if (r() < 0.75) return pick(r, PLAIN_NAMES);
  const odd = pick(r, ODD_NAMES);
  // Mostly quoted as quote_identifier prints it; sometimes bare (a line PostgreSQL would not print: both must refuse it alike).
  return r() < 0.85 ? quoteIdent(odd) : odd;
}

function literal(r: Rand, type: string): string {
  const roll = r();
  if (roll < 0.08) return 'null';
  if (roll < 0.12) return 'unchanged-toast-datum';
  switch (type) {
    case 'integer':
    case 'smallint':
    case 'oid':
      return pick(r, ['0', '-1', '42', '2147483647', '1.5', 'abc', '', '-0', '007', '-', '4-2', '123456789012345', '1234567890123456']);
    case 'bigint':
      return pick(r, [
        '9007199254740993',
        '-42',
        '9007199254740991',
        '12',
        '1e3',
        '-0',
        '-000123',
        '999999999999999',
        '-9999999999999999',
        '99999999999999999999',
      ]);
    case 'numeric':
      return pick(r, ['1.10', '-0.5', 'NaN', '-Infinity', '1e+20', '12.', 'x']);
    case 'double precision':
    case 'real':
      return pick(r, ['-1.5e-07', '0.1', '-0', 'Infinity', 'NaN', '3.4028235e+38', '0.10000000000000001', '1e-05', '1,5']);
    case 'boolean':
      return pick(r, ['true', 'false', 't']);
    case 'bit varying':
      return pick(r, ["B'101'", "B''", "B'1"]);
    default: {
      const body = pick(r, ['a', "it''s", 'multi\nline', 'null', "'' ''", ' new-tuple: x', '{1,2}', 'ü€', "x'' y[z]:1", '']);
      return `'${body}'`;
    }
  }
}

function tuple(r: Rand): string {
  const n = 1 + Math.floor(r() * 5);
  let out = '';
  for (let i = 0; i < n; i++) {
    const type = pick(r, TYPES);
    out += ` ${ident(r)}[${type.replace(/^"|"$/g, (q) => (r() < 0.5 ? q : q))}]:${literal(r, type)}`;
  }
  return out;
}

function table(r: Rand): string {
  return `${ident(r)}.${ident(r)}`;
}

function line(r: Rand): string {
  const roll = r();
  if (roll < 0.1) return pick(r, ['BEGIN 754', 'BEGIN', 'BEGIN 754 (at 2026-11-29 12:00:00+00)', 'BEGINX', 'BEGIN  1']);
  if (roll < 0.2)
    return pick(r, [
      'COMMIT 754 (at 2026-11-29 12:00:00.123456+00)',
      'COMMIT 754',
      'COMMIT 754 (at 2026-11-29 18:35:21+05:30)',
      'COMMIT 754 (at Sun Nov 29)',
      'COMMIT',
    ]);
  if (roll < 0.25)
    return pick(r, [
      'message: transactional: 1 prefix: p, sz: 5 content:hello',
      'message: transactional: 0 prefix: a, b, sz: 3 content:x\ny',
      'message: transactional: 2 prefix: p, sz: 1 content:z',
    ]);
  if (roll < 0.32) {
    const tables = [table(r)];
    while (r() < 0.4) tables.push(table(r));
    return `table ${tables.join(', ')}: TRUNCATE:${pick(r, [' (no-flags)', ' restart_seqs', ' cascade', ' restart_seqs cascade', '', ' bogus'])}`;
  }
  const op = pick(r, ['INSERT', 'UPDATE', 'DELETE', 'MERGE']);
  let body: string;
  if (op === 'UPDATE' && r() < 0.4) body = ` old-key:${tuple(r)} new-tuple:${tuple(r)}`;
  else if (op !== 'INSERT' && r() < 0.1) body = ' (no-tuple-data)';
  else body = tuple(r);
  return `table ${table(r)}: ${op}:${body}`;
}

function mutate(r: Rand, text: string): string {
  let t = text;
  const edits = 1 + Math.floor(r() * 3);
  for (let i = 0; i < edits; i++) {
    const at = Math.floor(r() * (t.length + 1));
    const kind = r();
    if (kind < 0.4) t = t.slice(0, at) + pick(r, NOISE) + t.slice(at);
    else if (kind < 0.8) t = t.slice(0, at) + t.slice(at + 1);
    else t = t.slice(0, at);
  }
  return t;
}

type Outcome = { ok: unknown; text: string } | { error: string; message: string; offset: unknown };

function outcome(f: () => unknown): Outcome {
  try {
    const ok = f();
    return { ok, text: JSON.stringify(ok) };
  } catch (err) {
    const e = err as Error & { offset?: number };
    return { error: e.constructor.name, message: e.message, offset: e.offset };
  }
}

describe('the tuned test_decoding parser', () => {
  it('parses every line as the parser before it did, values, key order and errors alike (randomized)', () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1e9);
    const count = 20_000;
    console.log(`logical-text equivalence: seed ${seed}, ${count} lines`);
    const r = rng(seed);
    let parsed = 0;
    for (let i = 0; i < count; i++) {
      const text = r() < 0.35 ? mutate(r, line(r)) : line(r);
      const want = outcome(() => referenceParseTestDecodingLine(text));
      const got = outcome(() => parseTestDecodingLine(text));
      if ('ok' in want) parsed++;
      expect(got, `seed ${seed}, line ${i}: ${JSON.stringify(text)}`).toStrictEqual(want);
    }
    // Both outcomes are exercised: lines that parse and lines refused.
    expect(parsed).toBeGreaterThan(count / 5);
    expect(parsed).toBeLessThan(count - count / 10);
  });

  it('groups rows into the same transactions, or refuses them with the same error (randomized)', () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1e9);
    const count = 2_000;
    console.log(`groupTransactions equivalence: seed ${seed}, ${count} row sequences`);
    const r = rng(seed);
    let grouped = 0;
    for (let i = 0; i < count; i++) {
      const rows: SlotRow[] = [];
      let xid = 700 + Math.floor(r() * 100);
      const n = Math.floor(r() * 12);
      for (let j = 0; j < n; j++) {
        const roll = r();
        let data: string;
        if (roll < 0.2) data = `BEGIN ${r() < 0.95 ? ++xid : ''}`.trim();
        else if (roll < 0.4) data = r() < 0.9 ? `COMMIT ${r() < 0.95 ? xid : xid + 1} (at 2026-11-29 12:00:0${j % 10}.5+00)` : `COMMIT ${xid}`;
        else if (roll < 0.45) data = 'message: transactional: 0 prefix: p, sz: 1 content:z';
        else if (roll < 0.5) data = 'table public.a, public.b: TRUNCATE: (no-flags)';
        else data = r() < 0.97 ? `table public.t: INSERT: id[integer]:${j} v[text]:'x'` : 'table public.t: INSERT: id[integer]';
        rows.push({ lsn: `0/${(0x1000 + j * 16).toString(16).toUpperCase()}`, xid: String(xid), data });
      }
      const want = outcome(() => referenceGroupTransactions(rows));
      const got = outcome(() => groupTransactions(rows));
      if ('ok' in want) grouped++;
      expect(got, `seed ${seed}, sequence ${i}`).toStrictEqual(want);
    }
    expect(grouped).toBeGreaterThan(count / 10);
  });
});
