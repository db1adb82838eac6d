/**
 * The search sink's names for source names (docs/search.md, "Index names"): one definition for
 * the constructs (index paths of the IAM policy) and the handlers. OpenSearch index names are
 * lower case and forbid spaces, quotes and `\ / * ? < > | , # :`, so each schema or table name is
 * written as its index-name part: ASCII letters in lower case, digits and `_` as they are, every
 * other character as `-` and the two hex digits of each of its UTF-8 bytes (`Total tax` →
 * `total-20tax`, `Zoë` → `zo-c3-ab`). The part is injective except for ASCII case: two names that
 * differ only in it (`"Orders"` and `orders`) get the same part, and the one registered second is
 * refused by name (docs/onboarding.md, "Names"). A part longer than 63 characters is its first 45
 * characters, `-h` and 16 hex digits of the SHA-256 of the whole part (`h` never follows `-` in
 * an encoded character, so it cannot equal a part that fits). A plain lower-case name is its own
 * part: index names made before this encoding stay.
 */
import { createHash } from 'node:crypto';

/** The longest part kept as it is. */
const MAX_PART = 63;
const KEPT = /^[a-z0-9_]$/;

/** The index-name part of a schema or table name. */
export function searchNamePart(name: string): string {
  let out = '';
  for (const ch of name) {
    const c = ch >= 'A' && ch <= 'Z' ? ch.toLowerCase() : ch;
    if (KEPT.test(c)) out += c;
    else for (const b of new TextEncoder().encode(c)) out += `-${b.toString(16).padStart(2, '0')}`;
  }
  if (out.length <= MAX_PART) return out;
  const hash = createHash('sha256').update(out, 'utf8').digest('hex').slice(0, 16);
  return `${out.slice(0, MAX_PART - 18)}-h${hash}`;
}

/** Why a column name cannot be a document field, or null: OpenSearch reads `.` as a path into an object, and refuses metadata and blank field names. */
export function searchFieldRefusal(name: string): string | null {
  if (name.includes('.')) return "it holds '.', which OpenSearch reads as a path into an object field";
  if (name.trim() === '') return 'OpenSearch refuses a field name of only whitespace';
  if (METADATA_FIELDS.has(name)) return `${name} is one of OpenSearch's metadata fields`;
  return null;
}

/** OpenSearch's metadata fields: a document cannot hold a field of these names. */
const METADATA_FIELDS = new Set([
  '_id',
  '_index',
  '_source',
  '_routing',
  '_field_names',
  '_ignored',
  '_seq_no',
  '_primary_term',
  '_version',
  '_type',
  '_doc_count',
  '_data_stream_timestamp',
  '_tier',
  '_size',
  '_meta',
]);
