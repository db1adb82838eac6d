/**
 * Vitest global setup: every test run writes its temporary folders (CDK cloud assemblies, embedded
 * PostgreSQL data folders, state folders) under one root of its own, removed when the run ends, so
 * that nothing a run leaves behind accumulates in the machine's temp folder. A cloud assembly with its
 * bundled handlers is 10–16 MB and the construct tests synthesize hundreds; a run used to leave
 * several gigabytes, and enough runs filled the disk (every test then failed at once).
 *
 * The root is world-writable with the sticky bit, like /tmp itself: embedded PostgreSQL runs as
 * the `postgres` user when the tests run as root, and must reach its data folder. Its binaries are
 * copied once, before, into the machine's temp folder (where `cdc local` keeps them too), and each
 * test file's folder links to them (test/helpers/temp-per-file.ts) instead of copying them again.
 * `CDC_TEST_RUN_ROOT` names the root for the files that share a worker (a project without
 * isolation, vitest.config.mts): each of them sets TMPDIR to its own folder, removed when it ends.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { postgresBinaries } from '../../local/postgres.ts';

export default async function setup(): Promise<() => void> {
  const { bin } = await postgresBinaries();
  const root = mkdtempSync(path.join(os.tmpdir(), 'cdc-test-run-'));
  chmodSync(root, 0o1777);
  // The worker processes start after this and inherit all three; os.tmpdir() reads TMPDIR on every call.
  process.env.TMPDIR = root;
  process.env.CDC_TEST_RUN_ROOT = root;
  process.env.CDC_TEST_POSTGRES_BINARIES = path.dirname(bin);
  return () => rmSync(root, { recursive: true, force: true });
}
