// Sandbox ports, domains and internet access through the unmodified e2b SDK:
// getHost(port) names a host that reaches dsec (never e2b.app), requests to it
// reach the port inside the sandbox (HTTP and upgrades), a closed port answers
// as E2B's proxy does, and allowInternetAccess decides whether the sandbox
// reaches a test host (in a network namespace this test makes; never the
// internet). Needs root, as the server does (run.sh).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import dns from 'node:dns'
import http from 'node:http'
import { CommandExitError } from 'e2b'
import { create, killAll, waitFor } from './helpers.mjs'

// Names under localhost are the loopback address (RFC 6761), as browsers and
// curl resolve them; glibc's resolver here does not, so requests resolve them
// the same way themselves.
function lookup(hostname, opts, cb) {
  if (hostname !== 'localhost' && !hostname.endsWith('.localhost')) return dns.lookup(hostname, opts, cb)
  if (opts?.all) return cb(null, [{ address: '127.0.0.1', family: 4 }])
  cb(null, '127.0.0.1', 4)
}

// get fetches url; resolves to {status, body}.
function get(url, headers = {}) {
  return new Promise((resolve, reject) => {
    http.get(url, { lookup, headers }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (d) => { body += d })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    }).on('error', reject)
  })
}

// The test host: 198.18.N.2 (the benchmarking range, RFC 2544) in a network
// namespace of its own, linked to the node by a veth, serving HTTP on 8080.
const n = 200 + (process.pid % 50)
const ns = `dsec-e2b-${process.pid}`
const link = `de2b${process.pid % 100000}`
const hostAddr = `198.18.${n}.2`
let hostServer

function ip(...args) { execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] }) }

function removeHost() {
  hostServer?.kill()
  for (const args of [['link', 'del', link], ['netns', 'del', ns]]) {
    try { ip(...args) } catch { /* already gone */ }
  }
}

let sbx
before(async () => {
  ip('netns', 'add', ns)
  ip('link', 'add', link, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns)
  ip('addr', 'add', `198.18.${n}.1/24`, 'dev', link)
  ip('link', 'set', link, 'up')
  ip('-n', ns, 'addr', 'add', `${hostAddr}/24`, 'dev', 'eth0')
  ip('-n', ns, 'link', 'set', 'eth0', 'up')
  ip('-n', ns, 'link', 'set', 'lo', 'up')
  ip('-n', ns, 'route', 'add', 'default', 'via', `198.18.${n}.1`)
  // socketserver, not http.server's HTTPServer: that one resolves its own
  // address's name at bind (DNS queries to the host's resolver).
  hostServer = spawn('ip', ['netns', 'exec', ns, 'python3', '-c',
    `import http.server as h, socketserver as s; s.TCPServer(("${hostAddr}", 8080), h.SimpleHTTPRequestHandler).serve_forever()`],
    { cwd: '/', stdio: 'ignore' })
  // Ports need no egress: this sandbox has none (and http.server's name
  // lookup at bind cannot leave it).
  sbx = await create({ allowInternetAccess: false })
})
after(async () => {
  await killAll()
  removeHost()
})

test('getHost(port) names dsec, and its requests reach the port inside the sandbox', async () => {
  const url = new URL(process.env.E2B_API_URL)
  assert.equal(sbx.sandboxDomain, `localhost:${url.port}`)
  const host = sbx.getHost(8000)
  assert.equal(host, `8000-${sbx.sandboxId}.localhost:${url.port}`)

  await sbx.commands.run('mkdir -p /tmp/www && echo hi > /tmp/www/hello-from-the-sandbox.txt')
  const server = await sbx.commands.run('python3 -m http.server 8000 --directory /tmp/www', { background: true })
  const res = await waitFor(async () => {
    const r = await get(`http://${host}/`)
    return r.status === 200 && r
  })
  assert.match(res.body, /hello-from-the-sandbox\.txt/)
  const file = await get(`http://${host}/hello-from-the-sandbox.txt`)
  assert.deepEqual(file, { status: 200, body: 'hi\n' })
  await server.kill()
})

test('a port nobody listens on answers as E2B\'s proxy does', async () => {
  const res = await get(`http://${sbx.getHost(3000)}/`)
  assert.equal(res.status, 502)
  const body = JSON.parse(res.body)
  assert.equal(body.message, 'The sandbox is running but port is not open')
  assert.equal(body.sandboxId, sbx.sandboxId)
  assert.equal(body.port, 3000)
  const page = await get(`http://${sbx.getHost(3000)}/`, { 'User-Agent': 'Mozilla/5.0 (X11; Linux x86_64)' })
  assert.equal(page.status, 502)
  assert.match(page.body, /<title>Closed Port Error<\/title>/)
})

test('an upgrade (WebSocket) reaches the sandbox port and carries bytes both ways', async () => {
  // A server that switches protocols and then echoes.
  const script = [
    'import socket',
    's = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)',
    's.bind(("0.0.0.0", 8001)); s.listen(1)',
    'while True:',
    '    c, _ = s.accept(); buf = b""',
    '    while b"\\r\\n\\r\\n" not in buf: buf += c.recv(1024)',
    '    c.sendall(b"HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n\\r\\n")',
    '    while (d := c.recv(1024)): c.sendall(d)',
    '    c.close()',
  ].join('\n')
  await sbx.files.write('/tmp/echo.py', script)
  const server = await sbx.commands.run('python3 /tmp/echo.py', { background: true })
  const echoed = await waitFor(() => new Promise((resolve) => {
    const req = http.request(`http://${sbx.getHost(8001)}/ws`, {
      lookup, headers: { Connection: 'Upgrade', Upgrade: 'websocket' },
    })
    req.on('upgrade', (_res, socket) => {
      socket.once('data', (d) => { socket.destroy(); resolve(d.toString()) })
      socket.write('ping\n')
    })
    req.on('response', (res) => { res.resume(); resolve(false) }) // not listening yet
    req.on('error', () => resolve(false))
    req.end()
  }))
  assert.equal(echoed, 'ping\n')
  await server.kill()
})

test('allowPublicTraffic false: a port answers only with the traffic access token', async () => {
  const priv = await create({ allowInternetAccess: false, network: { allowPublicTraffic: false } })
  assert.ok(priv.trafficAccessToken)
  assert.equal(sbx.trafficAccessToken, undefined) // public ports: no token
  const server = await priv.commands.run('python3 -m http.server 8002 --directory /tmp', { background: true })
  const url = `http://${priv.getHost(8002)}/`
  const ok = await waitFor(async () => {
    const r = await get(url, { 'e2b-traffic-access-token': priv.trafficAccessToken })
    return r.status === 200 && r
  })
  assert.equal(ok.status, 200)
  assert.equal((await get(url)).status, 403)
  assert.equal((await get(url, { 'e2b-traffic-access-token': 'wrong' })).status, 403)
  await server.kill()
})

const reach = `python3 -c "import urllib.request as u; print(u.urlopen('http://${hostAddr}:8080/', timeout=5).status)"`

// DSEC_E2B_NO_OUTSIDE_HOST (the reason) where the sandboxes' node cannot route to
// the test host (a cluster whose agents run in network namespaces of their own).
const outside = { skip: process.env.DSEC_E2B_NO_OUTSIDE_HOST || false }

test('allowInternetAccess true (the default) reaches a host outside the node', outside, async () => {
  await waitFor(async () => { // the test host's server is up
    try {
      execFileSync('ip', ['netns', 'exec', ns, 'python3', '-c', `import socket; socket.create_connection(("${hostAddr}", 8080), 1)`], { stdio: 'ignore' })
      return true
    } catch { return false }
  })
  const online = await create({ allowInternetAccess: true })
  assert.equal((await online.commands.run(reach)).stdout, '200\n')
  const byDefault = await create()
  assert.equal((await byDefault.commands.run(reach)).stdout, '200\n')
})

test('allowInternetAccess false: the connection is refused', async () => {
  const offline = await create({ allowInternetAccess: false })
  const t0 = Date.now()
  const err = await offline.commands.run(reach).catch((e) => e)
  assert.ok(err instanceof CommandExitError, `want a failed command, got ${err?.stdout ?? err}`)
  assert.match(err.stderr, /unreachable|refused/i)
  assert.ok(Date.now() - t0 < 5000, 'refused at once, not a timeout')
  assert.equal((await offline.getInfo()).allowInternetAccess, false)
})

test('network.denyOut/allowOut and updateNetwork: allow wins, the rest is denied; domain names are rules, malformed ones refused', outside, async () => {
  const only = await create({ network: { denyOut: ['0.0.0.0/0'], allowOut: [hostAddr] } })
  assert.equal((await only.commands.run(reach)).stdout, '200\n')
  const denied = await create({ network: { denyOut: [hostAddr] } })
  assert.ok((await denied.commands.run(reach).catch((e) => e)) instanceof CommandExitError)
  // updateNetwork replaces the policy of a running sandbox (omitted fields cleared).
  await denied.updateNetwork({ allowInternetAccess: false, allowOut: [hostAddr] })
  assert.equal((await denied.commands.run(reach)).stdout, '200\n')
  await denied.updateNetwork({ allowInternetAccess: false })
  assert.ok((await denied.commands.run(reach).catch((e) => e)) instanceof CommandExitError)
  // A name is a rule of its own: the test host's address is not pypi.org's.
  const named = await create({ network: { denyOut: ['0.0.0.0/0'], allowOut: ['pypi.org', '*.pythonhosted.org'] } })
  assert.ok((await named.commands.run(reach).catch((e) => e)) instanceof CommandExitError)
  const err = await create({ network: { allowOut: ['pypi..org'] } }).catch((e) => e)
  assert.ok(err instanceof Error)
  assert.match(err.message, /network\.allowOut\[0\]/)
})
