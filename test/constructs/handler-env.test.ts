/**
 * Every environment variable a handler reads is one a construct sets on the functions that run
 * it (docs/architecture.md §5.5): the reads are found in the handler's file and the non-handler
 * modules it imports (`[EnvName.X]` and `(EnvName.X` in lambda/), the settings in the templates of
 * the synthesized example app (bin/example-app.ts, both stages) and of a stack that sets every
 * optional prop that adds a variable. A read no template sets fails the test unless it is listed
 * below with the reason it is not set by a construct.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { App, Duration, Size, Stack, Validations } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { buildExampleApp } from '../../bin/example-app.ts';
import { EnvName } from '../../contracts/env.ts';
import {
  AwsApiEgress,
  CapturedTable,
  CaptureMode,
  CdcSource,
  ChangeLog,
  ControlPlane,
  Reconciler,
  SourceDatabase,
  WarehouseConnection,
  WarehouseSink,
} from '../../lib/index.ts';
import { assemblyStacks, HANDLER_OF_SERVICE, templateFunctions } from '../../local/app-config.ts';
import { DATABASE_PEER, WAREHOUSE_PEER } from './helpers.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const HANDLERS = path.join(ROOT, 'lambda', 'handlers');
type Name = keyof typeof EnvName;

/** Reads no construct sets, each with the reason; `handlers` limits an entry to those handlers. */
const NOT_SET_BY_CONSTRUCTS: ReadonlyArray<{ env: Name; handlers?: string[]; reason: string }> = [
  { env: 'AWS_ENDPOINT', reason: 'an endpoint override for the local stand-ins and tests (lambda/adapters/aws-clients.ts); on AWS the SDK finds the service' },
  { env: 'AWS_REGION', reason: 'set by Lambda itself in every function' },
  { env: 'SOURCE_URL', reason: 'a postgres:// URL for local runs and tests; on AWS the source secret (SOURCE_SECRET_ARN) is read instead' },
  { env: 'WAREHOUSE_URL', reason: 'a postgres:// URL for local runs and tests; on AWS the warehouse secret (WAREHOUSE_SECRET_ARN) is read instead' },
  {
    env: 'SNAPSHOT_REPLICA_SECRET_ARN',
    handlers: ['task-lifecycle', 'heartbeat-writer', 'reconciler', 'slot-monitor'],
    reason: 'lambda/adapters/source-postgres.ts reads it in the read-replica connection only the snapshot worker opens',
  },
  {
    env: 'SOURCE_SECRET_ARN',
    handlers: ['task-lifecycle'],
    reason: 'the task lifecycle connects to the source with the secret its custom-resource event names, not the environment',
  },
];

let outdir: string;
let optionalOut: string;
/** Variables set on any function of each handler, over every synthesized template. */
const setBy = new Map<string, Set<string>>();

/** A stack whose props add every optional variable: pause budgets, TLS CA, read replica, instance, budget, polled table, merge thresholds, Redshift staging (and its loader function), rows per run. */
function optionalSettingsApp(dir: string): App {
  const app = new App({ outdir: dir });
  const stack = new Stack(app, 'Optional');
  Validations.of(stack).acknowledge({
    id: 'CloudFormation-Validate::W7001',
    reason: 'the unreferenced mapping is the Firehose CIDR-block table the Firehose L2 always adds',
  });
  const vpc = new ec2.Vpc(stack, 'Vpc', { maxAzs: 2, natGateways: 1 });
  const controlPlane = new ControlPlane(stack, 'Control', { pauseBudgets: { shop: Duration.hours(2) } });
  const changeLog = new ChangeLog(stack, 'Log', { retention: Duration.days(1), archiveRetention: Duration.days(30) });
  const secret = (id: string): secretsmanager.ISecret => secretsmanager.Secret.fromSecretNameV2(stack, id, `cdc/${id}`);
  const source = new CdcSource(stack, 'Shop', {
    controlPlane,
    changeLog,
    vpc,
    awsApiEgress: AwsApiEgress.natGateway(),
    slotWalBudget: Size.gibibytes(2),
    database: SourceDatabase.postgres({
      databaseName: 'shop',
      secret: secret('capture'),
      heartbeatSecret: secret('heartbeat'),
      caCertificatePem: '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n',
      readReplicaSecret: secret('replica'),
      instanceIdentifier: 'shop-db',
      snapshotBudget: { writeLatencyPercent: 20, cpuPercent: 10 },
      peer: DATABASE_PEER,
    }),
    tables: [CapturedTable.of('public.items'), CapturedTable.of('public.prices', { capture: CaptureMode.POLL, pollColumn: 'updated_at' })],
  });
  const warehouse = new WarehouseSink(stack, 'Warehouse', {
    controlPlane,
    changeLog,
    vpc,
    awsApiEgress: AwsApiEgress.natGateway(),
    sources: [source],
    connection: WarehouseConnection.redshift({ secret: secret('warehouse'), peer: WAREHOUSE_PEER }),
    mergeMaxRows: 1000,
    mergeMaxAge: Duration.minutes(5),
    mergeOnSchedule: true,
    // The Redshift loader function and the applier's staging variables (docs/warehouse-apply.md, "Redshift: the applier").
    redshiftStaging: { bucket: s3.Bucket.fromBucketName(stack, 'Staging', 'cdc-staging') },
  });
  new Reconciler(stack, 'Reconciler', {
    controlPlane,
    vpc,
    awsApiEgress: AwsApiEgress.natGateway(),
    sources: [source],
    sinks: [warehouse],
    rowsPerRun: 1000,
    tiers: [{ name: 'all', every: Duration.hours(1) }],
  });
  return app;
}

beforeAll(() => {
  outdir = fs.mkdtempSync(path.join(os.tmpdir(), 'cdc-handler-env-'));
  optionalOut = fs.mkdtempSync(path.join(os.tmpdir(), 'cdc-handler-env-optional-'));
  buildExampleApp(new App({ outdir })).app.synth();
  optionalSettingsApp(optionalOut).synth();
  for (const dir of [outdir, optionalOut]) {
    for (const s of assemblyStacks(dir)) {
      for (const f of templateFunctions(JSON.parse(fs.readFileSync(s.templateFile, 'utf8')))) {
        const names = setBy.get(f.handler) ?? new Set<string>();
        for (const k of Object.keys(f.env)) names.add(k);
        setBy.set(f.handler, names);
      }
    }
  }
}, 240_000);

afterAll(() => {
  for (const d of [outdir, optionalOut]) fs.rmSync(d, { recursive: true, force: true });
});

/** Handler files no function runs: their reads are checked in the handlers that import them. */
const LIBRARY_HANDLERS: Record<string, string> = {
  'warehouse-replay': 'the resume replay, imported and run by the warehouse and search appliers (their functions set what it reads)',
};

/** The files of lambda/ a handler imports, transitively; another handler's file is not entered (its reads are its own) unless no function runs it (`LIBRARY_HANDLERS`). */
function moduleClosure(handlerFile: string): string[] {
  const seen = new Set<string>();
  const visit = (file: string): void => {
    if (seen.has(file)) return;
    seen.add(file);
    for (const m of fs.readFileSync(file, 'utf8').matchAll(/from '(\.[^']+\.ts)'/g)) {
      const target = path.resolve(path.dirname(file), m[1]!);
      const inside = target.startsWith(path.join(ROOT, 'lambda') + path.sep);
      const otherHandler = path.dirname(target) === HANDLERS && target !== handlerFile && !(path.basename(target, '.ts') in LIBRARY_HANDLERS);
      if (inside && !otherHandler) visit(target);
    }
  };
  visit(handlerFile);
  return [...seen];
}

/** `EnvName.X` read in a file: indexed (`env[EnvName.X]`) or passed (`f(EnvName.X`), never an object key. */
function readsIn(file: string): Set<Name> {
  const names = new Set<Name>();
  for (const m of fs.readFileSync(file, 'utf8').matchAll(/(?:\[|\()EnvName\.([A-Z_0-9]+)(?!\]\s*:)/g)) names.add(m[1] as Name);
  return names;
}

const handlerFiles = fs.readdirSync(HANDLERS).filter((f) => f.endsWith('.ts'));

test('every handler is run by a function of the templates (or is a module other handlers run)', () => {
  const run = new Set(Object.values(HANDLER_OF_SERVICE));
  for (const f of handlerFiles) {
    const name = f.replace(/\.ts$/, '');
    expect(run.has(name) || name in LIBRARY_HANDLERS, `lambda/handlers/${f}: no construct's function runs it (local/app-config.ts HANDLER_OF_SERVICE)`).toBe(
      true,
    );
    if (run.has(name)) expect(setBy.has(name), `no function of the synthesized templates runs ${name}`).toBe(true);
  }
});

test('every variable a handler reads is set on a function that runs it, or listed with its reason', () => {
  const missing: string[] = [];
  let checked = 0;
  for (const f of handlerFiles) {
    const name = f.replace(/\.ts$/, '');
    if (name in LIBRARY_HANDLERS) continue;
    const set = setBy.get(name) ?? new Set<string>();
    for (const file of moduleClosure(path.join(HANDLERS, f))) {
      for (const env of readsIn(file)) {
        checked++;
        if (set.has(EnvName[env])) continue;
        if (NOT_SET_BY_CONSTRUCTS.some((x) => x.env === env && (!x.handlers || x.handlers.includes(name)))) continue;
        missing.push(`${name} reads ${EnvName[env]} (${path.relative(ROOT, file)}), which no construct sets on its functions`);
      }
    }
  }
  console.log(`handler-env: ${checked} reads checked over ${handlerFiles.length} handler files, ${NOT_SET_BY_CONSTRUCTS.length} listed exceptions`);
  expect(missing).toEqual([]);
});

test('every listed exception is still needed', () => {
  for (const x of NOT_SET_BY_CONSTRUCTS) {
    for (const h of x.handlers ?? [...setBy.keys()]) {
      if (!x.handlers && !handlerFiles.includes(`${h}.ts`)) continue;
      const reads = moduleClosure(path.join(HANDLERS, `${h}.ts`)).some((file) => readsIn(file).has(x.env));
      const set = setBy.get(h)?.has(EnvName[x.env]) ?? false;
      if (x.handlers) expect(reads && !set, `${x.env} for ${h}: the exception is stale (read: ${reads}, set: ${set})`).toBe(true);
    }
  }
});
