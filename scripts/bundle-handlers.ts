/**
 * Prebuilds the Lambda bundles the constructs deploy (`assets/<handler>/index.mjs`) with the local
 * esbuild. `cdk synth` builds missing or stale bundles by itself; this script builds them ahead
 * (CI, packaging) and reports each one. `--force` rebuilds fresh ones too.
 *
 *   npm run build:assets [-- --force]
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { assetDir, buildHandler, HANDLER_NAMES, isFresh } from '../lib/private/handler-code.ts';

const force = process.argv.includes('--force');
let failed = 0;
for (const name of HANDLER_NAMES) {
  const started = Date.now();
  try {
    const fresh = !force && isFresh(name);
    const dir = fresh ? assetDir(name) : buildHandler(name);
    const kb = Math.round(fs.statSync(path.join(dir, 'index.mjs')).size / 1024);
    console.log(`${name.padEnd(20)} ${fresh ? 'fresh' : 'built'}  ${String(kb).padStart(6)} KiB  ${Date.now() - started} ms`);
  } catch (e) {
    failed++;
    console.error(`${name.padEnd(20)} FAILED: ${(e as Error).message}`);
  }
}
process.exitCode = failed > 0 ? 1 : 0;
