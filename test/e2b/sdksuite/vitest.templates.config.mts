// E2B's template tests (tests/template): Template.build and its helpers,
// against dsec's template builds (run.sh with SUITE=templates).
import { defineConfig } from 'vitest/config'
export default defineConfig({
  test: {
    include: ['tests/template/**/*.test.ts'],
    isolate: true, globals: false, testTimeout: 120_000, environment: 'node', bail: 0,
    setupFiles: ['tests/globalFetchFallback.setup.ts'],
    deps: { interopDefault: true },
    env: { ...(process.env as Record<string, string>) },
  },
})
