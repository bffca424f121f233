import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { create, killAll, waitFor } from './helpers.mjs'

let sbx
before(async () => { sbx = await create() })
after(killAll)

test('pty: interactive shell, input, resize, exit', async () => {
  let out = ''
  const dec = new TextDecoder()
  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d, { stream: true }) } })
  assert.ok(h.pid > 0)
  await sbx.pty.sendInput(h.pid, new TextEncoder().encode('stty size; tty\n'))
  await waitFor(() => /24 80/.test(out) && /\/dev\/pts\//.test(out))
  await sbx.pty.resize(h.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(h.pid, new TextEncoder().encode('stty size\n'))
  await waitFor(() => /30 100/.test(out))
  await sbx.pty.sendInput(h.pid, new TextEncoder().encode('exit 0\n'))
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
})

test('pty: kill', async () => {
  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} })
  assert.equal(await sbx.pty.kill(h.pid), true)
  await assert.rejects(h.wait())
})
