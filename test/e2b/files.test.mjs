import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { FileNotFoundError, FileType, FilesystemEventType } from 'e2b'
import { create, killAll, waitFor } from './helpers.mjs'

let sbx
before(async () => { sbx = await create() })
after(killAll)

test('text, binary and large files', async () => {
  const info = await sbx.files.write('/home/user/dir/hello.txt', 'héllo wörld\n')
  assert.equal(info.path, '/home/user/dir/hello.txt')
  assert.equal(await sbx.files.read('/home/user/dir/hello.txt'), 'héllo wörld\n')
  const bin = new Uint8Array(256).map((_, i) => i)
  await sbx.files.write('/tmp/bin', bin.buffer)
  assert.deepEqual(await sbx.files.read('/tmp/bin', { format: 'bytes' }), bin)
  const big = new Uint8Array(20 * 1024 * 1024).map((_, i) => (i * 7) & 0xff)
  await sbx.files.write('/tmp/big', new Blob([big]))
  const back = await sbx.files.read('/tmp/big', { format: 'bytes' })
  assert.equal(back.length, big.length)
  assert.ok(Buffer.from(back).equals(Buffer.from(big)))
  assert.equal((await sbx.commands.run('sha256sum /tmp/big | cut -c1-16')).stdout.length, 17)
  // A stream goes up as octet-stream.
  const stream = new Blob(['streamed ', 'body']).stream()
  await sbx.files.write('/tmp/streamed', stream)
  assert.equal(await sbx.files.read('/tmp/streamed'), 'streamed body')
  const rs = await sbx.files.read('/tmp/streamed', { format: 'stream' })
  assert.equal(await new Response(rs).text(), 'streamed body')
  // Several files in one call; relative paths are under the home directory.
  const many = await sbx.files.write([{ path: '/tmp/m/1', data: 'one' }, { path: 'rel.txt', data: 'two' }])
  assert.deepEqual(many.map((w) => w.path).sort(), ['/home/user/rel.txt', '/tmp/m/1'])
  assert.equal((await sbx.commands.run('cat /home/user/rel.txt')).stdout, 'two')
  await sbx.files.write('/tmp/empty', '')
  assert.equal(await sbx.files.read('/tmp/empty'), '')
})

test('list, exists, getInfo, makeDir, rename, remove', async () => {
  assert.equal(await sbx.files.makeDir('/data/a/b'), true)
  assert.equal(await sbx.files.makeDir('/data/a/b'), false)
  await sbx.files.write('/data/a/f.txt', '12345')
  const ls = await sbx.files.list('/data/a')
  assert.deepEqual(ls.map((e) => [e.name, e.type]).sort(), [['b', FileType.DIR], ['f.txt', FileType.FILE]])
  const deep = await sbx.files.list('/data', { depth: 3 })
  assert.deepEqual(deep.map((e) => e.path).sort(), ['/data/a', '/data/a/b', '/data/a/f.txt'])
  const st = await sbx.files.getInfo('/data/a/f.txt')
  assert.equal(st.size, 5)
  assert.equal(st.type, FileType.FILE)
  assert.equal(st.permissions.slice(0, 1), '-')
  assert.ok(st.modifiedTime instanceof Date)
  assert.equal(await sbx.files.exists('/data/a/f.txt'), true)
  assert.equal(await sbx.files.exists('/data/nope'), false)
  const moved = await sbx.files.rename('/data/a/f.txt', '/data/g.txt')
  assert.equal(moved.path, '/data/g.txt')
  assert.equal(await sbx.files.exists('/data/a/f.txt'), false)
  assert.equal(await sbx.files.read('/data/g.txt'), '12345')
  await sbx.files.remove('/data/a')
  assert.equal(await sbx.files.exists('/data/a/b'), false)
  await assert.rejects(sbx.files.read('/data/a/f.txt'), FileNotFoundError)
  await assert.rejects(sbx.files.list('/no/such/dir'), FileNotFoundError)
  await assert.rejects(sbx.files.rename('/no/such', '/x'), FileNotFoundError)
  // ".." stays inside the sandbox.
  await sbx.files.write('/tmp/../../../../etc/dsec-e2b-probe', 'inside')
  assert.equal((await sbx.commands.run('cat /etc/dsec-e2b-probe')).stdout, 'inside')
})

test('watch a directory', async () => {
  await sbx.files.makeDir('/watched/sub')
  const events = []
  const w = await sbx.files.watchDir('/watched', (e) => events.push(e), { recursive: true })
  await sbx.files.write('/watched/sub/new.txt', 'x')
  await waitFor(() => events.some((e) => e.name === 'sub/new.txt' && e.type === FilesystemEventType.CREATE))
  await sbx.commands.run('echo more >> /watched/sub/new.txt')
  await waitFor(() => events.some((e) => e.name === 'sub/new.txt' && e.type === FilesystemEventType.WRITE))
  await sbx.files.remove('/watched/sub/new.txt')
  await waitFor(() => events.some((e) => e.name === 'sub/new.txt' && e.type === FilesystemEventType.REMOVE))
  await w.stop()
  await assert.rejects(sbx.files.watchDir('/no/such', () => {}), FileNotFoundError)
})
