/**
 * The names of the warehouse objects (docs/architecture.md §5.4, "Names"). Pure. Every name is
 * derived injectively: no source table name, and no pair of source id and schema name, produces
 * another's objects.
 *
 * - Warehouse schema of source `s`, source schema `c`: `enc(s)` + `_` + `c`, where `enc(s)` is the
 *   source id with every `_` written as `$`. Source ids are lower-case letters, digits and `_`
 *   (contracts/identifiers.ts), so `enc(s)` holds no `_` and the first `_` of the schema name ends
 *   it: source `a` schema `b_c` is `a_b_c`, source `a_b` schema `c` is `a$b_c`. A source id
 *   without `_` keeps the layout it always had (`demo_public`).
 * - The view users query keeps the table's name. Source tables whose names start with `_cdc_`
 *   (in any case) are refused at registration: that prefix is the platform's.
 * - Every platform object is `_cdc_<kind>_<view>` (`_cdc_mirror_orders`, `_cdc_delta_orders`, …).
 *   No view of a source table starts with `_cdc_`; the kinds are prefix-free with their `_`
 *   (no `<kind>_` begins another), and none is `rb` or `old` (the rebuild's view prefixes), so
 *   `(kind, view)` is read back from the name.
 * - A name longer than 62 bytes is shortened to exactly 63 bytes (PostgreSQL's limit): a head of
 *   the name, `_` padding, `_` and 16 hex digits of the SHA-256 of the whole name. Names that fit
 *   are at most 62 bytes, so a shortened name never equals one that was not shortened; two
 *   shortened names are equal only if their hashes are (one chance in 2^64 per pair).
 */
import { createHash } from 'node:crypto';
import { UnsafeIdentifierError } from '../shared/errors.ts';
import { assertCarriedIdentifier, carriedIdentifierRefusal } from '../shared/identifiers.ts';

/** PostgreSQL's identifier limit in bytes (Redshift allows 127). */
export const MAX_IDENTIFIER_BYTES = 63;
/** Names of at most this many bytes are kept as they are; longer ones are shortened to `MAX_IDENTIFIER_BYTES`. */
export const MAX_KEPT_BYTES = MAX_IDENTIFIER_BYTES - 1;
/** The prefix of every platform object; source tables may not start with it. */
export const PLATFORM_PREFIX = '_cdc_';

/** The platform objects of one table, as the word in their names. */
export const PLATFORM_KINDS = {
  changelog: 'changelog',
  mirror: 'mirror',
  deletedKeys: 'deleted_keys',
  truncations: 'truncations',
  handover: 'handover',
  delta: 'delta',
  watermark: 'watermark',
  appendOrder: 'append_order',
  diff: 'diff',
} as const;
export type PlatformPart = keyof typeof PLATFORM_KINDS;

const HASH_HEX = 16;
const bytes = (s: string): number => Buffer.byteLength(s, 'utf8');

/** The longest prefix of `s` (whole code points) of at most `max` bytes. */
function headBytes(s: string, max: number): string {
  let out = '';
  for (const ch of s) {
    if (bytes(out) + bytes(ch) > max) break;
    out += ch;
  }
  return out;
}

/**
 * `name` when it fits in 62 bytes, else exactly 63 bytes: a head of it, `_` padding, `_` and a
 * 64-bit hash of the whole name. Stable, and never equal to a name that fits.
 */
export function fitIdentifier(name: string): string {
  if (bytes(name) <= MAX_KEPT_BYTES) return name;
  const hash = createHash('sha256').update(name, 'utf8').digest('hex').slice(0, HASH_HEX);
  const room = MAX_IDENTIFIER_BYTES - HASH_HEX - 1;
  const head = headBytes(name, room);
  return `${head}${'_'.repeat(room - bytes(head))}_${hash}`;
}

/** The warehouse schema of a source's schema: `enc(source)_schema`, shortened when long. */
export function warehouseSchemaName(sourceId: string, schema: string): string {
  return assertCarriedIdentifier(fitIdentifier(`${sourceId.replaceAll('_', '$')}_${schema}`), 'warehouse schema', true);
}

/** The platform object of `kind` for the view `view`: `_cdc_<kind>_<view>`, shortened when long. */
export function platformName(part: PlatformPart, view: string): string {
  return assertCarriedIdentifier(fitIdentifier(`${PLATFORM_PREFIX}${PLATFORM_KINDS[part]}_${view}`), 'warehouse name', true);
}

/**
 * Why a source table (`schema.table`) cannot be carried under its name, or null when it can: a
 * schema or table name that is no carried identifier (lambda/core/shared/identifiers.ts), or a table
 * name with the platform's prefix.
 */
export function tableNameRefusal(tableId: string): string | null {
  const parts = tableId.split('.');
  if (parts.length !== 2) return `${tableId}: schema and table names holding '.' are not carried (a table id is schema.table)`;
  for (const [what, name] of [
    ['schema', parts[0]!],
    ['table', parts[1]!],
  ] as const) {
    const refusal = carriedIdentifierRefusal(name, true);
    if (refusal !== null) return `${what} name ${JSON.stringify(name)} of ${tableId} cannot be carried: ${refusal}`;
  }
  return parts[1]!.toLowerCase().startsWith(PLATFORM_PREFIX)
    ? `table names starting with ${PLATFORM_PREFIX} are reserved for the platform's own warehouse objects (${tableId})`
    : null;
}

/** Throws unless a source table's name can be a view's (`tableNameRefusal`). */
export function assertCarriedTableName(table: string, tableId: string): string {
  const refusal = tableNameRefusal(tableId);
  if (refusal !== null) throw new UnsafeIdentifierError(tableId, `${refusal}; rename the table or leave it out of the capture`);
  return table;
}

/** The platform tables of the layout before names were injective, by part. */
export type LegacyPart = Exclude<PlatformPart, 'diff' | 'watermark' | 'appendOrder'>;
/** The old layout's suffix of each platform table. */
export const LEGACY_SUFFIXES: ReadonlyArray<readonly [LegacyPart, string]> = [
  ['changelog', '_changelog'],
  ['mirror', '_mirror'],
  ['deletedKeys', '_deleted_keys'],
  ['truncations', '_truncations'],
  ['handover', '_handover'],
  ['delta', '_delta'],
];

/** `base + suffix`, shortened past 63 characters with a 32-bit hash of `base`, as the old layout did. */
function legacyFit(base: string, suffix: string): string {
  const whole = base + suffix;
  if (whole.length <= MAX_IDENTIFIER_BYTES) return whole;
  return `${base.slice(0, MAX_IDENTIFIER_BYTES - suffix.length - 9)}_${fnv1a(base)}${suffix}`;
}

/**
 * The schema of the layout before names were injective (docs/warehouse-apply.md, "Layout before
 * injective names"): `<source>_<schema>`. Read only to find and migrate a deployment's old objects.
 */
export function legacySchemaName(sourceId: string, schema: string): string {
  return legacyFit(`${sourceId}_${schema}`, '');
}

/** The old layout's platform tables of `table`: `<table>_<kind>`. */
export function legacyPartNames(table: string): Record<LegacyPart, string> {
  return Object.fromEntries(LEGACY_SUFFIXES.map(([part, suffix]) => [part, legacyFit(table, suffix)])) as Record<LegacyPart, string>;
}

/** FNV-1a 32-bit as 8 hex digits: the old layout's shortening hash, and the stage and merge names' (lambda/core/warehouse/warehouse-sql.ts). */
export function fnv1a(text: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h.toString(16).padStart(8, '0');
}
