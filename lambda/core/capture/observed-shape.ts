/** The shape of a table as one decoded record shows it (docs/schema-drift.md), for the normalizer's schema registry. */
import type { DecodeResult } from './decoded.ts';
import type { ObservedShape } from '../tables/schema-evolution.ts';

/**
 * What a decoded record says about its table's shape. A slot-capture row image names every
 * column (delivered, or listed as not delivered), so it is the whole table; a DMS record leaves
 * undelivered columns out, and a delete or truncate shows only the key.
 */
export function observe(result: Extract<DecodeResult, { kind: 'changes' }>): ObservedShape {
  const key = result.keyColumns && result.keyColumns.length > 0 ? [...result.keyColumns] : null;
  const image = [...result.changes].reverse().find((c) => c.after !== null);
  if (result.columns) {
    const slot = result.changes[0]?.capture === 'slot' || result.changes[0]?.capture === 'poll'; // both name every column (a polled row is the whole row)
    // test_decoding does not carry nullability: the slot decoder reports `true`, which means "unknown".
    return { columns: result.columns.map((c) => ({ name: c.name, type: c.type, nullable: slot ? null : c.nullable })), key, complete: slot };
  }
  if (image) {
    // A slot image names its undelivered columns; a DMS decoder fills `missing` from the registry
    // itself, which tells nothing about the record (and would hide a rename seen in the data).
    const slot = image.capture === 'slot' || image.capture === 'poll';
    const names = [...Object.keys(image.after!), ...(slot ? image.missing.filter((m) => !(m in image.after!)) : [])];
    return { columns: names.map((name) => ({ name, type: result.types?.[name] ?? null, nullable: null })), key, complete: slot };
  }
  const keyNames = key ?? [];
  return { columns: keyNames.map((name) => ({ name, type: result.types?.[name] ?? null, nullable: null })), key, complete: false };
}
