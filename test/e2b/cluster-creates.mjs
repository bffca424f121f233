// Run by internal/cluster/clustere2e (TestE2BCreateBurst): DSEC_CREATES
// Sandbox.create at once through the unmodified e2b SDK against two API
// servers (a proxy sends each call to either one), then every sandbox killed.
// Prints one JSON line; exits non-zero on any failed create or kill (the SDK
// itself retries a 429 that carries Retry-After).
import { Sandbox } from 'e2b'

const n = Number(process.env.DSEC_CREATES ?? 1000)
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]
}
const t0 = performance.now()
const made = await Promise.allSettled(Array.from({ length: n }, async () => {
  const s = performance.now()
  const sb = await Sandbox.create({ timeoutMs: 600_000, requestTimeoutMs: 300_000 })
  return { sb, ms: performance.now() - s }
}))
const wall = performance.now() - t0
const ok = made.filter((m) => m.status === 'fulfilled').map((m) => m.value)
const errors = {}
for (const m of made) {
  if (m.status === 'rejected') {
    const k = String(m.reason).slice(0, 200)
    errors[k] = (errors[k] ?? 0) + 1
  }
}
const t1 = performance.now()
const killed = await Promise.allSettled(ok.map(({ sb }) => sb.kill({ requestTimeoutMs: 300_000 })))
const killFailures = killed.filter((k) => k.status === 'rejected' || k.value !== true).length
const ms = ok.map((o) => o.ms)
console.log(JSON.stringify({
  creates: n, created: ok.length, create_failures: n - ok.length, kill_failures: killFailures,
  create_wall_ms: Math.round(wall), create_p50_ms: ms.length ? Math.round(pct(ms, 50)) : null,
  create_p99_ms: ms.length ? Math.round(pct(ms, 99)) : null, kill_wall_ms: Math.round(performance.now() - t1), errors,
}))
process.exit(n - ok.length || killFailures ? 1 : 0)
