/**
 * Prebuilds the Lambda bundles the constructs deploy (`assets/<handler>/index.mjs`, one per file
 * of `lambda/handlers/`) with the local esbuild. `cdk synth` in the repository builds missing or
 * stale bundles by itself; this script builds them ahead (CI, packaging) and reports each one.
 * `--force` rebuilds fresh ones too.
 *
 *   npm run build:assets [-- --force]
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { assetDir, BUNDLE_FILE, buildHandler, handlerNames, isFresh } from '../lib/private/handler-code.ts';

/** Builds (or reuses) every handler's bundle; returns the names that failed. */
export function bundleHandlers(options: { force?: boolean; log?: (line: string) => void } = {}): { built: string[]; failed: string[] } {
  const log = options.log ?? ((line: string) => console.log(line));
  const built: string[] = [];
  const failed: string[] = [];
  for (const name of handlerNames()) {
    const started = Date.now();
    try {
      const fresh = !options.force && isFresh(name);
      const dir = fresh ? assetDir(name) : buildHandler(name);
      const kb = Math.round(fs.statSync(path.join(dir, BUNDLE_FILE)).size / 1024);
      log(`${name.padEnd(20)} ${fresh ? 'fresh' : 'built'}  ${String(kb).padStart(6)} KiB  ${Date.now() - started} ms`);
      built.push(name);
    } catch (e) {
      failed.push(name);
      console.error(`${name.padEnd(20)} FAILED: ${(e as Error).message}`);
    }
  }
  return { built, failed };
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(import.meta.filename ?? '')) {
  const { failed } = bundleHandlers({ force: process.argv.includes('--force') });
  process.exitCode = failed.length > 0 ? 1 : 0;
}
