/**
 * `cdc local --app <cdk.out>`: the configuration of a local run read from the user's synthesized
 * deployment (docs/local.md, "Your synthesized app"). A cloud assembly's manifest names its stacks
 * (nested assemblies of stages included); a stack's template holds the platform's Lambda functions,
 * each known by its service name (`POWERTOOLS_SERVICE_NAME`), with the environment its handler reads
 * and the event source mapping that feeds it. What the handlers would read on AWS is parsed here
 * with the handlers' own parsers; what names an AWS resource (the control table, the streams, the
 * secrets, the search domain) is checked to name the right resource and is replaced by the local
 * stand-in that plays it.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { DEFAULT_HEARTBEAT_SCHEMA, EnvName, HEARTBEAT_TABLE, ServiceName } from '../contracts/env.ts';
import { parseTableConfig, parseTableRules, type TableConfig, type TableRule } from '../lambda/core/tables/table-config.ts';
import { DEFAULT_INDEX_PREFIX, validateSearchTables, type SearchTableConfig } from '../lambda/core/search/search-plan.ts';
import type { MergePolicy } from '../lambda/core/warehouse/merge-policy.ts';
import type { SourceBudget } from '../lambda/core/snapshot/snapshot-pacer.ts';
import { catalogTypesSetting, changeLogAggregationSetting, parseBudget } from '../lambda/runtime/environment.ts';
import { mergePolicyFromEnvironment } from '../lambda/runtime/merge-policy.ts';
import { LocalConfigError } from './errors.ts';

/**
 * The handler each platform function runs, by its service name (the constructs set it from
 * contracts/env.ts `ServiceName` or a literal of their own: lib/, `serviceName`).
 */
export const HANDLER_OF_SERVICE: Readonly<Record<string, string>> = {
  [ServiceName.NORMALIZER]: 'normalizer',
  [ServiceName.HEARTBEAT_WRITER]: 'heartbeat-writer',
  [ServiceName.WAREHOUSE_APPLIER]: 'warehouse-applier',
  [ServiceName.DMS_TASK_LIFECYCLE]: 'task-lifecycle',
  [ServiceName.RECONCILER]: 'reconciler',
  [ServiceName.REBUILD_WORKER]: 'rebuild-worker',
  [ServiceName.ARCHIVE_COPIER]: 'archive-copier',
  [ServiceName.REDSHIFT_LOADER]: 'redshift-loader',
  'cdc-search-applier': 'search-applier',
  'cdc-snapshot-worker': 'snapshot-worker',
  'cdc-poll-worker': 'poll-worker',
  'cdc-slot-monitor': 'slot-monitor',
  'cdc-operator': 'operator',
  'cdc-operator-status': 'operator',
};

/** One stack of a cloud assembly. */
export interface AssemblyStack {
  /** The stack's path as `cdk` shows it (`Dev/CdcExample`). */
  readonly name: string;
  /** The artifact id (`DevCdcExampleD6B4F737`). */
  readonly id: string;
  readonly templateFile: string;
}

/** A value of a template's environment variable: a literal, or a CloudFormation expression. */
export type TemplateValue = string | { readonly [intrinsic: string]: unknown };

/** One platform function of a template. */
export interface TemplateFunction {
  readonly logicalId: string;
  readonly service: string;
  /** The handler it runs (`HANDLER_OF_SERVICE`). */
  readonly handler: string;
  readonly env: Readonly<Record<string, TemplateValue>>;
  /** Its event source mappings: the stream each reads (logical id) and its batch size. */
  readonly mappings: ReadonlyArray<{ readonly stream: string; readonly batchSize: number | null }>;
}

interface Template {
  Resources?: Record<string, { Type: string; Properties?: Record<string, unknown> }>;
}

function readJson(file: string, what: string): unknown {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new LocalConfigError(`--app: cannot read ${what} ${file}: ${(e as Error).message}`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new LocalConfigError(`--app: ${what} ${file} is not JSON: ${(e as Error).message}`);
  }
}

/** Every stack of the cloud assembly in `dir`, nested assemblies (stages) included. */
export function assemblyStacks(dir: string): AssemblyStack[] {
  const manifestFile = path.join(dir, 'manifest.json');
  if (!existsSync(manifestFile))
    throw new LocalConfigError(`--app: ${dir} is not a cloud assembly (no manifest.json): pass the folder \`cdk synth\` writes (cdk.out)`);
  const manifest = readJson(manifestFile, 'the cloud assembly manifest') as {
    artifacts?: Record<string, { type?: string; displayName?: string; properties?: Record<string, unknown> }>;
  };
  const out: AssemblyStack[] = [];
  for (const [id, artifact] of Object.entries(manifest.artifacts ?? {})) {
    const props = artifact.properties ?? {};
    if (artifact.type === 'aws:cloudformation:stack' && typeof props.templateFile === 'string') {
      out.push({ name: artifact.displayName ?? id, id, templateFile: path.join(dir, props.templateFile) });
    } else if (artifact.type === 'cdk:cloud-assembly' && typeof props.directoryName === 'string') {
      out.push(...assemblyStacks(path.join(dir, props.directoryName)));
    }
  }
  return out;
}

/** The logical id a `Ref` or `Fn::GetAtt` names, or null for anything else. */
export function referencedResource(value: unknown): string | null {
  if (typeof value !== 'object' || value === null) return null;
  const v = value as Record<string, unknown>;
  if (typeof v.Ref === 'string') return v.Ref;
  const att = v['Fn::GetAtt'];
  if (Array.isArray(att) && typeof att[0] === 'string') return att[0];
  return null;
}

/** The platform functions of a template (functions with a platform service name), with their mappings. */
export function templateFunctions(template: unknown): TemplateFunction[] {
  const resources = (template as Template).Resources ?? {};
  const mappings = new Map<string, Array<{ stream: string; batchSize: number | null }>>();
  for (const r of Object.values(resources)) {
    if (r.Type !== 'AWS::Lambda::EventSourceMapping') continue;
    const fn = referencedResource(r.Properties?.FunctionName);
    const stream = referencedResource(r.Properties?.EventSourceArn);
    if (!fn || !stream) continue;
    const batch = r.Properties?.BatchSize;
    mappings.set(fn, [...(mappings.get(fn) ?? []), { stream, batchSize: typeof batch === 'number' ? batch : null }]);
  }
  const out: TemplateFunction[] = [];
  for (const [logicalId, r] of Object.entries(resources)) {
    if (r.Type !== 'AWS::Lambda::Function') continue;
    const env = ((r.Properties?.Environment as { Variables?: Record<string, TemplateValue> } | undefined)?.Variables ?? {}) as Record<string, TemplateValue>;
    const service = env[EnvName.POWERTOOLS_SERVICE_NAME];
    if (typeof service !== 'string') continue;
    const handler = HANDLER_OF_SERVICE[service];
    if (!handler) continue;
    out.push({ logicalId, service, handler, env, mappings: mappings.get(logicalId) ?? [] });
  }
  return out;
}

/** What `cdc local` runs of one source of a synthesized stack. */
export interface LocalAppConfig {
  /** The stack it was read from (`Dev/CdcExample`). */
  readonly stack: string;
  readonly source: string;
  /** The source's captured tables (`CDC_TABLE_CONFIG` of its normalizer without the heartbeat table; polled tables have `capture: 'poll'`). */
  readonly tables: TableConfig[];
  readonly rules: TableRule[];
  /** The normalizer's `CDC_CATALOG_TYPES`: a table first seen through a type-less record takes the types the snapshot worker published. */
  readonly catalogTypes: boolean;
  /** The normalizer's `CDC_CHANGE_LOG_AGGREGATION` (`ChangeLog` `recordAggregation`): the change log's records are KPL aggregates. */
  readonly changeLogAggregation: boolean;
  /** The slot its slot monitor watches. */
  readonly slot: string | null;
  readonly slotWalBudgetBytes: number | null;
  /** The snapshot worker's budget. */
  readonly snapshotBudget: SourceBudget;
  readonly warehouse: { readonly sinkId: string; readonly merge: Partial<MergePolicy> };
  /** The search sink that serves this source, with the tables it serves; null when none does. */
  readonly search: { readonly sinkId: string; readonly tables: SearchTableConfig[]; readonly prefix: string } | null;
  /** Batch sizes of the event source mappings, by local consumer. */
  readonly batchSizes: { readonly normalizer: number | null; readonly sink: number | null; readonly search: number | null; readonly archive: number | null };
  /** The other sources of the stack (run one per `cdc local`, `--source-id`). */
  readonly otherSources: string[];
  /** What of the stack runs only on AWS: functions `cdc local` does not run, by handler. */
  readonly notRun: string[];
}

/** Handlers whose work `cdc local` does with its own loop or stand-in (docs/local.md). */
const RUN_LOCALLY = new Set([
  'normalizer',
  'heartbeat-writer',
  'warehouse-applier',
  'search-applier',
  'archive-copier',
  'snapshot-worker',
  'poll-worker',
  'slot-monitor',
  'task-lifecycle',
]);

function where(stack: string, fn: TemplateFunction, name: string): string {
  return `${stack}: function ${fn.logicalId} (${fn.handler}) ${name}`;
}

/** A literal environment value; a CloudFormation expression where cdc local needs the value is refused, named. */
function literal(stack: string, fn: TemplateFunction, name: string): string | undefined {
  const v = fn.env[name];
  if (v === undefined || typeof v === 'string') return v;
  throw new LocalConfigError(
    `--app: ${where(stack, fn, name)} is ${JSON.stringify(v)}, a value CloudFormation resolves at deploy time; cdc local needs it as a literal in the template`,
  );
}

function required(stack: string, fn: TemplateFunction, name: string): string {
  const v = literal(stack, fn, name);
  if (v === undefined || v === '') throw new LocalConfigError(`--app: ${where(stack, fn, name)} is not set`);
  return v;
}

/** The resource an environment variable names (a `Ref`/`GetAtt` to a resource of this template). */
function resourceOf(stack: string, fn: TemplateFunction, name: string): string {
  const id = referencedResource(fn.env[name]);
  if (!id)
    throw new LocalConfigError(
      `--app: ${where(stack, fn, name)} does not name a resource of the stack (${JSON.stringify(fn.env[name])}); cdc local maps the stack's own resources onto its stand-ins`,
    );
  return id;
}

/**
 * Runs a parser of a handler that reads `process.env` with exactly the given variables set, then
 * restores the process's environment (synchronous: nothing else runs in between).
 */
export function withEnvironment<T>(env: Readonly<Record<string, string>>, read: () => T): T {
  const saved = new Map<string, string | undefined>();
  for (const [k, v] of Object.entries(env)) {
    saved.set(k, process.env[k]);
    process.env[k] = v;
  }
  try {
    return read();
  } finally {
    for (const [k, v] of saved) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

function oneOf<T>(items: readonly T[], what: string, stack: string, pick?: (t: T) => string): T {
  if (items.length === 1) return items[0]!;
  if (items.length === 0) throw new LocalConfigError(`--app: stack ${stack} has no ${what}`);
  throw new LocalConfigError(`--app: stack ${stack} has ${items.length} ${what}s${pick ? ` (${items.map(pick).join(', ')})` : ''}; cdc local runs one`);
}

/** Picks the stack by name (display name or artifact id), or the only one with a platform source. */
export function selectStack(dir: string, name: string | null): AssemblyStack {
  const stacks = assemblyStacks(dir);
  if (name !== null) {
    const found = stacks.find((s) => s.name === name || s.id === name);
    if (!found) throw new LocalConfigError(`--stack ${name}: no such stack in ${dir}; its stacks: ${stacks.map((s) => s.name).join(', ') || 'none'}`);
    return found;
  }
  const withSource = stacks.filter((s) => templateFunctions(readJson(s.templateFile, 'the template')).some((f) => f.handler === 'normalizer'));
  if (withSource.length === 1) return withSource[0]!;
  if (withSource.length === 0)
    throw new LocalConfigError(`--app: no stack in ${dir} has a CdcSource; its stacks: ${stacks.map((s) => s.name).join(', ') || 'none'}`);
  throw new LocalConfigError(
    `--app: ${dir} has ${withSource.length} stacks with a CdcSource (${withSource.map((s) => s.name).join(', ')}); choose one with --stack`,
  );
}

/**
 * The local run of one source of a synthesized stack: `dir` is the cloud assembly (`cdk.out`),
 * `stackName` its stack (optional when one stack has a source), `requested` the source id asked for (optional
 * when the stack has one).
 */
export function loadLocalApp(dir: string, stackName: string | null, requested: string | null): LocalAppConfig {
  const chosen = selectStack(dir, stackName);
  const stack = chosen.name;
  const fns = templateFunctions(readJson(chosen.templateFile, 'the template'));
  const ofHandler = (h: string): TemplateFunction[] => fns.filter((f) => f.handler === h);
  const sourceOf = (f: TemplateFunction): string => required(stack, f, EnvName.SOURCE_ID);
  const normalizers = ofHandler('normalizer');
  const sources = normalizers.map(sourceOf);
  if (normalizers.length === 0) throw new LocalConfigError(`--app: stack ${stack} has no CdcSource (no normalizer function)`);
  const normalizer =
    requested === null
      ? oneOf(normalizers, 'source', stack, sourceOf)
      : (normalizers.find((f) => sourceOf(f) === requested) ??
        (() => {
          throw new LocalConfigError(`--source-id ${requested}: stack ${stack} has no such source; its sources: ${sources.join(', ')}`);
        })());
  const sourceId = sourceOf(normalizer);
  const ofSource = (h: string): TemplateFunction[] => ofHandler(h).filter((f) => f.env[EnvName.SOURCE_ID] === sourceId);

  const heartbeatSchema = literal(stack, normalizer, EnvName.HEARTBEAT_SCHEMA) ?? DEFAULT_HEARTBEAT_SCHEMA;
  if (heartbeatSchema !== DEFAULT_HEARTBEAT_SCHEMA)
    throw new LocalConfigError(
      `--app: ${where(stack, normalizer, EnvName.HEARTBEAT_SCHEMA)} is ${heartbeatSchema}; cdc local writes its heartbeat in ${DEFAULT_HEARTBEAT_SCHEMA}`,
    );
  // The heartbeat table is in every source's configuration; the local pipeline adds its own (local/pipeline.ts).
  const heartbeat = `${heartbeatSchema}.${HEARTBEAT_TABLE}`;
  const tables = parseTableConfig(literal(stack, normalizer, EnvName.TABLE_CONFIG), where(stack, normalizer, EnvName.TABLE_CONFIG)).filter(
    (t) => t.table !== heartbeat,
  );
  const rules = parseTableRules(literal(stack, normalizer, EnvName.TABLE_RULES), where(stack, normalizer, EnvName.TABLE_RULES));

  // The streams: the normalizer reads the source's raw stream and writes the change log.
  const raw = oneOf(normalizer.mappings, 'event source mapping of the normalizer', stack).stream;
  const changeLog = resourceOf(stack, normalizer, EnvName.CHANGE_LOG_STREAM);
  const snapshot = ofSource('snapshot-worker')[0];
  if (snapshot && resourceOf(stack, snapshot, EnvName.RAW_STREAM) !== raw)
    throw new LocalConfigError(`--app: ${where(stack, snapshot, EnvName.RAW_STREAM)} is not the stream the normalizer of ${sourceId} reads (${raw})`);
  const readsChangeLog = (f: TemplateFunction): boolean => f.mappings.some((m) => m.stream === changeLog);

  const applier = oneOf(ofHandler('warehouse-applier').filter(readsChangeLog), 'warehouse sink reading the change log', stack, (f) =>
    String(f.env[EnvName.SINK_ID]),
  );
  const sinkId = required(stack, applier, EnvName.SINK_ID);
  const mergeEnv = Object.fromEntries(
    [EnvName.MERGE_MAX_ROWS, EnvName.MERGE_MAX_AGE_MS, EnvName.MERGE_ON_SCHEDULE].flatMap((n) =>
      literal(stack, applier, n) === undefined ? [] : [[n, literal(stack, applier, n)!]],
    ),
  );
  const merge = withEnvironment(
    { [EnvName.MERGE_MAX_ROWS]: '', [EnvName.MERGE_MAX_AGE_MS]: '', [EnvName.MERGE_ON_SCHEDULE]: '', ...mergeEnv },
    mergePolicyFromEnvironment,
  );

  // A search sink serves this source when its tables name it.
  const searches = ofHandler('search-applier')
    .filter(readsChangeLog)
    .map((f) => ({
      f,
      tables: validateSearchTables(JSON.parse(required(stack, f, EnvName.SEARCH_TABLES)) as unknown, where(stack, f, EnvName.SEARCH_TABLES)).filter(
        (t) => t.source === sourceId,
      ),
    }))
    .filter((s) => s.tables.length > 0);
  if (searches.length > 1) throw new LocalConfigError(`--app: stack ${stack} has ${searches.length} search sinks serving ${sourceId}; cdc local runs one`);
  const searchFn = searches[0];
  const search = searchFn
    ? {
        sinkId: required(stack, searchFn.f, EnvName.SINK_ID),
        tables: searchFn.tables,
        prefix: literal(stack, searchFn.f, EnvName.SEARCH_INDEX_PREFIX) || DEFAULT_INDEX_PREFIX,
      }
    : null;

  const monitor = ofSource('slot-monitor')[0];
  const budgetBytes = monitor ? literal(stack, monitor, EnvName.SLOT_WAL_BUDGET_BYTES) : undefined;
  const archive = ofHandler('archive-copier').find(readsChangeLog);
  const batchOf = (f: TemplateFunction | undefined, stream: string): number | null => f?.mappings.find((m) => m.stream === stream)?.batchSize ?? null;
  const others = sources.filter((s) => s !== sourceId);
  return {
    stack,
    source: sourceId,
    tables,
    rules,
    catalogTypes: catalogTypesSetting(literal(stack, normalizer, EnvName.CATALOG_TYPES)),
    changeLogAggregation: changeLogAggregationSetting(literal(stack, normalizer, EnvName.CHANGE_LOG_AGGREGATION)),
    slot: monitor ? required(stack, monitor, EnvName.SLOT_NAME) : null,
    slotWalBudgetBytes: budgetBytes ? Number(budgetBytes) : null,
    snapshotBudget: parseBudget(snapshot ? literal(stack, snapshot, EnvName.SNAPSHOT_BUDGET) : undefined),
    warehouse: { sinkId, merge },
    search,
    batchSizes: {
      normalizer: batchOf(normalizer, raw),
      sink: batchOf(applier, changeLog),
      search: batchOf(searchFn?.f, changeLog),
      archive: batchOf(archive, changeLog),
    },
    otherSources: others,
    notRun: [...new Set(fns.map((f) => f.handler).filter((h) => !RUN_LOCALLY.has(h)))].sort(),
  };
}

/** One line per setting read from the app, for the start of a run. */
export function describeLocalApp(c: LocalAppConfig): string[] {
  const t = (x: TableConfig): string =>
    `${x.table}${x.capture === 'poll' ? ' (polled)' : ''}${x.mask.length ? ` mask ${x.mask.join(',')}` : ''}${x.exclude.length ? ` exclude ${x.exclude.join(',')}` : ''}${x.deleteMode === 'hard' ? ' hard deletes' : ''}`;
  return [
    `from ${c.stack}: source ${c.source}${c.otherSources.length ? ` (the stack's other sources, ${c.otherSources.join(', ')}, run with --source-id)` : ''}`,
    ...c.tables.map((x) => `  table ${t(x)}`),
    ...c.rules.map((r) => `  rule ${r.match}${r.excludeTables.length ? ` except ${r.excludeTables.join(',')}` : ''}`),
    `  warehouse sink ${c.warehouse.sinkId}${c.search ? `, search sink ${c.search.sinkId} (${c.search.tables.map((x) => x.table).join(', ')})` : ''}`,
    ...(c.notRun.length ? [`  not run locally: ${c.notRun.join(', ')}`] : []),
  ];
}
