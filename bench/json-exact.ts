/**
 * The cost of exact numbers: `parseJsonExact` (lambda/core/shared/json-exact.ts, the parser the
 * normalizer reads raw DMS records with; docs/exact-numbers.md) against `JSON.parse` on the same
 * records in the same run. The records are the captured DMS fixtures, repeated. Prints records per
 * second of each and the ratio (higher is slower); best of `--rounds` rounds.
 *
 *     npx tsx bench/json-exact.ts [--records 20000] [--rounds 5]
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseJsonExact } from '../lambda/core/shared/json-exact.ts';
import { numberArg } from './lib/report.ts';
import { exitOnHelp } from './lib/usage.ts';

exitOnHelp(import.meta.url);
const RECORDS = numberArg('records', 20_000);
const ROUNDS = numberArg('rounds', 5);

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..');
const lines = ['postgres-session.jsonl', 'postgres-cdc.jsonl'].flatMap((f) =>
  readFileSync(path.join(root, 'test', 'fixtures', 'dms', f), 'utf8')
    .trim()
    .split('\n'),
);
const records = Array.from({ length: RECORDS }, (_, i) => lines[i % lines.length]!);
const bytes = records.reduce((a, r) => a + Buffer.byteLength(r), 0);

function rate(parse: (text: string) => unknown): number {
  let best = 0;
  for (let r = 0; r < ROUNDS; r++) {
    const t = process.hrtime.bigint();
    for (const text of records) parse(text);
    const s = Number(process.hrtime.bigint() - t) / 1e9;
    best = Math.max(best, records.length / s);
  }
  return best;
}

rate(JSON.parse); // warm-up
rate(parseJsonExact);
const reference = rate(JSON.parse);
const exact = rate(parseJsonExact);
console.log(`json-exact: ${records.length} DMS records (${(bytes / records.length).toFixed(0)} bytes each), best of ${ROUNDS}`);
console.log(`  JSON.parse      ${reference.toFixed(0)} records/s`);
console.log(`  parseJsonExact  ${exact.toFixed(0)} records/s`);
console.log(`  ratio           ${(reference / exact).toFixed(2)}× the time of JSON.parse`);
