/**
 * Handler bundling with the local esbuild, in a scratch project root (a handler, a module it
 * imports, the real node_modules linked in): the bundle builds, runs, is reused while fresh and
 * rebuilt when an input changes; a missing or broken handler fails naming its file. Every file of
 * lambda/handlers/ is a handler. In the published layout (no handler sources) the prebuilt bundle
 * is only read, and a missing one fails naming it.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { App, Stack } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { assetDir, buildHandler, ensureHandlerAsset, handlerCode, handlerNames, hasHandlerSources, isFresh } from '../../lib/private/handler-code.ts';

const projectRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
let root: string;

function write(rel: string, text: string): void {
  fs.mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
  fs.writeFileSync(path.join(root, rel), text);
}

beforeAll(() => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'cdc-bundle-'));
  fs.symlinkSync(path.join(projectRoot, 'node_modules'), path.join(root, 'node_modules'), 'dir');
  fs.writeFileSync(path.join(root, 'package.json'), JSON.stringify({ name: 'scratch', type: 'module' }));
  write('lambda/core/greeting.ts', 'export const greeting = (name: string): string => `hello ${name}`;\n');
  write(
    'lambda/handlers/sample.ts',
    [
      "import { createHash } from 'node:crypto';",
      "import { greeting } from '../core/greeting.ts';",
      'export const handler = async (event: { name: string }) => ({',
      '  text: greeting(event.name),',
      "  digest: createHash('sha256').update(event.name).digest('hex').slice(0, 8),",
      "  hasRequire: typeof require === 'function',",
      '});',
      '',
    ].join('\n'),
  );
});

afterAll(() => {
  fs.rmSync(root, { recursive: true, force: true });
});

describe('handler bundling', () => {
  test('bundles a handler into an ESM asset that runs', async () => {
    expect(isFresh('sample', root)).toBe(false);
    const dir = buildHandler('sample', root);
    expect(dir).toBe(assetDir('sample', root));
    expect(fs.readdirSync(dir)).toEqual(['index.mjs']);
    const code = fs.readFileSync(path.join(dir, 'index.mjs'), 'utf8');
    expect(code).toMatch(/export\s*\{/);
    const mod = (await import(pathToFileURL(path.join(dir, 'index.mjs')).href)) as { handler: (e: { name: string }) => Promise<Record<string, unknown>> };
    await expect(mod.handler({ name: 'cdc' })).resolves.toEqual({ text: 'hello cdc', digest: expect.stringMatching(/^[0-9a-f]{8}$/), hasRequire: true });
  });

  test('a fresh bundle is reused, a changed input rebuilds it', () => {
    ensureHandlerAsset('sample', root);
    expect(isFresh('sample', root)).toBe(true);
    const bundle = path.join(assetDir('sample', root), 'index.mjs');
    const before = fs.statSync(bundle).mtimeMs;
    ensureHandlerAsset('sample', root);
    expect(fs.statSync(bundle).mtimeMs).toBe(before);

    write('lambda/core/greeting.ts', 'export const greeting = (name: string): string => `hi ${name}`;\n');
    expect(isFresh('sample', root)).toBe(false);
    ensureHandlerAsset('sample', root);
    expect(isFresh('sample', root)).toBe(true);
    expect(fs.readFileSync(bundle, 'utf8')).toContain('hi ${name}');
    // The manifest lives outside the asset folder, so it never changes the asset hash.
    expect(fs.readdirSync(assetDir('sample', root))).toEqual(['index.mjs']);
  });

  test('the same sources give a byte-identical bundle', () => {
    const bundle = path.join(assetDir('sample', root), 'index.mjs');
    const first = fs.readFileSync(bundle);
    buildHandler('sample', root);
    expect(fs.readFileSync(bundle).equals(first)).toBe(true);
  });

  test('fails naming a missing handler', () => {
    expect(() => buildHandler('nope', root)).toThrow(/^lambda handler lambda\/handlers\/nope\.ts does not exist; the nope function cannot be bundled$/);
  });

  test('fails naming the file and line of a handler that does not build', () => {
    write('lambda/handlers/broken.ts', "import { missing } from './not-there.ts';\nexport const handler = missing;\n");
    expect(() => buildHandler('broken', root)).toThrow(
      /^bundling lambda handler lambda\/handlers\/broken\.ts failed: lambda\/handlers\/broken\.ts:1: Could not resolve/,
    );
  });

  test('every .ts file of lambda/handlers is a handler, and the repository has the four the constructs use', () => {
    expect(handlerNames(root)).toEqual(['broken', 'sample']);
    expect(handlerNames()).toEqual(expect.arrayContaining(['task-lifecycle', 'heartbeat-writer', 'normalizer', 'warehouse-applier']));
  });
});

describe('published layout (no handler sources beside the library)', () => {
  let pkg: string;
  beforeAll(() => {
    pkg = fs.mkdtempSync(path.join(os.tmpdir(), 'cdc-prebuilt-'));
    fs.mkdirSync(path.join(pkg, 'assets', 'sample'), { recursive: true });
    fs.writeFileSync(path.join(pkg, 'assets', 'sample', 'index.mjs'), 'export const handler = async () => 1;\n');
  });
  afterAll(() => fs.rmSync(pkg, { recursive: true, force: true }));

  test('loads the prebuilt bundle as it is: no build, no manifest, nothing written', () => {
    expect(hasHandlerSources(pkg)).toBe(false);
    const before = fs.statSync(path.join(pkg, 'assets', 'sample', 'index.mjs')).mtimeMs;
    const stack = new Stack(new App(), 'S');
    const code = handlerCode('sample', pkg);
    new lambda.Function(stack, 'Fn', { code, handler: 'index.handler', runtime: lambda.Runtime.NODEJS_24_X });
    expect(fs.statSync(path.join(pkg, 'assets', 'sample', 'index.mjs')).mtimeMs).toBe(before);
    expect(fs.readdirSync(pkg)).toEqual(['assets']);
    expect(fs.readdirSync(path.join(pkg, 'assets'))).toEqual(['sample']);
  });

  test('the asset hash depends on the bundle, not on where the package is installed', () => {
    const elsewhere = fs.mkdtempSync(path.join(os.tmpdir(), 'cdc-prebuilt-elsewhere-'));
    try {
      fs.cpSync(path.join(pkg, 'assets'), path.join(elsewhere, 'assets'), { recursive: true });
      const hashOf = (root: string): string => {
        const stack = new Stack(new App(), 'S');
        const code = handlerCode('sample', root);
        new lambda.Function(stack, 'Fn', { code, handler: 'index.handler', runtime: lambda.Runtime.NODEJS_24_X });
        const bound = code.bind(stack);
        return bound.s3Location!.objectKey;
      };
      expect(hashOf(elsewhere)).toBe(hashOf(pkg));
    } finally {
      fs.rmSync(elsewhere, { recursive: true, force: true });
    }
  });

  test('fails naming a prebuilt handler that is missing', () => {
    expect(() => handlerCode('nope', pkg)).toThrow(
      /^the prebuilt lambda handler nope is missing \(.*assets\/nope\/index\.mjs does not exist\); the cdc-platform package is incomplete: reinstall it$/,
    );
  });
});
