// E2B front end benchmark, in one run against one dsec server:
//  1. commands.run('true') through the unmodified e2b SDK vs the same exec
//     (/bin/bash -l -c true, the argv the SDK sends) through dsec's Python SDK,
//     in the same sandbox, interleaved in rounds; p50 and p90 of each. A third
//     series sends the SDK's Process.Start request with plain undici (no SDK),
//     which tells the SDK's own client-side cost from the server's, and a fourth
//     sends dsec's own POST /v1/sandboxes/{id}/exec with undici, which tells
//     Node's HTTP client from Python's.
//  2. 100 Sandbox.create at once, then all killed: failures must be 0.
// Usage (E2B_* set as for the suite, or via run.sh): node bench.mjs [--n 20] [--rounds 40] [--creates 100]
import { spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { Sandbox } from 'e2b'
import { fetch, Agent } from 'undici'

const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? Number(process.argv[i + 1]) : def
}
const N = arg('n', 20), ROUNDS = arg('rounds', 40), CREATES = arg('creates', 100)

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]
}
const round3 = (x) => Math.round(x * 1000) / 1000

// The Python side: one child answering "SANDBOX N" with N latencies.
const py = spawn(process.env.PYTHON ?? '/usr/bin/python3', [new URL('./bench_dsec.py', import.meta.url).pathname], {
  env: { ...process.env, DSEC_ADDR: process.env.E2B_API_URL, DSEC_TOKEN: process.env.E2B_API_KEY.replace(/^e2b_/, '') },
  stdio: ['pipe', 'pipe', 'inherit'],
})
const lines = createInterface({ input: py.stdout })[Symbol.asyncIterator]()
async function pyRun(id, n) {
  py.stdin.write(`${id} ${n}\n`)
  const { value, done } = await lines.next()
  if (done) throw new Error('python helper exited')
  return JSON.parse(value)
}

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
  py.stdin.end()
  await sbx.kill()
}

// 100 creates at once, then every one killed.
const t0 = performance.now()
const made = await Promise.allSettled(Array.from({ length: CREATES }, async () => {
  const s = performance.now()
  const sb = await Sandbox.create({ timeoutMs: 600_000 })
  return { sb, ms: performance.now() - s }
}))
const createWall = performance.now() - t0
const ok = made.filter((m) => m.status === 'fulfilled').map((m) => m.value)
const createErrors = made.filter((m) => m.status === 'rejected').map((m) => String(m.reason))
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
}
console.log(JSON.stringify(out, null, 2))
process.exit(createErrors.length || killFailures ? 1 : 0)
