/**
 * Lambda code for the platform's handlers: prebuilt assets loaded with `Code.fromAsset`.
 *
 * `lib/` never imports runtime code: a handler is known here only by its name, the file name of
 * `lambda/handlers/<name>.ts`. Every file in that folder is a handler; nothing lists them by hand.
 *
 * Two layouts, told apart by whether the handler sources sit beside this library:
 * - **Published package** (`dist/lib/private/handler-code.js`, no `lambda/` beside `dist/`): the
 *   bundles were built when the package was packed and ship in `dist/assets/<name>/index.mjs`.
 *   Synth only reads them; it never runs esbuild and never writes into `node_modules`. The asset
 *   hash is the hash of the bundle's bytes, so it does not depend on where the package is installed.
 * - **Repository** (`lib/private/handler-code.ts`, `lambda/handlers/` present): the bundle lives in
 *   `assets/<name>/index.mjs` and is (re)built with the local esbuild when missing or stale, so
 *   `cdk synth` and the tests on a fresh clone work without a build step; `npm run build:assets`
 *   prebuilds every handler. Never Docker.
 *
 * Bundle choices:
 * - ESM (`index.mjs`, `handler: index.handler`), Node 20 syntax target, one file, not minified
 *   (readable stack traces), no source maps (keeps the asset byte-identical across machines).
 * - Every runtime package (`@aws-sdk/*`, Powertools, pg) is bundled, not taken from the Lambda
 *   runtime or installed into the user's app: the versions pinned in package.json are the ones the
 *   tests ran against, so the code under test is the code that deploys. The cost is a larger bundle
 *   (a few hundred kB per client) and a slightly slower cold start.
 * - CommonJS dependencies (pg) get a `require` through `createRequire` in a banner.
 * - `pg-native` (an optional native binding pg never needs here) and `cloudflare:sockets`
 *   (pg's Cloudflare Workers path) are left external: neither is reachable on Lambda.
 *
 * Staleness (repository only): a manifest beside the assets (`assets/.manifest/<name>.json`,
 * outside the asset folder so it does not change the asset hash) records every input file with its
 * size and modification time; any difference rebuilds. Builds write to a temporary file and rename
 * it into place, so two processes synthesizing at once never see a half-written bundle.
 */
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as lambda from 'aws-cdk-lib/aws-lambda';

/** A handler's name: the file name of `lambda/handlers/<name>.ts` without `.ts` (internal, not part of the construct API). */
export type HandlerName = string;

/** The file every asset folder holds. */
export const BUNDLE_FILE = 'index.mjs';

/**
 * The folder of this module. The published build is CommonJS (`__dirname`, which vitest also
 * provides); under an ESM loader such as tsx, the V8 call site names the module's URL.
 */
function moduleDir(): string {
  if (typeof __dirname === 'string') return __dirname;
  const original = Error.prepareStackTrace;
  let file: string | undefined;
  try {
    Error.prepareStackTrace = (_error, frames) => frames;
    const frames = new Error().stack as unknown as NodeJS.CallSite[];
    file = frames[0]?.getFileName() ?? undefined;
  } finally {
    Error.prepareStackTrace = original;
  }
  if (!file) throw new Error('cannot tell where the cdc-platform library is loaded from (no __dirname and no call-site file name)');
  return path.dirname(file.startsWith('file:') ? fileURLToPath(file) : file);
}

/** The repository root, or `dist/` of the published package (`lib/private` is two folders down in both). */
export const PROJECT_ROOT = path.resolve(moduleDir(), '..', '..');

interface Manifest {
  entry: string;
  inputs: Record<string, { size: number; mtimeMs: number }>;
}

/** Where the bundle of `name` lives. */
export function assetDir(name: string, root = PROJECT_ROOT): string {
  return path.join(root, 'assets', name);
}

function manifestPath(name: string, root: string): string {
  return path.join(root, 'assets', '.manifest', `${name}.json`);
}

function entryPath(name: string, root: string): string {
  return path.join(root, 'lambda', 'handlers', `${name}.ts`);
}

/** True when the handler sources are beside the library (the repository), false in the published package. */
export function hasHandlerSources(root = PROJECT_ROOT): boolean {
  return fs.existsSync(path.join(root, 'lambda', 'handlers'));
}

/** Every handler: the `.ts` files of `lambda/handlers/`, sorted (a new file there is a new handler). */
export function handlerNames(root = PROJECT_ROOT): string[] {
  const dir = path.join(root, 'lambda', 'handlers');
  return fs
    .readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts') && !e.name.endsWith('.d.ts'))
    .map((e) => e.name.slice(0, -'.ts'.length))
    .sort();
}

/** True when the bundle exists and none of the files it was built from changed. */
export function isFresh(name: string, root = PROJECT_ROOT): boolean {
  const bundle = path.join(assetDir(name, root), BUNDLE_FILE);
  if (!fs.existsSync(bundle)) return false;
  let manifest: Manifest;
  try {
    manifest = JSON.parse(fs.readFileSync(manifestPath(name, root), 'utf8')) as Manifest;
  } catch {
    return false;
  }
  if (manifest.entry !== path.relative(root, entryPath(name, root))) return false;
  for (const [rel, seen] of Object.entries(manifest.inputs)) {
    let st: fs.Stats;
    try {
      st = fs.statSync(path.join(root, rel));
    } catch {
      return false;
    }
    if (st.size !== seen.size || st.mtimeMs !== seen.mtimeMs) return false;
  }
  return true;
}

type EsbuildModule = typeof import('esbuild');

/** esbuild is loaded only when a bundle has to be built (a prebuilt package does not need it). */
function loadEsbuild(root: string): EsbuildModule {
  const req = createRequire(path.join(root, 'package.json'));
  try {
    return req('esbuild') as EsbuildModule;
  } catch (e) {
    throw new Error(
      `bundling lambda handlers needs the esbuild package (a devDependency); install it or prebuild with \`npm run build:assets\`: ${(e as Error).message}`,
    );
  }
}

function writeAtomically(file: string, content: string | Uint8Array): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
  fs.writeFileSync(tmp, content);
  fs.renameSync(tmp, file);
}

/**
 * Bundles `lambda/handlers/<name>.ts` into `assets/<name>/index.mjs` with the local esbuild and
 * records its inputs. Throws naming the handler when the entry is missing or does not build.
 */
export function buildHandler(name: string, root = PROJECT_ROOT): string {
  const entry = entryPath(name, root);
  if (!fs.existsSync(entry)) {
    throw new Error(`lambda handler ${path.relative(root, entry)} does not exist; the ${name} function cannot be bundled`);
  }
  const esbuild = loadEsbuild(root);
  let result: import('esbuild').BuildResult<{ write: false; metafile: true }>;
  try {
    result = esbuild.buildSync({
      entryPoints: [entry],
      absWorkingDir: root,
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: 'node20',
      mainFields: ['module', 'main'],
      outfile: path.join(assetDir(name, root), BUNDLE_FILE),
      write: false,
      metafile: true,
      minify: false,
      sourcemap: false,
      legalComments: 'none',
      logLevel: 'silent',
      external: ['pg-native', 'cloudflare:sockets'],
      banner: { js: "import { createRequire as __cdcCreateRequire } from 'node:module';\nconst require = __cdcCreateRequire(import.meta.url);" },
    });
  } catch (e) {
    const failure = e as { errors?: Array<{ text: string; location?: { file: string; line: number } | null }> };
    const detail = failure.errors?.map((x) => (x.location ? `${x.location.file}:${x.location.line}: ${x.text}` : x.text)).join('; ');
    throw new Error(`bundling lambda handler ${path.relative(root, entry)} failed: ${detail ?? (e as Error).message}`);
  }
  const out = result.outputFiles.find((f) => f.path.endsWith(BUNDLE_FILE));
  if (!out) throw new Error(`bundling lambda handler ${path.relative(root, entry)} produced no ${BUNDLE_FILE}`);
  writeAtomically(out.path, out.contents);
  const inputs: Manifest['inputs'] = {};
  for (const rel of Object.keys(result.metafile.inputs)) {
    const abs = path.resolve(root, rel);
    if (!fs.existsSync(abs)) continue;
    const st = fs.statSync(abs);
    inputs[path.relative(root, abs)] = { size: st.size, mtimeMs: st.mtimeMs };
  }
  const manifest: Manifest = { entry: path.relative(root, entry), inputs };
  writeAtomically(manifestPath(name, root), JSON.stringify(manifest, null, 1));
  return assetDir(name, root);
}

/** The asset folder of `name`, built first when missing or stale. */
export function ensureHandlerAsset(name: string, root = PROJECT_ROOT): string {
  return isFresh(name, root) ? assetDir(name, root) : buildHandler(name, root);
}

/**
 * The asset folder of `name` in the published package: prebuilt, only read. Throws naming the
 * handler and the folder when the bundle is not there (an incomplete package).
 */
export function prebuiltHandlerAsset(name: string, root = PROJECT_ROOT): string {
  const dir = assetDir(name, root);
  if (!fs.existsSync(path.join(dir, BUNDLE_FILE))) {
    throw new Error(
      `the prebuilt lambda handler ${name} is missing (${path.join(dir, BUNDLE_FILE)} does not exist); the cdc-platform package is incomplete: reinstall it`,
    );
  }
  return dir;
}

/** Asset folders already checked in this process (a synth checks each handler once). */
const checked = new Map<string, string>();

/**
 * `lambda.Code` for one of the platform's handlers (handler export: `index.handler`): the prebuilt
 * bundle in the published package, or the repository's bundle, rebuilt first when stale.
 */
export function handlerCode(name: HandlerName, root = PROJECT_ROOT): lambda.Code {
  const key = `${root}\0${name}`;
  let dir = checked.get(key);
  if (dir === undefined) {
    dir = hasHandlerSources(root) ? ensureHandlerAsset(name, root) : prebuiltHandlerAsset(name, root);
    checked.set(key, dir);
  }
  return lambda.Code.fromAsset(dir);
}

/** The `handler` setting matching `handlerCode`. */
export const HANDLER_EXPORT = 'index.handler';
