/**
 * The naming rules shared by constructs, handlers and CLI: one definition each. Dependency-free
 * on purpose.
 */

/** Source and sink ids: a lower-case identifier (events, metrics, the control plane, the CLI). */
export const LOWER_IDENT = /^[a-z][a-z0-9_]{0,62}$/;

/**
 * A plain SQL identifier (schema, table, column): letters, digits, `_` and `$`, not starting with
 * a digit or `$`; at most 63 bytes (PostgreSQL's limit, below Redshift's 127).
 */
export const PLAIN_IDENT = /^[A-Za-z_][A-Za-z0-9_$]{0,62}$/;

/** A logical replication slot name as PostgreSQL accepts it: lower-case letters, digits and `_`, at most 63. */
export const SLOT_NAME = /^[a-z0-9_]{1,63}$/;
