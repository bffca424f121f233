// C command loops (one sandbox each) of commands.run('true') through the e2b
// SDK for SECS seconds, after the sandboxes are made and warmed; prints
// READY on stderr when the loops start and the rate on stdout. Used by
// scripts/prof-e2b-exec.sh (E2B_* set as for the suite).
// Usage: node loops.mjs [C=100] [SECS=10]
import { Sandbox } from 'e2b'

const C = Number(process.argv[2] ?? 100), SECS = Number(process.argv[3] ?? 10)
const sbx = await Promise.all(Array.from({ length: C }, () => Sandbox.create({ timeoutMs: 600_000 })))
try {
  await Promise.all(sbx.map((sb) => sb.commands.run('true')))
  console.error('READY')
  let done = 0
  const t0 = performance.now(), end = t0 + SECS * 1000
  await Promise.all(sbx.map(async (sb) => {
    while (performance.now() < end) {
      await sb.commands.run('true')
      done++
    }
  }))
  console.log(JSON.stringify({ concurrency: C, runs_per_s: Math.round(done / ((performance.now() - t0) / 1000)) }))
} finally {
  await Promise.allSettled(sbx.map((sb) => sb.kill()))
}
