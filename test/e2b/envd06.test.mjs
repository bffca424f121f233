// envd 0.6.x features the SDK gates on the version dsec reports: file metadata
// (user.e2b.* extended attributes), entries in watch events, watching with
// allowNetworkMounts, and metrics samples.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { FileType, FilesystemEventType, InvalidArgumentError } from 'e2b'
import { create, killAll, waitFor } from './helpers.mjs'

let sbx
before(async () => { sbx = await create() })
after(killAll)

test('file metadata is written, read, listed, kept by rename and cleared by overwrite', async () => {
  const metadata = { author: 'mish', purpose: 'upload' }
  const info = await sbx.files.write('meta/a.txt', 'content', { metadata })
  assert.deepEqual(info.metadata, metadata)
  assert.deepEqual((await sbx.files.getInfo('meta/a.txt')).metadata, metadata)
  const octet = await sbx.files.write('meta/o.txt', 'content', { metadata, useOctetStream: true })
  assert.deepEqual(octet.metadata, metadata)
  const many = await sbx.files.writeFiles([{ path: 'meta/1', data: '1' }, { path: 'meta/2', data: '2' }], { metadata: { source: 'suite' } })
  for (const w of many) assert.deepEqual((await sbx.files.getInfo(w.path)).metadata, { source: 'suite' })
  const listed = (await sbx.files.list('meta')).find((e) => e.name === 'a.txt')
  assert.deepEqual(listed?.metadata, metadata)
  // The file belongs to the user who wrote it, as a write without metadata does.
  assert.equal((await sbx.commands.run('stat -c %U /home/user/meta/a.txt')).stdout.trim(), 'user')
  assert.equal(await sbx.files.read('meta/a.txt'), 'content')
  const moved = await sbx.files.rename('meta/a.txt', 'meta/b.txt')
  assert.deepEqual(moved.metadata, metadata)
  const again = await sbx.files.write('meta/b.txt', 'second')
  assert.equal(again.metadata, undefined)
  assert.equal((await sbx.files.getInfo('meta/b.txt')).metadata, undefined)
  await assert.rejects(sbx.files.write('meta/bad.txt', 'x', { metadata: { 'bad key': 'v' } }), InvalidArgumentError)
  assert.equal(await sbx.files.exists('meta/bad.txt'), false)
})

test('metadata set as a user.e2b.* xattr inside the sandbox is read back', async () => {
  await sbx.files.write('xattr.txt', 'content')
  const r = await sbx.commands.run(`python3 -c "import os; os.setxattr('/home/user/xattr.txt', 'user.e2b.author', b'mish')"`)
  assert.equal(r.exitCode, 0)
  assert.deepEqual((await sbx.files.getInfo('xattr.txt')).metadata, { author: 'mish' })
})

test('watch events carry the entry with includeEntry; allowNetworkMounts watches as usual', async () => {
  await sbx.files.makeDir('watched06')
  await sbx.files.write('watched06/f.txt', 'one')
  const events = []
  const w = await sbx.files.watchDir('watched06', (e) => events.push(e), { includeEntry: true })
  await sbx.files.write('watched06/f.txt', 'two, longer')
  const ev = await waitFor(() => events.find((e) => e.name === 'f.txt' && e.type === FilesystemEventType.WRITE))
  assert.equal(ev.entry?.path, '/home/user/watched06/f.txt')
  assert.equal(ev.entry?.type, FileType.FILE)
  await w.stop()

  const seen = []
  const w2 = await sbx.files.watchDir('watched06', (e) => seen.push(e), { allowNetworkMounts: true })
  await sbx.files.write('watched06/g.txt', 'new')
  await waitFor(() => seen.some((e) => e.name === 'g.txt' && e.type === FilesystemEventType.CREATE))
  await w2.stop()
})

test('metrics: a sample of now with memory, CPU and disk', async () => {
  const start = new Date(Date.now() - 1000)
  const [m, ...rest] = await sbx.getMetrics()
  assert.equal(rest.length, 0)
  assert.ok(m.timestamp >= start && m.timestamp <= new Date(Date.now() + 1000), `timestamp ${m.timestamp}`)
  assert.ok(m.cpuCount >= 1 && m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100, JSON.stringify(m))
  assert.ok(m.memTotal > 0 && m.memUsed > 0 && m.memUsed <= m.memTotal, JSON.stringify(m))
  assert.ok(m.diskTotal > 0 && m.diskUsed > 0 && m.diskUsed <= m.diskTotal, JSON.stringify(m))
  const old = await sbx.getMetrics({ start: new Date(Date.now() - 3600_000), end: new Date(Date.now() - 1800_000) })
  assert.deepEqual(old, [])
})
