/**
 * What a decoder makes of one raw capture record (a DMS Kinesis record or a slot-capture record).
 * Shared by the DMS decoder, the slot decoder, the normalizer and `cdc decode`.
 */
import type { ChangeEvent } from '../shared/event.ts';
import type { ColumnDef } from '../shared/control-plane.ts';

/**
 * A decoded row change, not yet stamped with a schema version (the normalizer does that after
 * consulting the registry). A primary-key change decodes to two changes: a delete of the old key
 * and an insert of the new key, with the same position (they concern different keys).
 */
export type DecodedChange = Omit<ChangeEvent, 'schemaVersion'>;

/** A table definition or DDL the capture reported (DMS control records; slot relation info). */
export interface DecodedControl {
  kind: 'control';
  source: string;
  table: string;
  /** `create-table`, `drop-table`, `add-column`, `drop-column`, `rename-column`, `column-type-change`, `change-columns`, `rename-table`. */
  operation: string;
  /** Columns and key when the record carried a table definition. */
  columns: ColumnDef[] | null;
  key: string[] | null;
  /** Position when known (DMS control records carry none). */
  position: string | null;
}

export type DecodeResult =
  | {
      kind: 'changes';
      changes: DecodedChange[];
      columns: ColumnDef[] | null;
      keyColumns: string[] | null;
      /**
       * Types of the columns the record shows, when `columns` is null because the record is not
       * the whole table (a delete's old key, an update with unchanged TOAST columns). Absent
       * when the capture carries no types (DMS data records).
       */
      types?: Record<string, string>;
    }
  | DecodedControl
  | { kind: 'ignored'; reason: string };
