import { defineConfig } from 'vitest/config';

/** What every test file gets, isolated or not. */
const COMMON = {
  testTimeout: 120_000,
  hookTimeout: 180_000,
  pool: 'forks' as const,
  // Each test file writes its temporary folders under its own folder, removed when it ends.
  setupFiles: ['test/helpers/temp-per-file.ts'],
};

/**
 * The construct tests only synthesize (no processes, no ports, no environment variables set) and
 * share nothing but aws-cdk-lib's and lib/'s modules, whose loading and first synth cost a file
 * ~2.7 s of CPU in a fresh process: they run without isolation, so a worker loads them once.
 * Every other file runs isolated, in a process of its own.
 */
const SHARED = ['test/constructs/**/*.test.ts'];

export default defineConfig({
  test: {
    // Integration tests start real PostgreSQL, DynamoDB Local and kinesalite; two cores, so keep it to two workers.
    maxWorkers: 2,
    pool: 'forks',
    // Each run writes its temporary folders under a root of its own, removed when it ends (once per run, not per project).
    globalSetup: ['test/helpers/temp-root.ts'],
    projects: [
      { test: { ...COMMON, name: 'isolated', include: ['test/**/*.test.ts'], exclude: SHARED } },
      { test: { ...COMMON, name: 'constructs', include: SHARED, isolate: false } },
    ],
  },
});
