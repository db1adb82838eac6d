/**
 * Checks of `CdcSource` props that need no construct state (lib/cdc-source.ts runs them in its
 * constructor): the items of `tables`, and the comparison of DMS engine versions its masking
 * rule needs.
 */
import type { Construct } from 'constructs';
import { CapturedTable } from '../captured-table.ts';
import { fail } from './validate.ts';

/** Every item of `tables` is a `CapturedTable` (made with `CapturedTable.of` or `.matching`). */
export function checkTableList(scope: Construct, tables: unknown[]): void {
  const bad = tables.findIndex((t) => !(t instanceof CapturedTable));
  if (bad >= 0)
    fail(
      scope,
      `prop \`tables\` must hold CapturedTable items (CapturedTable.of or CapturedTable.matching); item ${bad} is ${tables[bad] === null ? 'null' : typeof tables[bad]}`,
    );
}

/** Compares dotted version strings numerically. */
export function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map((x) => Number.parseInt(x, 10) || 0);
  const pb = b.split('.').map((x) => Number.parseInt(x, 10) || 0);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}
