// The unit project of E2B's own vitest config, without the browser,
// template-build and runtime projects.
import { defineConfig } from 'vitest/config'
export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    exclude: ['tests/runtimes/**', 'tests/template/**', 'tests/connectionConfig.test.ts'],
    isolate: true, globals: false, testTimeout: 30_000, environment: 'node', bail: 0,
    setupFiles: ['tests/globalFetchFallback.setup.ts'],
    deps: { interopDefault: true },
    env: { ...(process.env as Record<string, string>) },
  },
})
