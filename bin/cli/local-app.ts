/**
 * `cdc local --app <cdk.out> [--stack NAME]` (docs/local.md, "Your synthesized app"): the flags
 * that would restate what the app's templates say are refused with it, and the app's settings
 * become the run's options (local/app-config.ts reads them).
 */
import type { TableConfig } from '../../lambda/core/tables/table-config.ts';
import { loadLocalApp, type LocalAppConfig } from '../../local/app-config.ts';
import { LocalConfigError } from '../../local/errors.ts';
import type { PipelineOptions } from '../../local/pipeline.ts';
import { UsageError } from './command.ts';

/** Flags that configure what `--app` takes from the templates: tables, their settings, the sinks' and slot's names. */
const FROM_THE_APP: ReadonlyArray<readonly [string, string]> = [
  ['--demo', 'the demo captures its own tables'],
  ['--tables', 'the captured tables come from the app'],
  ['--exclude-tables', 'capture rules come from the app'],
  ['--table-config', 'table settings come from the app'],
  ['--warehouse-id', "the warehouse sink's id comes from the app"],
  ['--sink-id', "the warehouse sink's id comes from the app"],
  ['--search-id', "the search sink's id comes from the app"],
  ['--slot', "the slot's name comes from the app's slot monitor"],
];

/** Whether `args` give `flag` (`--flag value` or `--flag=value`). */
function gives(args: readonly string[], flag: string): boolean {
  return args.some((a) => a === flag || a.startsWith(`${flag}=`));
}

/** Refuses the flags `--app` excludes (a usage error, exit 2), naming each and why. */
export function refuseWithApp(args: readonly string[]): void {
  if (!gives(args, '--app')) {
    if (gives(args, '--stack')) throw new UsageError('--stack needs --app (the cloud assembly it names a stack of)');
    return;
  }
  const clashes = FROM_THE_APP.filter(([flag]) => gives(args, flag));
  if (clashes.length > 0) throw new UsageError(`--app excludes ${clashes.map(([flag, why]) => `${flag} (${why})`).join(', ')}`);
  if (!gives(args, '--source'))
    throw new UsageError('--app needs --source URL: the PostgreSQL that holds the tables the app captures (only the database URLs come from the command line)');
}

/** The app's source, read from the cloud assembly; a bad assembly, stack or source is a usage error naming it. */
export function readApp(dir: string, stack: string | null, sourceId: string | null): LocalAppConfig {
  try {
    return loadLocalApp(dir, stack, sourceId);
  } catch (e) {
    if (e instanceof LocalConfigError) throw new UsageError(e.message);
    throw e;
  }
}

/** The pipeline settings the app gives beyond its tables: merge thresholds, batch sizes, the slot's WAL budget, the normalizer's catalog types and record aggregation. */
export function appPipelineOptions(
  app: LocalAppConfig,
): Pick<PipelineOptions, 'merge' | 'batchSizes' | 'slotWalBudgetBytes' | 'catalogTypes' | 'changeLogAggregation'> {
  const sizes = Object.fromEntries(Object.entries(app.batchSizes).filter(([, v]) => v !== null)) as PipelineOptions['batchSizes'];
  return {
    merge: {
      ...(app.warehouse.merge.maxRows !== undefined ? { maxRows: app.warehouse.merge.maxRows } : {}),
      ...(app.warehouse.merge.maxAgeMs !== undefined ? { maxAgeMs: app.warehouse.merge.maxAgeMs } : {}),
    },
    batchSizes: sizes,
    catalogTypes: app.catalogTypes,
    changeLogAggregation: app.changeLogAggregation,
    ...(app.slotWalBudgetBytes !== null ? { slotWalBudgetBytes: app.slotWalBudgetBytes } : {}),
  };
}

/** The captured tables the app's search sink serves (the search verdict compares those). */
export function searchServed(app: LocalAppConfig | null, captured: TableConfig[]): TableConfig[] {
  if (!app?.search) return captured;
  const served = new Set(app.search.tables.map((t) => t.table));
  return captured.filter((t) => served.has(t.table));
}
