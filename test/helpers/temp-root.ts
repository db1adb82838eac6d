/**
 * Vitest global setup: every test run writes its temporary folders (CDK cloud assemblies, embedded
 * PostgreSQL data folders, state folders) under one root of its own, removed when the run ends, so
 * that nothing a run leaves behind accumulates in the machine's temp folder. A cloud assembly with its
 * bundled handlers is 10–16 MB and the construct tests synthesize hundreds; a run used to leave
 * several gigabytes, and enough runs filled the disk (every test then failed at once).
 *
 * The root is world-writable with the sticky bit, like /tmp itself: embedded PostgreSQL runs as
 * the `postgres` user when the tests run as root, and must reach its data folder.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export default function setup(): () => void {
  const root = mkdtempSync(path.join(os.tmpdir(), 'cdc-test-run-'));
  chmodSync(root, 0o1777);
  // The worker processes start after this and inherit it; os.tmpdir() reads it on every call.
  process.env.TMPDIR = root;
  return () => rmSync(root, { recursive: true, force: true });
}
