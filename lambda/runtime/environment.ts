/**
 * Settings handlers read from the environment the constructs set (contracts/env.ts): required
 * variables, the snapshot budget, reconcile tiers, catalog types. Settings of one kind of function
 * live beside it, so a handler's bundle reads only what its function is given: the payload bucket
 * in lambda/runtime/payload-store.ts, the merge policy in lambda/runtime/merge-policy.ts, the
 * warehouse connection in lambda/runtime/warehouse-pool.ts (a handler without a warehouse does not
 * bundle `pg`). A setting that is missing or malformed is a `ConfigurationError` naming the variable.
 */
import { EnvName } from '../../contracts/env.ts';
import { CdcError, ConfigurationError } from '../core/shared/errors.ts';
import { DEFAULT_SOURCE_BUDGET, type SourceBudget } from '../core/snapshot/snapshot-pacer.ts';
import type { ReconcileTier } from '../core/reconcile/reconcile.ts';

/** Parses `CDC_SNAPSHOT_BUDGET`; unset means the defaults (≤ 10 % added p99 write latency, ≤ 5 % added CPU). */
export function parseBudget(text: string | undefined): SourceBudget {
  if (text === undefined || text.trim() === '') return DEFAULT_SOURCE_BUDGET;
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new CdcError('INVALID_CONFIG', `${EnvName.SNAPSHOT_BUDGET}: not valid JSON: ${(e as Error).message}`);
  }
  const o = v as Record<string, unknown>;
  const num = (k: 'writeLatencyPct' | 'cpuPct'): number => {
    const x = o?.[k] ?? DEFAULT_SOURCE_BUDGET[k];
    if (typeof x !== 'number' || !(x > 0))
      throw new CdcError('INVALID_CONFIG', `${EnvName.SNAPSHOT_BUDGET}.${k}: expected a positive number, got ${JSON.stringify(x)}`);
    return x;
  };
  return { writeLatencyPct: num('writeLatencyPct'), cpuPct: num('cpuPct') };
}

/** `CDC_CHANGE_LOG_AGGREGATION`: `on` (also when unset) or `off` (docs/architecture.md, "5.1 The change event"). */
export function changeLogAggregationSetting(text: string | undefined): boolean {
  if (text === undefined || text.trim() === '' || text === 'on') return true;
  if (text === 'off') return false;
  throw new ConfigurationError(`${EnvName.CHANGE_LOG_AGGREGATION}: expected on or off, got ${JSON.stringify(text)}`);
}

/** A setting the function cannot run without: missing or blank is a `ConfigurationError` naming it. */
export function requiredEnv(name: string): string {
  const v = process.env[name];
  if (v === undefined || v.trim() === '') throw new ConfigurationError(`environment variable ${name} is not set`);
  return v;
}

/** `CDC_CATALOG_TYPES`: `published` (the snapshot worker publishes them) or unset. */
export function catalogTypesSetting(value: string | undefined): boolean {
  if (value === undefined || value === '') return false;
  if (value === 'published') return true;
  throw new ConfigurationError(`${EnvName.CATALOG_TYPES}: expected 'published' or nothing, got ${JSON.stringify(value)}`);
}

/** An optional positive integer setting (unset or empty: undefined). */
export function optionalInt(name: string): number | undefined {
  const v = process.env[name];
  if (v === undefined || v === '') return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) throw new ConfigurationError(`${name}: expected a positive integer, got ${JSON.stringify(v)}`);
  return n;
}

/** Parses `CDC_RECONCILE_TIERS`, naming the entry and field that is wrong. */
export function parseTiers(text: string | undefined): ReconcileTier[] {
  if (text === undefined || text.trim() === '') throw new ConfigurationError(`${EnvName.RECONCILE_TIERS} is not set (expected a JSON array of tiers)`);
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new ConfigurationError(`${EnvName.RECONCILE_TIERS}: not valid JSON: ${(e as Error).message}`);
  }
  if (!Array.isArray(v) || v.length === 0) throw new ConfigurationError(`${EnvName.RECONCILE_TIERS}: expected a non-empty array of tiers`);
  return v.map((t: unknown, i): ReconcileTier => {
    const at = `${EnvName.RECONCILE_TIERS}[${i}]`;
    const o = t as Record<string, unknown>;
    if (typeof o?.name !== 'string' || o.name === '') throw new ConfigurationError(`${at}.name: expected a tier name`);
    if (typeof o.periodMs !== 'number' || !(o.periodMs > 0)) throw new ConfigurationError(`${at}.periodMs: expected a positive number of milliseconds`);
    if (!Array.isArray(o.tables) || o.tables.length === 0 || o.tables.some((x) => typeof x !== 'string'))
      throw new ConfigurationError(`${at}.tables: expected table ids or "*"`);
    return { name: o.name, periodMs: o.periodMs, tables: o.tables as string[] };
  });
}
