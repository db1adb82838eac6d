import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 180_000,
    // Integration tests start real PostgreSQL, DynamoDB Local and kinesalite; two cores, so keep it to two workers.
    maxWorkers: 2,
    pool: 'forks',
    // Each run and each test file write temporary folders under their own root, removed when they end.
    globalSetup: ['test/helpers/temp-root.ts'],
    setupFiles: ['test/helpers/temp-per-file.ts'],
  },
});
