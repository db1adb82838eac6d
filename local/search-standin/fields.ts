/**
 * How the search stand-in (local/search-standin.ts) sees a field: its mapped kind, the values it
 * indexes and how they compare (as OpenSearch's do), the query DSL subset matched over them, and
 * the check of a document against strict mappings (docs/search.md, "The local stand-in").
 */
import { HttpError, isObj, type Json, type Obj } from './model.ts';

export function fieldValue(source: Obj, path: string): Json | undefined {
  let cur: Json | undefined = source;
  for (const part of path.split('.')) {
    if (!isObj(cur)) return undefined;
    cur = cur[part];
  }
  return cur;
}

export function termMatches(actual: Json | undefined, expected: Json): boolean {
  if (actual === undefined || actual === null) return false;
  if (Array.isArray(actual)) return actual.some((a) => termMatches(a, expected));
  if (typeof actual === 'boolean' || typeof expected === 'boolean') return String(actual) === String(expected);
  return actual === expected || String(actual) === String(expected);
}

/** How a field's values compare (see the module comment): from the index mapping. */
export interface FieldKind {
  /** The path in `_source` (a sub-field `x.keyword` reads `x`). */
  path: string;
  type: 'integer' | 'number' | 'date' | 'boolean' | 'keyword' | 'text';
  /** Strings longer than this are not indexed (keyword `ignore_above`). */
  ignoreAbove: number | null;
}

const INTEGER_TYPES = new Set(['long', 'integer', 'short', 'byte']);

/** The kind of a field path in an index's mapping; an unmapped field compares as a keyword. */
export function fieldKind(properties: Obj, path: string): FieldKind {
  const parts = path.split('.');
  let props: Obj | null = properties;
  let mapping: Obj | null = null;
  const sourcePath: string[] = [];
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!;
    if (props && isObj(props[part])) {
      mapping = props[part] as Obj;
      sourcePath.push(part);
      props = isObj(mapping.properties) ? mapping.properties : null;
      continue;
    }
    // A multi-field: `name.keyword` of a `text` field `name` reads `name` from the source.
    if (mapping && isObj(mapping.fields) && isObj(mapping.fields[part]) && i === parts.length - 1) {
      mapping = mapping.fields[part] as Obj;
      break;
    }
    return { path, type: 'keyword', ignoreAbove: null };
  }
  const t = mapping && typeof mapping.type === 'string' ? mapping.type : 'keyword';
  const ignoreAbove = mapping && typeof mapping.ignore_above === 'number' ? mapping.ignore_above : null;
  const type: FieldKind['type'] = INTEGER_TYPES.has(t)
    ? 'integer'
    : t === 'double' || t === 'float' || t === 'half_float' || t === 'scaled_float'
      ? 'number'
      : t === 'date'
        ? 'date'
        : t === 'boolean'
          ? 'boolean'
          : t === 'text'
            ? 'text'
            : 'keyword';
  return { path: sourcePath.join('.'), type, ignoreAbove };
}

/** A value as the field indexes it (`null`: not indexed), comparable with `compareIndexed`. */
export function indexedValue(kind: FieldKind, v: Json | undefined): bigint | number | string | null {
  if (v === undefined || v === null || isObj(v) || Array.isArray(v)) return null;
  switch (kind.type) {
    case 'integer':
      if (typeof v === 'bigint') return v;
      if (typeof v === 'number') return Number.isInteger(v) ? BigInt(v) : BigInt(Math.trunc(v));
      return typeof v === 'string' && /^-?\d+$/.test(v.trim()) ? BigInt(v.trim()) : null;
    case 'number': {
      const n = typeof v === 'number' ? v : Number(v);
      return Number.isFinite(n) ? n : null;
    }
    case 'date': {
      const t = typeof v === 'number' ? v : Date.parse(String(v));
      return Number.isNaN(t) ? null : t;
    }
    case 'boolean':
      return v === true || v === 'true' ? 1 : v === false || v === 'false' ? 0 : null;
    default: {
      const text = String(v);
      return kind.ignoreAbove !== null && text.length > kind.ignoreAbove ? null : text;
    }
  }
}

/** Orders two indexed values of one field: numbers numerically, strings by their UTF-8 bytes. */
export function compareIndexed(a: bigint | number | string, b: bigint | number | string): number {
  if (typeof a === 'string' || typeof b === 'string') return Buffer.compare(Buffer.from(String(a), 'utf8'), Buffer.from(String(b), 'utf8'));
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The indexed values of a field in a document (several for an array). */
export function indexedValues(kind: FieldKind, source: Obj): Array<bigint | number | string> {
  const raw = fieldValue(source, kind.path);
  const list = Array.isArray(raw) ? raw : [raw];
  return list.map((v) => indexedValue(kind, v as Json)).filter((v): v is bigint | number | string => v !== null);
}

/** Evaluates the query subset on a document source (`properties`: the index mapping, for typed comparisons). */
export function matches(q: Json | undefined, source: Obj, properties: Obj = {}): boolean {
  if (q === undefined || q === null) return true;
  if (!isObj(q)) throw new HttpError(400, 'parsing_exception', 'query must be an object');
  const [kind, body] = Object.entries(q)[0] ?? (['match_all', {}] as [string, Json]);
  switch (kind) {
    case 'match_all':
      return true;
    case 'term': {
      if (!isObj(body)) throw new HttpError(400, 'parsing_exception', '[term] query malformed');
      const [field, spec] = Object.entries(body)[0]!;
      const value = isObj(spec) ? spec.value! : spec;
      return termMatches(fieldValue(source, field.replace(/\.keyword$/, '')), value);
    }
    case 'terms': {
      if (!isObj(body)) throw new HttpError(400, 'parsing_exception', '[terms] query malformed');
      const [field, values] = Object.entries(body)[0]!;
      if (!Array.isArray(values)) throw new HttpError(400, 'parsing_exception', '[terms] query needs an array');
      return values.some((v) => termMatches(fieldValue(source, field.replace(/\.keyword$/, '')), v));
    }
    case 'range': {
      if (!isObj(body)) throw new HttpError(400, 'parsing_exception', '[range] query malformed, no start_object after query name');
      const [field, spec] = Object.entries(body)[0] ?? [];
      if (field === undefined || !isObj(spec)) throw new HttpError(400, 'parsing_exception', '[range] query malformed, no field to indicate field name');
      for (const op of Object.keys(spec))
        if (!['gt', 'gte', 'lt', 'lte'].includes(op))
          throw new HttpError(400, 'parsing_exception', `[range] query does not support [${op}] (the stand-in knows gt, gte, lt, lte)`);
      const fk = fieldKind(properties, field);
      if (fk.type === 'text')
        throw new HttpError(400, 'illegal_argument_exception', `the stand-in does not implement [range] on text field [${field}]; use its keyword sub-field`);
      const bound = (op: string): bigint | number | string | null => {
        const b = indexedValue(fk, spec[op]);
        if (b === null) throw new HttpError(400, 'parse_exception', `[range] ${op} value [${String(spec[op])}] is not a value of field [${field}]`);
        return b;
      };
      const ops = Object.keys(spec).map((op) => [op, bound(op)] as const);
      return indexedValues(fk, source).some((v) =>
        ops.every(([op, b]) => {
          const c = compareIndexed(v, b!);
          return op === 'gt' ? c > 0 : op === 'gte' ? c >= 0 : op === 'lt' ? c < 0 : c <= 0;
        }),
      );
    }
    case 'bool': {
      if (!isObj(body)) throw new HttpError(400, 'parsing_exception', '[bool] query malformed');
      const list = (v: Json | undefined): Json[] => (v === undefined ? [] : Array.isArray(v) ? v : [v]);
      const required = [...list(body.filter), ...list(body.must)];
      const should = list(body.should);
      // OpenSearch: with no must/filter clause at least one should clause must match; with one, none need to (unless minimum_should_match says).
      const msm = body.minimum_should_match;
      if (msm !== undefined && typeof msm !== 'number' && !(typeof msm === 'string' && /^\d+$/.test(msm))) {
        throw new HttpError(400, 'parsing_exception', `the stand-in knows minimum_should_match as a whole number only, got [${String(msm)}]`);
      }
      const minShould = msm !== undefined ? Number(msm) : required.length === 0 && should.length > 0 ? 1 : 0;
      return (
        required.every((c) => matches(c, source, properties)) &&
        !list(body.must_not).some((c) => matches(c, source, properties)) &&
        should.filter((c) => matches(c, source, properties)).length >= minShould
      );
    }
    default:
      throw new HttpError(400, 'parsing_exception', `unknown query [${kind}] (the stand-in knows match_all, term, terms, range, bool)`);
  }
}

/** Field types whose mapping may say `ignore_malformed` (OpenSearch's numeric and date fields). */
const IGNORE_MALFORMED_TYPES = new Set(['long', 'integer', 'double', 'float', 'date']);

export function checkValue(field: string, mapping: Obj, value: Json, index: string, dynamic: string): void {
  if (value === null) return;
  const type = typeof mapping.type === 'string' ? mapping.type : isObj(mapping.properties) ? 'object' : 'keyword';
  const bad = (why: string): void => {
    // `ignore_malformed`: the document is kept, the value stays in `_source` and is not indexed.
    if (mapping.ignore_malformed === true && IGNORE_MALFORMED_TYPES.has(type)) return;
    throw new HttpError(400, 'mapper_parsing_exception', `failed to parse field [${field}] of type [${type}]: ${why}`, index);
  };
  if (Array.isArray(value)) {
    for (const v of value) checkValue(field, mapping, v, index, dynamic);
    return;
  }
  switch (type) {
    case 'long':
    case 'integer':
      if (typeof value === 'number' ? !Number.isInteger(value) : typeof value !== 'string' || !/^-?\d+$/.test(value))
        bad(`For input string: "${String(value)}"`);
      return;
    case 'double':
    case 'float':
      if (typeof value === 'number') return;
      if (typeof value !== 'string' || !Number.isFinite(Number(value)) || value.trim() === '') bad(`For input string: "${String(value)}"`);
      return;
    case 'boolean':
      if (typeof value !== 'boolean' && value !== 'true' && value !== 'false')
        bad(`Failed to parse value [${String(value)}] as only [true] or [false] are allowed.`);
      return;
    case 'date':
      if (typeof value !== 'string' || Number.isNaN(Date.parse(value)) || (mapping.format === 'strict_date' && !/^\d{4}-\d{2}-\d{2}$/.test(value))) {
        bad(`failed to parse date field [${String(value)}]`);
      }
      return;
    case 'object':
      if (mapping.enabled === false) return;
      if (!isObj(value)) bad('tried to parse field as object, but found a concrete value');
      checkObject(`${field}.`, (mapping.properties as Obj) ?? {}, value as Obj, index, typeof mapping.dynamic === 'string' ? mapping.dynamic : dynamic);
      return;
    default:
      if (isObj(value)) bad('tried to parse field as a concrete value, but found an object');
  }
}

export function checkObject(prefix: string, properties: Obj, source: Obj, index: string, dynamic: string): void {
  for (const [k, v] of Object.entries(source)) {
    const m = properties[k];
    if (m === undefined) {
      if (dynamic === 'strict') {
        throw new HttpError(
          400,
          'strict_dynamic_mapping_exception',
          `mapping set to strict, dynamic introduction of [${prefix}${k}] within [_doc] is not allowed`,
          index,
        );
      }
      continue;
    }
    checkValue(`${prefix}${k}`, m as Obj, v, index, dynamic);
  }
}

export function typeOf(m: Json | undefined): string | null {
  if (!isObj(m)) return null;
  if (typeof m.type === 'string') return m.type;
  return isObj(m.properties) ? 'object' : null;
}
