// E2B's desktop through the unmodified @e2b/desktop package: its default
// template "desktop" is dsec's image e2b-desktop (scripts/desktop-image.sh),
// which records that template name and the container backend. The SDK starts
// Xvfb and XFCE itself through commands at create; the test then checks what
// a user of the SDK would: the screen size, a PNG screenshot of that size,
// the pointer where it was moved, a file opened with xdg-open in the editor
// and text typed into it saved to the file, a URL opened in the browser.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import http from 'node:http'
import crypto from 'node:crypto'
import { Sandbox } from '@e2b/desktop'
import { runId, waitFor } from './helpers.mjs'

const created = new Set()
after(async () => {
  await Promise.all([...created].map((s) => s.kill().catch(() => {})))
})

// pngSize reads a PNG's width and height from its IHDR chunk.
function pngSize(b) {
  const png = Buffer.from(b)
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'a PNG')
  assert.equal(png.toString('latin1', 12, 16), 'IHDR')
  return { width: png.readUInt32BE(16), height: png.readUInt32BE(20) }
}

test('desktop: display, screenshot, pointer, typing, editor and browser', async () => {
  const t0 = Date.now()
  // No internet: nothing the desktop runs (the browser, http.server's name
  // lookup) leaves the machine.
  const sbx = await Sandbox.create({ resolution: [1024, 768], timeoutMs: 300_000, allowInternetAccess: false, metadata: { suite: runId } })
  created.add(sbx)
  assert.deepEqual(await sbx.getScreenSize(), { width: 1024, height: 768 })

  const shot = await sbx.screenshot()
  const ms = Date.now() - t0
  assert.deepEqual(pngSize(shot), { width: 1024, height: 768 })
  console.log(`desktop: create to first screenshot ${ms} ms (${shot.length} bytes)`)

  // The desktop the SDK started: XFCE's window manager and panel, as user.
  const ps = await sbx.commands.run('pgrep -u user -x xfwm4 && pgrep -u user -x xfce4-panel')
  assert.equal(ps.exitCode, 0)

  assert.deepEqual(await sbx.getCursorPosition(), { x: 512, y: 384 }, 'the pointer starts in the middle')
  await sbx.moveMouse(100, 200)
  assert.deepEqual(await sbx.getCursorPosition(), { x: 100, y: 200 })

  // A text file opened with the default application (the editor), typed
  // into and saved: the file holds what was typed.
  const path = '/home/user/note.txt'
  await sbx.files.write(path, 'first line\n')
  await sbx.open(path)
  const win = await waitFor(async () => {
    const r = await sbx.commands.run('xdotool search --onlyvisible --name "note.txt"').catch(() => null)
    return r?.stdout.trim().split('\n')[0]
  }, 30_000, 250)
  assert.match(await sbx.getWindowTitle(win), /note\.txt/)
  await sbx.commands.run(`xdotool windowactivate --sync ${win}`)
  assert.equal(await sbx.getCurrentWindowId(), win, 'the editor has the focus')
  await sbx.press(['ctrl', 'end'])
  await sbx.write('typed by xdotool', { chunkSize: 25, delayInMs: 10 })
  await sbx.press(['ctrl', 's'])
  const saved = await waitFor(async () => {
    const s = await sbx.files.read(path)
    return s.includes('typed by xdotool') && s
  }, 15_000, 250)
  assert.equal(saved.replace(/\n$/, ''), 'first line\ntyped by xdotool')

  // A URL opens in the browser (NetSurf): a page served in the sandbox,
  // whose title names the browser's window.
  await sbx.files.write('/home/user/site/page.html', '<html><head><title>dsec desktop page</title></head><body>hello</body></html>')
  const srv = await sbx.commands.run('python3 -m http.server -d /home/user/site 8000', { background: true })
  await waitFor(async () => (await sbx.commands.run('python3 -c "import urllib.request as u; u.urlopen(\'http://127.0.0.1:8000/page.html\')"').catch(() => null))?.exitCode === 0, 15_000, 200)
  await sbx.open('http://127.0.0.1:8000/page.html')
  const page = await waitFor(async () => {
    const r = await sbx.commands.run('xdotool search --onlyvisible --name "dsec desktop page"').catch(() => null)
    return r?.stdout.trim().split('\n')[0]
  }, 30_000, 250)
  assert.match(await sbx.getWindowTitle(page), /dsec desktop page/)
  await srv.kill()

  // The screen changed: the editor's window is drawn.
  const after = await sbx.screenshot()
  assert.deepEqual(pngSize(after), { width: 1024, height: 768 })
  assert.notDeepEqual(Buffer.from(after), Buffer.from(shot))
})

// lookup resolves every name (the sandbox hosts under localhost) to loopback.
function lookup(_host, opts, cb) {
  if (opts?.all) return cb(null, [{ address: '127.0.0.1', family: 4 }])
  cb(null, '127.0.0.1', 4)
}

// rfbGreeting opens a WebSocket to url and returns the first message's text:
// a VNC server's greeting ("RFB 003.008\n") when noVNC's websockify relays
// x11vnc.
function rfbGreeting(url) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, {
      lookup,
      headers: { Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Version': '13',
        'Sec-WebSocket-Key': crypto.randomBytes(16).toString('base64'), 'Sec-WebSocket-Protocol': 'binary' },
    })
    req.on('response', (res) => reject(new Error(`no upgrade: ${res.statusCode}`)))
    req.on('upgrade', (_res, sock, head) => {
      let buf = head
      const onData = (d) => {
        buf = Buffer.concat([buf, d])
        if (buf.length >= 2 && buf.length >= 2 + (buf[1] & 0x7f)) {
          sock.destroy()
          resolve(buf.subarray(2, 2 + (buf[1] & 0x7f)).toString('latin1'))
        }
      }
      sock.on('data', onData)
      sock.on('error', reject)
      onData(Buffer.alloc(0))
    })
    req.on('error', reject)
    req.end()
  })
}

test('desktop: the stream (x11vnc and noVNC) serves the display on getHost(6080)', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 300_000, allowInternetAccess: false, metadata: { suite: runId } })
  created.add(sbx)
  await sbx.stream.start()
  const url = new URL(sbx.stream.getUrl())
  assert.equal(url.host, sbx.getHost(6080))
  assert.equal(url.pathname, '/vnc.html')
  assert.equal(url.searchParams.get('autoconnect'), 'true')
  const page = await new Promise((resolve, reject) => {
    http.get(`http://${url.host}/vnc.html`, { lookup }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (d) => { body += d })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    }).on('error', reject)
  })
  assert.equal(page.status, 200)
  assert.match(page.body, /noVNC/)
  assert.match(await rfbGreeting(`http://${url.host}/websockify`), /^RFB 003\.00\d\n$/)
  await sbx.stream.stop()
})
