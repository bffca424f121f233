// Shared setup of the E2B acceptance suite: the unmodified `e2b` SDK pointed at
// a dsec server by E2B_API_URL and E2B_SANDBOX_URL (both the server's plain-HTTP
// address) and E2B_API_KEY (a dsec token; run.sh starts the server).
import { Sandbox } from 'e2b'

for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[v]) throw new Error(`${v} must be set (see test/e2b/run.sh)`)
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// A tag unique to this run, to find this run's sandboxes by metadata.
export const runId = `run-${process.pid}-${Date.now()}`

const created = new Set()

// create makes a sandbox that the suite kills at the end even if a test fails.
export async function create(opts = {}) {
  const sbx = await Sandbox.create({ ...opts, metadata: { suite: runId, ...(opts.metadata ?? {}) } })
  created.add(sbx)
  return sbx
}

export async function killAll() {
  await Promise.all([...created].map((s) => s.kill().catch(() => {})))
  created.clear()
}

// waitFor polls fn until it returns a truthy value or ms pass.
export async function waitFor(fn, ms = 10_000, step = 100) {
  const end = Date.now() + ms
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > end) throw new Error('condition not met in time')
    await sleep(step)
  }
}
