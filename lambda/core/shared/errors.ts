/**
 * Named errors. Every error the platform raises on purpose has a stable `name` and a `code`,
 * so logs, dead letters and operator tooling can match on them without parsing messages.
 */
export class CdcError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** A record or event that does not have the documented shape. `field` names what was wrong. */
export class InvalidRecordError extends CdcError {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super('INVALID_RECORD', `${field}: ${message}`);
  }
}

/** An operation the decoder does not know. Refused by name, never guessed. */
export class UnknownOperationError extends CdcError {
  constructor(
    readonly operation: string,
    where: string,
  ) {
    super('UNKNOWN_OPERATION', `unknown operation '${operation}' in ${where}`);
  }
}

/** A table or column name that is not a plain identifier, or not known to the registry. */
export class UnsafeIdentifierError extends CdcError {
  constructor(
    readonly identifier: string,
    readonly reason: string,
  ) {
    super('UNSAFE_IDENTIFIER', `refused identifier ${JSON.stringify(identifier)}: ${reason}`);
  }
}

/** History cannot be supplied (slot gone, position discontinuity, retention exceeded): the table needs a re-snapshot. */
export class HistoryGapError extends CdcError {
  constructor(
    message: string,
    readonly hint: string,
  ) {
    super('HISTORY_GAP', `${message}. ${hint}`);
  }
}

/**
 * A position that goes backwards for one key of one table on one shard of the capture stream,
 * although the record committed later than the one seen before: the capture's positions do not
 * follow commit order there, so a sink would keep the older value silently. General on purpose
 * (any capture, any cause of a discontinuity in positions); docs/positions.md.
 */
export class PositionRegressionError extends CdcError {
  constructor(
    readonly table: string,
    readonly key: string,
    readonly where: string,
    readonly position: string,
    readonly previous: string,
    hint: string,
  ) {
    super(
      'POSITION_REGRESSION',
      `position ${position} of ${table} key ${key} on ${where} is lower than position ${previous} seen before for the same key. ${hint}`,
    );
  }
}

/** A handler's configuration (environment, secret) cannot be used: one error and one code for every handler. */
export class ConfigurationError extends CdcError {
  constructor(message: string) {
    super('INVALID_CONFIG', message);
  }
}
