// Users as E2B's base image has them and envd's newer behaviours: the default
// user `user` (uid 1000, /home/user, passwordless sudo), files owned by the
// requesting user, signed file URLs, exit errors, a killed sandbox's command,
// symlink targets.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { CommandExitError } from 'e2b'
import { create, killAll, waitFor } from './helpers.mjs'

let sbx
before(async () => { sbx = await create() })
after(killAll)

const owner = async (p) => (await sbx.commands.run(`stat -c %U:%G ${p}`)).stdout.trim()

test('commands run as user in /home/user; the image gives user passwordless sudo', async () => {
  assert.equal((await sbx.commands.run('whoami; id -u; pwd; echo $HOME')).stdout, 'user\n1000\n/home/user\n/home/user\n')
  assert.equal((await sbx.commands.run('whoami; pwd', { user: 'root' })).stdout, 'root\n/root\n')
  // The image's rule is what sudo reads (misc.test.mjs runs sudo).
  assert.equal((await sbx.commands.run('cat /etc/sudoers.d/user', { user: 'root' })).stdout, 'user ALL=(ALL:ALL) NOPASSWD: ALL\n')
})

test('files are written as the requesting user, relative paths under its home', async () => {
  const w = await sbx.files.write('notes/a.txt', 'mine')
  assert.equal(w.path, '/home/user/notes/a.txt')
  assert.equal(await owner('/home/user/notes'), 'user:user')
  assert.equal(await owner('/home/user/notes/a.txt'), 'user:user')
  assert.equal((await sbx.commands.run('cat notes/a.txt')).stdout, 'mine')
  // The user may change what it wrote.
  await sbx.commands.run('echo more >> notes/a.txt')
  const r = await sbx.files.write('/tmp/r.txt', 'root', { user: 'root' })
  assert.equal(r.path, '/tmp/r.txt')
  assert.equal(await owner('/tmp/r.txt'), 'root:root')
  assert.equal((await sbx.files.write('rel.txt', 'x', { user: 'root' })).path, '/root/rel.txt')
  assert.equal(await sbx.files.makeDir('made/deep'), true)
  assert.equal(await owner('/home/user/made'), 'user:user')
  assert.equal(await owner('/home/user/made/deep'), 'user:user')
  const info = await sbx.files.getInfo('notes/a.txt')
  assert.equal(info.owner, 'user')
})

test('signed upload and download URLs work without any header', async () => {
  const up = await sbx.uploadUrl('/tmp/signed.txt')
  assert.match(up, /signature=v1_/)
  const form = new FormData()
  form.append('file', new Blob(['signed body']), '/tmp/signed.txt')
  const res = await fetch(up, { method: 'POST', body: form })
  assert.equal(res.status, 200, await res.clone().text())
  assert.equal(await owner('/tmp/signed.txt'), 'user:user')
  const down = await sbx.downloadUrl('/tmp/signed.txt', { useSignatureExpiration: 60 })
  assert.match(down, /signature_expiration=/)
  const got = await fetch(down)
  assert.equal(got.status, 200)
  assert.equal(await got.text(), 'signed body')
  // A signature for another path, or an unsigned URL, is refused.
  const other = new URL(down)
  other.searchParams.set('path', '/etc/shadow')
  assert.equal((await fetch(other)).status, 401)
  const bare = new URL(down)
  bare.searchParams.delete('signature')
  assert.notEqual((await fetch(bare)).status, 200)
})

test('a non-zero exit carries its error text', async () => {
  await assert.rejects(sbx.commands.run('exit 3'), (err) => {
    assert.ok(err instanceof CommandExitError)
    assert.equal(err.exitCode, 3)
    assert.equal(err.message, 'exit status 3')
    return true
  })
})

test('symlink info gives the resolved absolute target', async () => {
  await sbx.commands.run('mkdir -p /tmp/ln && echo t > /tmp/ln/target && ln -s target /tmp/ln/rel && ln -s /tmp/ln/target /tmp/ln/abs')
  for (const name of ['rel', 'abs']) {
    const info = await sbx.files.getInfo(`/tmp/ln/${name}`)
    assert.equal(info.symlinkTarget, '/tmp/ln/target')
  }
})

test('a command cut off by its sandbox being killed: no host detail, no exit error', async () => {
  const victim = await create()
  const handle = await victim.commands.run('sleep 600', { background: true, timeoutMs: 60_000 })
  await waitFor(async () => (await victim.commands.list()).some((p) => p.pid === handle.pid))
  await victim.kill()
  await assert.rejects(handle.wait(), (err) => {
    assert.ok(!(err instanceof CommandExitError), `ended as ${err.name}: ${err.message}`)
    assert.doesNotMatch(String(err.message) + String(err.stack), /\/run\/dsec|unixpacket|initproto/)
    return true
  })
})
