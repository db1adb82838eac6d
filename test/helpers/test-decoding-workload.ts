/**
 * The randomized capture tests' tables and values as test_decoding prints them: the columns of a
 * table, a quoted name, a literal of each type (test/local/capture-records-equivalence.test.ts,
 * test/local/capture-transcode-equivalence.test.ts).
 */
export type Rand = () => number;
export const pick = <T>(r: Rand, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;

export interface Column {
  name: string;
  type: string;
  /** The catalog's type: its base and its full name (with modifier). */
  base: string;
  full: string;
}
export interface Table {
  schema: string;
  name: string;
  columns: Column[];
  key: string[];
}

export const col = (name: string, type: string, full = type, base = type): Column => ({ name, type, base, full });
export const id = (t: Table): string => `${t.schema}.${t.name}`;

export function quoteIdent(name: string): string {
  return /^[a-z_][a-z0-9_]*$/.test(name) ? name : `"${name.replace(/"/g, '""')}"`;
}

export function literal(r: Rand, c: Column, isKey: boolean): string {
  if (!isKey && r() < 0.1) return 'null';
  switch (c.type) {
    case 'integer':
      return String(Math.floor(r() * 2000) - 1000);
    case 'bigint':
      return pick(r, ['1', '-42', '9007199254740993', '9007199254740991', String(Math.floor(r() * 1e6))]);
    case 'numeric':
      return pick(r, ['1.10', '-0.50', 'NaN', '12345.67']);
    case 'double precision':
      return pick(r, ['0.1', '-0', '1e-05', 'Infinity', '3.5']);
    case 'boolean':
      return pick(r, ['true', 'false']);
    default: {
      const body = pick(r, ['a', "it''s", 'multi\nline', 'ü€', '{"j":1}', '', '\\"\t', 'x'.repeat(1 + Math.floor(r() * 300)), String(Math.floor(r() * 50))]);
      return `'${body}'`;
    }
  }
}
