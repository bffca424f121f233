// E2B behaviours of the base template and the API that fit no other file:
// sudo as E2B's `user`, the debian image's `python` and `curl`,
// maskRequestHost, metrics as a series.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { create, killAll, waitFor } from './helpers.mjs'

let sbx
before(async () => { sbx = await create() })
after(killAll)

test('user has passwordless sudo; root through sudo is sandbox root', async () => {
  assert.equal((await sbx.commands.run('id -u; sudo -n id -u')).stdout, '1000\n0\n')
  // what sudo gains is what user root has: the same capability sets
  const caps = 'grep -E "^(CapEff|CapBnd|Seccomp):" /proc/self/status'
  const viaSudo = (await sbx.commands.run(`sudo -n sh -c '${caps}'`)).stdout
  const asRoot = (await sbx.commands.run(caps, { user: 'root' })).stdout
  assert.equal(viaSudo, asRoot)
  assert.match(viaSudo, /Seccomp:\s+2/)
})

test('the base image has python (python3) and curl, as E2B host tests expect', async () => {
  const r = await sbx.commands.run('python -c "import sys; print(sys.version_info[0])"; curl --version | head -1')
  assert.match(r.stdout, /^3\ncurl \d/)
})

test('maskRequestHost: the sandbox\'s service sees the mask as Host, ${PORT} replaced', async () => {
  const masked = await create({ network: { maskRequestHost: 'custom-host.example.com:${PORT}' } })
  assert.equal((await masked.getInfo()).network?.maskRequestHost, 'custom-host.example.com:${PORT}')
  const server = await masked.commands.run(`python3 -c "
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = self.headers['Host'].encode()
        self.send_response(200); self.send_header('Content-Length', str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', 8080), H).serve_forever()
"`, { background: true })
  // by the headers the SDKs send when E2B_SANDBOX_URL names one address
  const headers = { 'E2b-Sandbox-Id': masked.sandboxId, 'E2b-Sandbox-Port': '8080' }
  const body = await waitFor(async () => {
    const r = await fetch(process.env.E2B_SANDBOX_URL + '/', { headers })
    return r.status === 200 && r.text()
  })
  assert.equal(body, 'custom-host.example.com:8080')
  await server.kill()
  await assert.rejects(create({ network: { maskRequestHost: 'not a host/${PORT}' } }), /maskRequestHost/)
})

test('getMetrics is a series: samples at least 5 s apart, oldest first, within start and end', async () => {
  const start = new Date(Date.now() - 1000)
  const series = await waitFor(async () => {
    const ms = await sbx.getMetrics({ start })
    return ms.length >= 2 && ms
  }, 20_000, 1000)
  for (let i = 1; i < series.length; i++) {
    assert.ok(series[i].timestamp - series[i - 1].timestamp >= 5000, `samples ${i - 1} and ${i} less than 5 s apart`)
  }
  for (const m of series) {
    assert.ok(m.timestamp >= start && m.memTotal > 0 && m.diskTotal > 0, JSON.stringify(m))
  }
  // a window that ends before the newest sample leaves it out: it ends at
  // the first sample's second (the SDK rounds to whole seconds), so it holds
  // the first (up to 5 s after its end) and not the second (5 s later or more)
  const end = new Date(series[0].timestamp.getTime() - 500)
  const early = await sbx.getMetrics({ start, end })
  assert.ok(early.length >= 1 && early.every((m) => m.timestamp <= new Date(end.getTime() + 6000)), JSON.stringify(early))
  assert.ok(early.length < (await sbx.getMetrics({ start })).length)
  const before = await sbx.getMetrics({ start: new Date(Date.now() - 3600_000), end: new Date(Date.now() - 1800_000) })
  assert.deepEqual(before, [])
})
