import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 180_000,
    // Integration tests start real PostgreSQL, DynamoDB Local and kinesalite; two cores, so keep it to two workers.
    maxWorkers: 2,
    pool: 'forks',
  },
});
