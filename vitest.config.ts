import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const packages = fileURLToPath(new URL('./packages/', import.meta.url));

export default defineConfig({
  resolve: {
    // Tests run the packages' TypeScript sources; spawned brokers and workers run the built packages.
    alias: [
      { find: /^tributary-(protocol|client|broker)\/(.+)\.js$/, replacement: `${packages}$1/src/$2.ts` },
      { find: /^tributary-(protocol|client)$/, replacement: `${packages}$1/src/index.ts` },
    ],
  },
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Two cores: integration files each start real broker processes.
    maxWorkers: 2,
  },
});
