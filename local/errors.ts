/**
 * Named errors of the local pipeline (`cdc local`). Each has a stable `code` (see
 * lambda/core/shared/errors.ts for the shared ones, e.g. `HistoryGapError`) and a message that says
 * what to change.
 */
import { CdcError } from '../lambda/core/shared/errors.ts';

/** The source database cannot be captured as configured (wal_level, privileges, slots). */
export class SourceNotReadyError extends CdcError {
  constructor(message: string) {
    super('SOURCE_NOT_READY', message);
  }
}

/** One source transaction exceeds the capture's caps; it is never split, so capture stops before memory runs out. */
export class TransactionTooLargeError extends CdcError {
  constructor(
    readonly xid: string | null,
    readonly rows: number,
    readonly bytes: number,
    readonly caps: { maxTxRows: number; maxTxBytes: number },
  ) {
    super(
      'TRANSACTION_TOO_LARGE',
      `source transaction ${xid ?? '(unknown xid)'} has more than ${rows >= caps.maxTxRows ? `${caps.maxTxRows} rows` : `${caps.maxTxBytes} bytes`} ` +
        `(read so far: ${rows} rows, ${bytes} bytes); the capture never splits a transaction, so it stopped before running out of memory. ` +
        'Split the bulk change into smaller transactions, or raise the cap (--max-tx-rows / --max-tx-bytes) if a transaction this large is expected.',
    );
  }
}

/** The capture slot is held by another process (another capture is running against it). */
export class SlotInUseError extends CdcError {
  constructor(
    readonly slot: string,
    readonly pid: number | null,
  ) {
    super('SLOT_IN_USE', `replication slot ${JSON.stringify(slot)} is in use by another process${pid ? ` (pid ${pid})` : ''}: stop the other capture first`);
  }
}

/** A state folder, flag or configuration value that cannot be used. */
export class LocalConfigError extends CdcError {
  constructor(message: string) {
    super('LOCAL_CONFIG', message);
  }
}
