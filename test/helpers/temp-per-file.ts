/**
 * Vitest setup file: each test file gets its own temporary folder under the run's root
 * (test/helpers/temp-root.ts), removed once the file's own `afterAll` hooks have stopped what it
 * started (vitest runs `afterAll` hooks in reverse order of registration, and this one is registered
 * first). The construct tests' cloud assemblies are the bulk: without this a run holds every one of
 * them on disk until it ends. The embedded PostgreSQL binaries the run copied once are linked in,
 * where `startPostgres` looks for them (local/postgres.ts, `postgresBinaries`).
 */
import { chmodSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll } from 'vitest';

// Under the run's root, not os.tmpdir(): in a worker that runs several files (no isolation), TMPDIR
// is still the previous file's folder, removed when that file ended.
const folder = mkdtempSync(path.join(process.env.CDC_TEST_RUN_ROOT ?? os.tmpdir(), 'file-'));
chmodSync(folder, 0o1777);
const binaries = process.env.CDC_TEST_POSTGRES_BINARIES;
if (binaries) symlinkSync(binaries, path.join(folder, path.basename(binaries)));
process.env.TMPDIR = folder;

afterAll(() => {
  rmSync(folder, { recursive: true, force: true });
});
