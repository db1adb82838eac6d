/**
 * The normalizer's schema versions kept across batches (docs/schema-drift.md, "Schema versions
 * kept across batches"). A schema version never changes once written (it is added by a conditional
 * put with the table record's move to it, and never updated or deleted), and a table's versions
 * are numbered 1, 2, … without gaps. So once the versions 1..n of a table are known, a batch only
 * needs the table record (state and current version, read every batch, strongly consistent as
 * before): its current version ≤ n means the versions are those known; a higher one means a
 * version was added since, and the versions are read again. What a batch sees is the registry as
 * it was at the table record's read, as a batch reading both at once saw it (or a little more
 * consistent: never a version the record does not name yet).
 *
 * One per normalizer instance (on AWS the handler's, built once per execution environment).
 * No I/O of its own: the control plane is a port.
 */
import type { ControlPlane, SchemaVersion, TableRecord } from '../shared/control-plane.ts';

/** Tables remembered at most (the oldest used is forgotten first); a forgotten table is read whole again. */
const TABLES_REMEMBERED = 10_000;

export class SchemaVersionCache {
  /** Per table: its versions 1..n, in order. */
  private readonly known = new Map<string, readonly SchemaVersion[]>();
  /** Reads of the versions (a Query each), for the tests. */
  reads = 0;

  /** A table's record and its versions up to the record's current version (a new array, sorted by version). */
  async load(
    cp: Pick<ControlPlane, 'getTable' | 'listSchemaVersions'>,
    source: string,
    table: string,
  ): Promise<{ table: TableRecord | null; versions: SchemaVersion[] }> {
    const k = `${source}\u0000${table}`;
    const hit = this.known.get(k);
    if (hit) {
      const record = await cp.getTable(source, table);
      if (record && record.currentVersion <= hit.length) {
        this.known.delete(k); // re-insert: the Map's order is then the order of last use
        this.known.set(k, hit);
        return { table: record, versions: hit.slice(0, record.currentVersion) };
      }
      this.reads++;
      return { table: record, versions: this.remember(k, await cp.listSchemaVersions(source, table)) };
    }
    this.reads++;
    const [record, versions] = await Promise.all([cp.getTable(source, table), cp.listSchemaVersions(source, table)]);
    return { table: record, versions: this.remember(k, versions) };
  }

  /** Sorts the versions read and remembers them when they are 1..n without a gap; returns a copy the caller may change. */
  private remember(k: string, read: readonly SchemaVersion[]): SchemaVersion[] {
    const sorted = [...read].sort((a, b) => a.version - b.version);
    this.known.delete(k);
    if (sorted.length > 0 && sorted.every((v, i) => v.version === i + 1)) {
      this.known.set(k, sorted);
      while (this.known.size > TABLES_REMEMBERED) this.known.delete(this.known.keys().next().value!);
    }
    return [...sorted];
  }
}
