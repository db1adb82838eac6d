/** Small helpers for validating parsed JSON, shared by the validators so errors read the same everywhere. */

/** A JSON scalar and a JSON value, as parsed (the change event's values, docs/architecture.md §5.1). */
export type JsonScalar = string | number | boolean | null;
export type JsonValue = JsonScalar | JsonValue[] | { [k: string]: JsonValue };

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A short description of a value for an error message: its kind, or a string cut at 40 characters. */
export function describeValue(v: unknown): string {
  if (v === null) return 'null';
  if (v === undefined) return 'nothing';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'string' ? JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v) : typeof v;
}
