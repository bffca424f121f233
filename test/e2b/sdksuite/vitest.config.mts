// The unit project of E2B's own vitest config, without the browser,
// template-build and runtime projects, and without the two files whose
// sandboxes reach public hosts (curl to 1.1.1.1, 8.8.8.8, gstatic.com):
// DSEC_SDKSUITE_INTERNET=1 runs them too, on a machine allowed to.
import { defineConfig } from 'vitest/config'
export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    exclude: ['tests/runtimes/**', 'tests/template/**', 'tests/connectionConfig.test.ts',
      ...(process.env.DSEC_SDKSUITE_INTERNET === '1' ? [] : ['tests/sandbox/internetAccess.test.ts', 'tests/sandbox/network.test.ts'])],
    isolate: true, globals: false, testTimeout: 30_000, environment: 'node', bail: 0,
    setupFiles: ['tests/globalFetchFallback.setup.ts'],
    deps: { interopDefault: true },
    env: { ...(process.env as Record<string, string>) },
  },
})
