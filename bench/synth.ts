/**
 * Benchmark 4, synth at scale: a generated app of 9 PostgreSQL sources × 20 captured tables and
 * 2 warehouse sinks (Redshift and PostgreSQL), built with the public constructs (`lib/index.ts`).
 *
 * Measured: time to build the construct tree and to synthesize (`app.synth()`, in process), the
 * template sizes, and the resources per stack against CloudFormation's limit of 500. Two layouts:
 * everything in one stack, and one stack per source plus a shared and a sinks stack. Reference,
 * measured in the same run: the example app (`bin/example-app.ts`, 2 sources, 5 tables) synthesized
 * the same way. With `--cli`, `npx cdk synth` of the generated app is timed too (the CLI adds a
 * process start, TypeScript loading and the asset manifest; about 10 s more).
 *
 * Handler bundles (`assets/`) are built when missing or stale, once per process; the benchmark
 * reports whether they were fresh, and builds them before timing so both apps are timed warm.
 *
 *     npm run bench:synth [-- --sources 9 --tables 20 --cli]
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { App, Duration, Stack, Validations } from 'aws-cdk-lib';
import type { CloudFormationStackArtifact } from 'aws-cdk-lib/cx-api';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { buildExampleApp } from '../bin/example-app.ts';
import { CapturedTable, CdcSource, ChangeLog, ControlPlane, DmsServiceRoles, SourceDatabase, WarehouseConnection, WarehouseSink } from '../lib/index.ts';
import { handlerNames, isFresh } from '../lib/private/handler-code.ts';
import { argValue, runIfMain, median, numberArg, rateRow, Recorder, timeRow, type BenchResult } from './lib/report.ts';

/** Where the synthetic sources and warehouses are (docs/deploy.md, "Network"): address ranges of the VPC. */
const DATABASE_PEER = ec2.Peer.ipv4('10.0.64.0/24');
const WAREHOUSE_PEER = ec2.Peer.ipv4('10.0.65.0/24');

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const say = (text: string): void => void process.stdout.write(`[synth] ${text}\n`);

/** CloudFormation's limits that a large app can reach. */
const MAX_RESOURCES = 500;
const MAX_TEMPLATE_BYTES_S3 = 1_000_000;

export interface ScaleOptions {
  sources: number;
  tables: number;
  /** `single`: one stack; `split`: a shared stack, one stack per source, a sinks stack. */
  layout: 'single' | 'split';
}

/** Builds the generated app into `app`. */
export function buildScaleApp(app: App, o: ScaleOptions): Stack[] {
  const ack = (s: Stack): void =>
    Validations.of(s).acknowledge({
      id: 'CloudFormation-Validate::W7001',
      reason: 'the unreferenced mapping is the Firehose CIDR-block table the Firehose L2 always adds',
    });
  const shared = new Stack(app, o.layout === 'single' ? 'CdcScale' : 'CdcScaleShared');
  ack(shared);
  const vpc = new ec2.Vpc(shared, 'Vpc', { maxAzs: 2, natGateways: 1 });
  const controlPlane = new ControlPlane(shared, 'Control');
  const changeLog = new ChangeLog(shared, 'Log', { retention: Duration.days(7), archiveRetention: Duration.days(395) });
  const roles = new DmsServiceRoles(shared, 'DmsServiceRoles');
  const stacks = [shared];
  const sources: CdcSource[] = [];
  for (let s = 0; s < o.sources; s++) {
    let scope: Stack = shared;
    if (o.layout === 'split') {
      scope = new Stack(app, `CdcScaleSource${s}`);
      ack(scope);
      stacks.push(scope);
    }
    const tables: CapturedTable[] = [];
    for (let t = 0; t < o.tables; t++) {
      tables.push(t % 5 === 0 ? CapturedTable.of(`public.table_${t}`, { mask: ['email'], exclude: ['ssn'] }) : CapturedTable.of(`public.table_${t}`));
    }
    const source = new CdcSource(scope, `Source${s}`, {
      controlPlane,
      changeLog,
      vpc,
      database: SourceDatabase.postgres({
        databaseName: `db${s}`,
        secret: secretsmanager.Secret.fromSecretNameV2(scope, `Source${s}Secret`, `cdc/source${s}/capture`),
        heartbeatSecret: secretsmanager.Secret.fromSecretNameV2(scope, `Source${s}HeartbeatSecret`, `cdc/source${s}/heartbeat`),
        peer: DATABASE_PEER,
      }),
      tables,
    });
    source.node.addDependency(roles);
    sources.push(source);
  }
  let sinkScope: Stack = shared;
  if (o.layout === 'split') {
    sinkScope = new Stack(app, 'CdcScaleSinks');
    ack(sinkScope);
    stacks.push(sinkScope);
  }
  new WarehouseSink(sinkScope, 'Redshift', {
    controlPlane,
    changeLog,
    sources,
    vpc,
    connection: WarehouseConnection.redshift({
      secret: secretsmanager.Secret.fromSecretNameV2(sinkScope, 'RedshiftSecret', 'cdc/warehouse/redshift'),
      peer: WAREHOUSE_PEER,
    }),
  });
  new WarehouseSink(sinkScope, 'Postgres', {
    controlPlane,
    changeLog,
    sources,
    vpc,
    connection: WarehouseConnection.postgres({
      secret: secretsmanager.Secret.fromSecretNameV2(sinkScope, 'PostgresSecret', 'cdc/warehouse/postgres'),
      peer: WAREHOUSE_PEER,
    }),
  });
  return stacks;
}

interface StackFigures {
  stack: string;
  resources: number;
  templateBytes: number;
  byType: Record<string, number>;
}

function figuresOf(artifact: CloudFormationStackArtifact): StackFigures {
  const template = artifact.template as { Resources?: Record<string, { Type: string }> };
  const resources = Object.values(template.Resources ?? {});
  const byType: Record<string, number> = {};
  for (const r of resources) byType[r.Type] = (byType[r.Type] ?? 0) + 1;
  return { stack: artifact.stackName, resources: resources.length, templateBytes: statSync(artifact.templateFullPath).size, byType };
}

interface SynthFigures {
  buildMs: number;
  synthMs: number;
  stacks: StackFigures[];
}

/** Builds and synthesizes an app in a fresh output folder; returns times and per-stack figures. */
function timeSynth(build: (app: App) => void): SynthFigures {
  const outdir = mkdtempSync(path.join(os.tmpdir(), 'cdc-bench-synth-'));
  try {
    const t0 = performance.now();
    const app = new App({ outdir });
    build(app);
    const t1 = performance.now();
    const assembly = app.synth();
    const t2 = performance.now();
    return { buildMs: t1 - t0, synthMs: t2 - t1, stacks: assembly.stacks.map(figuresOf) };
  } finally {
    rmSync(outdir, { recursive: true, force: true });
  }
}

/** `npx cdk synth` of the generated app (the real CLI); seconds. */
function cliSynth(o: ScaleOptions): number {
  const outdir = mkdtempSync(path.join(os.tmpdir(), 'cdc-bench-cdk-'));
  try {
    const t0 = performance.now();
    execFileSync(
      'npx',
      [
        'cdk',
        'synth',
        '-q',
        '--app',
        `npx tsx ${path.join('bench', 'synth.ts')} --app-only --sources ${o.sources} --tables ${o.tables} --layout ${o.layout}`,
        '--output',
        outdir,
      ],
      {
        cwd: ROOT,
        stdio: ['ignore', 'ignore', 'pipe'],
        env: { ...process.env, CDK_DISABLE_VERSION_CHECK: '1' },
      },
    );
    return (performance.now() - t0) / 1000;
  } finally {
    rmSync(outdir, { recursive: true, force: true });
  }
}

export async function runSynthBench(): Promise<BenchResult> {
  const o = { sources: numberArg('sources', 9), tables: numberArg('tables', 20) };
  const runs = numberArg('runs', 3);
  const withCli = argValue('cli') !== undefined;
  const rec = new Recorder('synth', { ...o, sinks: 2, runs, cli: withCli });
  const stale = handlerNames().filter((n) => !isFresh(n));
  rec.details.bundlesRebuilt = stale;
  // Warm-up: builds stale handler bundles and runs each app once (module loading, JIT). The
  // first synth of the scale app in this process is what a one-off `cdk synth` pays.
  const warm = timeSynth((app) => buildExampleApp(app));
  const cold = timeSynth((app) => buildScaleApp(app, { ...o, layout: 'single' }));
  say(
    `warm-up: example app ${Math.round(warm.buildMs + warm.synthMs)} ms (bundles rebuilt: ${stale.length ? stale.join(', ') : 'none'}), scale app ${Math.round(cold.buildMs + cold.synthMs)} ms`,
  );

  const example: SynthFigures[] = [];
  const single: SynthFigures[] = [];
  const split: SynthFigures[] = [];
  for (let i = 0; i < runs; i++) {
    example.push(timeSynth((app) => buildExampleApp(app)));
    single.push(timeSynth((app) => buildScaleApp(app, { ...o, layout: 'single' })));
    split.push(timeSynth((app) => buildScaleApp(app, { ...o, layout: 'split' })));
    say(
      `run ${i + 1}: example ${Math.round(example[i]!.buildMs + example[i]!.synthMs)} ms, scale single ${Math.round(single[i]!.buildMs + single[i]!.synthMs)} ms, scale split ${Math.round(split[i]!.buildMs + split[i]!.synthMs)} ms`,
    );
  }
  const total = (f: SynthFigures[]): number => median(f.map((x) => x.buildMs + x.synthMs));
  const ex = total(example);
  const tables = o.sources * o.tables;
  rec.add(
    timeRow(`in-process build + synth, ${o.sources} sources × ${o.tables} tables + 2 sinks, one stack`, total(single) / 1000, 's', 30, '30 s target', {
      target: '< 30 s',
      met: total(single) < 30_000,
    }),
  );
  rec.add(
    timeRow(`in-process build + synth, same app in ${split[0]!.stacks.length} stacks`, total(split) / 1000, 's', 30, '30 s target', {
      target: '< 30 s',
      met: total(split) < 30_000,
    }),
  );
  rec.add(timeRow('in-process build + synth, the example app (2 sources, 5 tables)', ex / 1000, 's', null, null));
  rec.add(
    timeRow('first build + synth of the scale app in the process (after the example app)', (cold.buildMs + cold.synthMs) / 1000, 's', 30, '30 s target', {
      target: '< 30 s',
      met: cold.buildMs + cold.synthMs < 30_000,
    }),
  );
  rec.add(rateRow(`synth time per table, scale app vs example app`, total(single) / tables, 'ms/table', ex / 5, 'example app ms/table'));
  const s = single[0]!.stacks[0]!;
  rec.add(
    rateRow('resources in the single stack', s.resources, 'resources', MAX_RESOURCES, 'CloudFormation limit', {
      target: '≤ 500',
      met: s.resources <= MAX_RESOURCES,
    }),
  );
  rec.add(
    rateRow('template size of the single stack', s.templateBytes / 1000, 'kB', MAX_TEMPLATE_BYTES_S3 / 1000, '1 MB limit (via S3)', {
      target: '≤ 1 MB',
      met: s.templateBytes <= MAX_TEMPLATE_BYTES_S3,
    }),
  );
  const largest = split[0]!.stacks.reduce((a, b) => (b.resources > a.resources ? b : a));
  rec.add(
    rateRow(`largest stack of the split layout (${largest.stack})`, largest.resources, 'resources', MAX_RESOURCES, 'CloudFormation limit', {
      target: '≤ 500',
      met: largest.resources <= MAX_RESOURCES,
    }),
  );
  const perSource = split[0]!.stacks.find((x) => x.stack === 'CdcScaleSource0');
  if (perSource) rec.add(rateRow('resources per source (20 tables), split layout', perSource.resources, 'resources', MAX_RESOURCES, 'CloudFormation limit'));
  const exStack = example[0]!.stacks[0]!;
  rec.add(rateRow('resources in the example app stack', exStack.resources, 'resources', MAX_RESOURCES, 'CloudFormation limit'));
  if (withCli) {
    const cli = cliSynth({ ...o, layout: 'single' });
    say(`npx cdk synth of the scale app (one stack): ${cli.toFixed(1)} s`);
    rec.add(timeRow('npx cdk synth (CLI), scale app, one stack', cli, 's', 30, '30 s target', { target: '< 30 s', met: cli < 30 }));
  }
  rec.details.warmUp = { exampleMs: Math.round(warm.buildMs + warm.synthMs), scaleMs: Math.round(cold.buildMs + cold.synthMs) };
  rec.details.single = single.map((f) => ({ buildMs: Math.round(f.buildMs), synthMs: Math.round(f.synthMs) }));
  rec.details.split = split.map((f) => ({ buildMs: Math.round(f.buildMs), synthMs: Math.round(f.synthMs) }));
  rec.details.example = example.map((f) => ({ buildMs: Math.round(f.buildMs), synthMs: Math.round(f.synthMs) }));
  rec.details.stacks = { single: single[0]!.stacks, split: split[0]!.stacks.map(({ byType: _byType, ...rest }) => rest), example: example[0]!.stacks };
  return rec.finish();
}

if (argValue('app-only') !== undefined) {
  // Used by `npx cdk synth --app ...` (the CLI passes the output folder in the environment).
  const app = new App();
  const layout = argValue('layout') === 'split' ? 'split' : 'single';
  buildScaleApp(app, { sources: numberArg('sources', 9), tables: numberArg('tables', 20), layout });
  app.synth();
} else runIfMain(import.meta.url, runSynthBench);
