// E2B front end benchmark, in one run against one dsec server:
//  1. commands.run('true') through the unmodified e2b SDK vs the same exec
//     (/bin/bash -l -c true, the argv the SDK sends) through dsec's Python SDK,
//     in the same sandbox, interleaved in rounds; p50 and p90 of each. A third
//     series sends the SDK's Process.Start request with plain undici (no SDK),
//     which tells the SDK's own client-side cost from the server's, and a fourth
//     sends dsec's own POST /v1/sandboxes/{id}/exec with undici, which tells
//     Node's HTTP client from Python's.
//  2. 100 Sandbox.create at once: failures must be 0.
//  3. Throughput at concurrency C (one command loop per sandbox, in the
//     sandboxes of 2): commands.run('true') through the e2b SDK vs the same
//     exec through dsec's asyncio Python SDK (/v1), SECS seconds each,
//     alternating for CROUNDS rounds; then every sandbox is killed.
// Usage (E2B_* set as for the suite, or via run.sh):
//   node bench.mjs [--n 20] [--rounds 40] [--creates 100] [--conc 100] [--secs 3] [--crounds 2]
import { spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { Sandbox } from 'e2b'
import { fetch, Agent } from 'undici'

const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? Number(process.argv[i + 1]) : def
}
const N = arg('n', 20), ROUNDS = arg('rounds', 40), CREATES = arg('creates', 100)
const CONC = Math.min(arg('conc', 100), CREATES), SECS = arg('secs', 3), CROUNDS = arg('crounds', 2)

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]
}
const round3 = (x) => Math.round(x * 1000) / 1000

// A Python helper: a child answering each request line with one JSON line.
function helper(script) {
  const child = spawn(process.env.PYTHON ?? '/usr/bin/python3', [new URL(script, import.meta.url).pathname], {
    env: { ...process.env, DSEC_ADDR: process.env.E2B_API_URL, DSEC_TOKEN: process.env.E2B_API_KEY.replace(/^e2b_/, '') },
    stdio: ['pipe', 'pipe', 'inherit'],
  })
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]()
  return {
    child,
    async ask(line) {
      child.stdin.write(`${line}\n`)
      const { value, done } = await lines.next()
      if (done) throw new Error(`${script} exited`)
      return JSON.parse(value)
    },
  }
}
// "SANDBOX N": N latencies of the sync SDK.
const py = helper('./bench_dsec.py')
const pyRun = (id, n) => py.ask(`${id} ${n}`)

const sbx = await Sandbox.create({ timeoutMs: 3_600_000 })
// The raw request: the SDK's own headers and enveloped JSON message.
const connected = await (await fetch(`${process.env.E2B_API_URL}/v2/sandboxes/${sbx.sandboxId}/connect`, {
  method: 'POST', body: '{}', headers: { 'X-API-Key': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
})).json()
const msg = Buffer.from(JSON.stringify({ process: { cmd: '/bin/bash', args: ['-l', '-c', 'true'] }, stdin: false }))
const envelope = Buffer.concat([Buffer.alloc(5), msg])
envelope.writeUInt32BE(msg.length, 1)
const agent = new Agent({ allowH2: true })
async function rawStart() {
  const res = await fetch(`${process.env.E2B_SANDBOX_URL}/process.Process/Start`, {
    method: 'POST', body: envelope, dispatcher: agent,
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': connected.envdAccessToken,
      'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1', 'Connect-Timeout-Ms': '60000', 'Keepalive-Ping-Interval': '50' },
  })
  const body = Buffer.from(await res.arrayBuffer())
  if (res.status !== 200 || !body.includes('"end"')) throw new Error(`raw start: ${res.status} ${body}`)
}
const v1Body = JSON.stringify({ cmd: ['/bin/bash', '-l', '-c', 'true'] })
async function v1Exec() {
  const res = await fetch(`${process.env.E2B_API_URL}/v1/sandboxes/${sbx.sandboxId}/exec`, {
    method: 'POST', body: v1Body, dispatcher: agent,
    headers: { Authorization: `Bearer ${process.env.E2B_API_KEY.replace(/^e2b_/, '')}`, 'Content-Type': 'application/json' },
  })
  const out = await res.json()
  if (res.status !== 200 || out.exit_code !== 0) throw new Error(`v1 exec: ${res.status} ${JSON.stringify(out)}`)
}
const e2b = [], dsec = [], raw = [], v1 = []
try {
  for (let i = 0; i < 20; i++) { await sbx.commands.run('true'); await rawStart(); await v1Exec() } // warm every path
  await pyRun(sbx.sandboxId, 20)
  for (let r = 0; r < ROUNDS; r++) {
    for (let i = 0; i < N; i++) {
      const t0 = performance.now()
      await sbx.commands.run('true')
      e2b.push(performance.now() - t0)
    }
    dsec.push(...(await pyRun(sbx.sandboxId, N)))
    for (let i = 0; i < N; i++) {
      const t0 = performance.now()
      await rawStart()
      raw.push(performance.now() - t0)
    }
    for (let i = 0; i < N; i++) {
      const t0 = performance.now()
      await v1Exec()
      v1.push(performance.now() - t0)
    }
  }
} finally {
  py.child.stdin.end()
  await sbx.kill()
}

// 100 creates at once.
const t0 = performance.now()
const made = await Promise.allSettled(Array.from({ length: CREATES }, async () => {
  const s = performance.now()
  const sb = await Sandbox.create({ timeoutMs: 600_000 })
  return { sb, ms: performance.now() - s }
}))
const createWall = performance.now() - t0
const ok = made.filter((m) => m.status === 'fulfilled').map((m) => m.value)
const createErrors = made.filter((m) => m.status === 'rejected').map((m) => String(m.reason))

// Throughput at concurrency CONC in the sandboxes just made, e2b and /v1 alternating.
const tput = { e2b: [], v1: [] }
if (CONC > 0 && ok.length >= CONC) {
  const loopers = ok.slice(0, CONC).map((o) => o.sb)
  const conc = helper('./bench_dsec_conc.py')
  try {
    await Promise.all(loopers.map((sb) => sb.commands.run('true'))) // warm
    await conc.ask(`0.5 ${loopers.map((sb) => sb.sandboxId).join(',')}`)
    for (let r = 0; r < CROUNDS; r++) {
      let done = 0
      const t0 = performance.now(), end = t0 + SECS * 1000
      await Promise.all(loopers.map(async (sb) => {
        while (performance.now() < end) {
          const res = await sb.commands.run('true')
          if (res.exitCode !== 0) throw new Error(`exit ${res.exitCode}`)
          done++
        }
      }))
      tput.e2b.push(done / ((performance.now() - t0) / 1000))
      const v = await conc.ask(`${SECS} ${loopers.map((sb) => sb.sandboxId).join(',')}`)
      if (v.errors) throw new Error(`/v1 loops: ${v.errors} failed execs`)
      tput.v1.push(v.execs / v.secs)
    }
  } finally {
    conc.child.stdin.end()
  }
}
const t1 = performance.now()
const killed = await Promise.allSettled(ok.map(({ sb }) => sb.kill()))
const killWall = performance.now() - t1
const killFailures = killed.filter((k) => k.status === 'rejected' || k.value !== true).length

const out = {
  exec_true: {
    n_each: e2b.length,
    e2b_sdk_p50_ms: round3(pct(e2b, 50)), e2b_sdk_p90_ms: round3(pct(e2b, 90)),
    dsec_python_p50_ms: round3(pct(dsec, 50)), dsec_python_p90_ms: round3(pct(dsec, 90)),
    raw_connect_p50_ms: round3(pct(raw, 50)), raw_connect_p90_ms: round3(pct(raw, 90)),
    node_v1_exec_p50_ms: round3(pct(v1, 50)), node_v1_exec_p90_ms: round3(pct(v1, 90)),
    p50_difference_ms: round3(pct(e2b, 50) - pct(dsec, 50)),
    sdk_client_cost_p50_ms: round3(pct(e2b, 50) - pct(raw, 50)),
  },
  concurrent_create: {
    n: CREATES, created: ok.length, create_failures: createErrors.length, kill_failures: killFailures,
    create_wall_ms: Math.round(createWall), create_p50_ms: ok.length ? Math.round(pct(ok.map((o) => o.ms), 50)) : null,
    create_max_ms: ok.length ? Math.round(Math.max(...ok.map((o) => o.ms))) : null,
    kill_wall_ms: Math.round(killWall), errors: createErrors.slice(0, 3),
  },
  throughput: {
    concurrency: tput.e2b.length ? CONC : 0, secs_each: SECS, rounds: tput.e2b.length,
    e2b_sdk_runs_per_s: tput.e2b.map((x) => Math.round(x)), python_async_v1_execs_per_s: tput.v1.map((x) => Math.round(x)),
    e2b_over_v1: tput.e2b.length ? round3(pct(tput.e2b, 50) / pct(tput.v1, 50)) : null,
  },
}
console.log(JSON.stringify(out, null, 2))
process.exit(createErrors.length || killFailures ? 1 : 0)
