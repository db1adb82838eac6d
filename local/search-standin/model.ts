/**
 * What the search stand-in (local/search-standin.ts) holds and answers with: JSON values with exact
 * `bigint` versions, an index with its documents and tombstones, an alias's spec, and the error a
 * request or a bulk item answers with.
 */
export type Json = null | boolean | number | string | bigint | Json[] | { [k: string]: Json };
export type Obj = { [k: string]: Json };

export interface Doc {
  source: Obj;
  version: bigint;
  seqNo: number;
}

export interface Tombstone {
  version: bigint;
  at: number;
}

export interface AliasSpec {
  filter?: Obj;
  isWriteIndex?: boolean;
}

export interface Index {
  name: string;
  uuid: string;
  gcDeletesMs: number;
  settings: Obj;
  mappings: { dynamic: string; _meta?: Json; properties: Obj };
  docs: Map<string, Doc>;
  tombstones: Map<string, Tombstone>;
  seqNo: number;
}

export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    reason: string,
    readonly index?: string,
  ) {
    super(reason);
  }
}

/** Parses `60s`, `100ms`, `1m`, or `-1`/`0`. */
export function parseTimeValue(v: Json | undefined, field: string): number {
  if (typeof v === 'number') return v;
  if (typeof v !== 'string') throw new HttpError(400, 'illegal_argument_exception', `failed to parse setting [${field}] with value [${String(v)}]`);
  const m = /^(\d+)(ms|s|m|h|d)?$/.exec(v.trim());
  if (!m) throw new HttpError(400, 'illegal_argument_exception', `failed to parse setting [${field}] with value [${v}] as a time value`);
  const n = Number(m[1]);
  const unit = m[2] ?? 'ms';
  return unit === 'ms' ? n : unit === 's' ? n * 1000 : unit === 'm' ? n * 60_000 : unit === 'h' ? n * 3_600_000 : n * 86_400_000;
}

/** JSON text with `bigint`s as exact integer literals. */
export function stringifyExact(v: Json): string {
  return JSON.stringify(v, (_k, x: unknown) => (typeof x === 'bigint' ? `\u0000big:${x.toString()}` : x)).replace(/"\\u0000big:(-?\d+)"/g, '$1');
}

/** JSON.parse that keeps `version` fields exact (as `bigint`). */
export function parseActionLine(line: string): Obj {
  const text = line.replace(/"version"\s*:\s*(-?\d+)/g, '"version":"\\u0000big:$1"');
  return JSON.parse(text, (_k, x: unknown) => (typeof x === 'string' && x.startsWith('\u0000big:') ? BigInt(x.slice(5)) : x)) as Obj;
}

export const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v) && typeof v !== 'bigint';

/** The answer to a request that failed: an `HttpError` as OpenSearch words it, anything else a 500. */
export function errorAnswer(err: unknown): [number, Json] {
  if (err instanceof HttpError) {
    return [
      err.status,
      {
        error: { root_cause: [{ type: err.type, reason: err.message }], type: err.type, reason: err.message, ...(err.index ? { index: err.index } : {}) },
        status: err.status,
      },
    ];
  }
  return [500, { error: { type: 'exception', reason: (err as Error).message }, status: 500 }];
}
