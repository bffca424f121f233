// The e2b SDK's commands against one or more dsec servers side by side,
// interleaved in rounds:
//   - commands.run('true'): latency one at a time (p50, p90) and throughput
//     with C command loops at once (one sandbox each) for each C;
//   - first output: from commands.run('echo a; sleep 0.2') to its first
//     stdout callback (p50, p90), i.e. how soon a stream gets output;
//   - idle streams: the server's CPU time per second (ms/s) while as many
//     commands as the largest C print nothing (sleep), followed by the SDK.
// Every server is NAME=URL=TOKEN=PID (PID: the server process, for its CPU
// time); run by scripts/bench-e2b-ab.sh, which starts the servers (e.g. a
// build of main beside the current one).
// Usage: node throughput.mjs [--n 50] [--rounds 3] [--secs 3] [--conc 1,10,50] NAME=URL=TOKEN=PID...
import { readFileSync } from 'node:fs'
import { Sandbox } from 'e2b'

const argv = process.argv.slice(2)
const opt = (name, def) => {
  const i = argv.indexOf(`--${name}`)
  if (i < 0) return def
  const v = argv[i + 1]
  argv.splice(i, 2)
  return v
}
const N = Number(opt('n', 50)), ROUNDS = Number(opt('rounds', 3)), SECS = Number(opt('secs', 3))
const CONC = opt('conc', '1,10,50').split(',').map(Number)
const servers = argv.map((a) => {
  const [name, url, token, pid] = a.split('=')
  const o = { apiUrl: url, sandboxUrl: url, apiKey: `e2b_${token}` }
  return { name, o, pid, lat: [], first: [], idle: [], tput: Object.fromEntries(CONC.map((c) => [c, []])), sbx: [] }
})
if (!servers.length) throw new Error('usage: node throughput.mjs NAME=URL=TOKEN...')

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]
}
const r2 = (x) => Math.round(x * 100) / 100

// cpuMs is the CPU time (user+system) process pid has used, in ms.
function cpuMs(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
  return (Number(f[11]) + Number(f[12])) * 10 // clock ticks of 10 ms
}

async function firstOutput(sb) {
  const t0 = performance.now()
  let first
  await sb.commands.run('echo a; sleep 0.2', { onStdout: () => { first ??= performance.now() - t0 } })
  if (first === undefined) throw new Error('no output')
  return first
}

// idleCPU follows K silent commands for secs and returns the server's CPU ms/s.
async function idleCPU(s, k, secs) {
  const hs = await Promise.all(s.sbx.slice(0, k).map((sb) => sb.commands.run(`sleep ${secs + 5}`, { background: true })))
  await new Promise((r) => setTimeout(r, 500)) // every stream is being followed
  const c0 = cpuMs(s.pid), t0 = performance.now()
  await new Promise((r) => setTimeout(r, secs * 1000))
  const used = (cpuMs(s.pid) - c0) / ((performance.now() - t0) / 1000)
  await Promise.all(hs.map((h) => h.kill()))
  return used
}

async function run(sb) {
  const r = await sb.commands.run('true')
  if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}`)
}

// One sandbox per loop of the largest concurrency, made up front on every server.
const maxC = Math.max(...CONC)
for (const s of servers) {
  s.sbx = await Promise.all(Array.from({ length: maxC }, () => Sandbox.create({ ...s.o, timeoutMs: 3_600_000 })))
  for (const sb of s.sbx) for (let i = 0; i < 3; i++) await run(sb) // warm
}

try {
  for (let r = 0; r < ROUNDS; r++) {
    for (const s of servers) {
      for (let i = 0; i < N; i++) {
        const t0 = performance.now()
        await run(s.sbx[0])
        s.lat.push(performance.now() - t0)
      }
    }
    for (const s of servers) {
      for (let i = 0; i < 20; i++) s.first.push(await firstOutput(s.sbx[0]))
    }
    for (const s of servers) s.idle.push(await idleCPU(s, maxC, SECS))
    for (const c of CONC) {
      for (const s of servers) {
        let done = 0
        const end = performance.now() + SECS * 1000
        const t0 = performance.now()
        await Promise.all(s.sbx.slice(0, c).map(async (sb) => {
          while (performance.now() < end) { await run(sb); done++ }
        }))
        s.tput[c].push(done / ((performance.now() - t0) / 1000))
      }
    }
  }
} finally {
  for (const s of servers) await Promise.allSettled(s.sbx.map((sb) => sb.kill()))
}

const out = {}
for (const s of servers) {
  out[s.name] = {
    run_true_n: s.lat.length,
    run_true_p50_ms: r2(pct(s.lat, 50)),
    run_true_p90_ms: r2(pct(s.lat, 90)),
    ...Object.fromEntries(CONC.map((c) => [`runs_per_s_c${c}`, r2(pct(s.tput[c], 50))])),
    first_output_p50_ms: r2(pct(s.first, 50)),
    first_output_p90_ms: r2(pct(s.first, 90)),
    [`idle_streams_${maxC}_server_cpu_ms_per_s`]: r2(pct(s.idle, 50)),
  }
}
console.log(JSON.stringify({ rounds: ROUNDS, secs_each: SECS, servers: out }, null, 2))
