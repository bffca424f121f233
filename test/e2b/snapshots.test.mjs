// Snapshots and fork through the unmodified e2b SDK: a snapshot keeps the
// sandbox's files (not its processes), outlives it, is listed, and is deleted
// once no sandbox runs on it; a fork gives running children with the
// parent's files. Bad input gets E2B's errors and changes nothing.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, SandboxError, SandboxNotFoundError } from 'e2b'
import { create, killAll, runId } from './helpers.mjs'

after(killAll)

const ours = async () => (await Sandbox.list({ query: { metadata: { suite: runId } } }).nextItems()).map((s) => s.sandboxId).sort()

// listed says whether the snapshot list (with opts' filters) has snapshot id.
async function listed(id, opts = {}) {
  const p = Sandbox.listSnapshots(opts)
  while (p.hasNext) {
    if ((await p.nextItems()).some((s) => s.snapshotId === id)) return true
  }
  return false
}

// sleeps counts the "sleep 3600" running in a sandbox, read from /proc.
const sleeps = async (s) =>
  (await s.commands.run(`for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 3600' || true`)).stdout.trim()

test('a snapshot keeps files, not processes, and outlives its sandbox', async () => {
  const src = await create()
  await src.files.write('/opt/app/config.json', '{"env": "test"}')
  await src.commands.run('mkdir -p /opt/app/data && echo important > /opt/app/data/f.txt && rm /etc/debian_version', { user: 'root' })
  const bg = await src.commands.run('sleep 3600', { background: true })
  assert.equal(await sleeps(src), '1')

  const snap = await src.createSnapshot()
  assert.match(snap.snapshotId, /^e2b-snap-/)
  assert.deepEqual(snap.names, [])
  // The source runs on, its process too.
  assert.equal(await src.isRunning(), true)
  assert.ok((await src.commands.list()).some((p) => p.pid === bg.pid))
  await src.kill()

  const a = await create({ template: snap.snapshotId })
  const b = await create({ template: snap.snapshotId })
  assert.equal((await a.getInfo()).templateId, snap.snapshotId)
  for (const s of [a, b]) {
    assert.equal(await s.files.read('/opt/app/config.json'), '{"env": "test"}')
    assert.equal(await s.files.read('/opt/app/data/f.txt'), 'important\n')
    assert.equal(await s.files.exists('/etc/debian_version'), false)
    // Processes are not kept: nothing but what this sandbox started.
    assert.deepEqual(await s.commands.list(), [])
    assert.equal(await sleeps(s), '0')
  }
  // Sandboxes from one snapshot are independent.
  await a.files.write('/opt/app/config.json', 'changed in a')
  assert.equal(await b.files.read('/opt/app/config.json'), '{"env": "test"}')

  // In use: deleting is refused and changes nothing.
  await assert.rejects(Sandbox.deleteSnapshot(snap.snapshotId), (err) => err instanceof SandboxError && /409/.test(err.message) && /in use/.test(err.message))
  assert.equal(await listed(snap.snapshotId), true)
  await a.kill()
  await b.kill()
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
  assert.equal(await listed(snap.snapshotId), false)
  await assert.rejects(Sandbox.create(snap.snapshotId), SandboxError)
})

test('snapshots are listed by sandbox and by name', async () => {
  const sbx = await create()
  const other = await create()
  const name = `snap-${process.pid}`
  const named = await sbx.createSnapshot({ name })
  const plain = await sbx.createSnapshot()
  const others = await other.createSnapshot()
  try {
    assert.deepEqual(named.names, [name])
    for (const s of [named, plain, others]) assert.equal(await listed(s.snapshotId), true)
    // The instance's list is its own snapshots.
    const mine = (await sbx.listSnapshots().nextItems()).map((s) => s.snapshotId).sort()
    assert.deepEqual(mine, [named.snapshotId, plain.snapshotId].sort())
    const byName = await Sandbox.listSnapshots({ name }).nextItems()
    assert.deepEqual(byName, [{ snapshotId: named.snapshotId, names: [name] }])
    assert.deepEqual(await Sandbox.listSnapshots({ name: `${name}-does-not-exist` }).nextItems(), [])
    // Pages of one reach every snapshot.
    const p = Sandbox.listSnapshots({ sandboxId: sbx.sandboxId, limit: 1 })
    const seen = []
    while (p.hasNext) seen.push(...(await p.nextItems()).map((s) => s.snapshotId))
    assert.deepEqual(seen.sort(), mine)
    // The same name again from the same sandbox is refused.
    await assert.rejects(sbx.createSnapshot({ name }), (err) => err instanceof SandboxError && /409/.test(err.message))
  } finally {
    for (const s of [named, plain, others]) await Sandbox.deleteSnapshot(s.snapshotId)
  }
})

test('fork: running children with the parent files, independent of it', async () => {
  const parent = await create({ timeoutMs: 120_000 })
  await parent.files.write('/opt/state.txt', 'state before fork')
  const forks = await parent.fork()
  assert.equal(forks.length, 1)
  const [child] = forks
  assert.ok(child instanceof Sandbox, String(child))
  try {
    assert.notEqual(child.sandboxId, parent.sandboxId)
    assert.equal(await parent.isRunning(), true)
    assert.equal(await child.isRunning(), true)
    assert.equal(await child.files.read('/opt/state.txt'), 'state before fork')
    await child.files.write('/opt/state.txt', 'modified in fork')
    assert.equal(await parent.files.read('/opt/state.txt'), 'state before fork')
    // A child inherits the parent's template and metadata.
    const info = await child.getInfo()
    assert.equal(info.templateId, 'base')
    assert.equal(info.metadata.suite, runId)
  } finally {
    await child.kill()
  }

  const two = await Sandbox.fork(parent.sandboxId, { count: 2, timeoutMs: 60_000 })
  assert.equal(two.length, 2)
  try {
    const ids = new Set(two.map((s) => s.sandboxId))
    assert.equal(ids.size, 2)
    assert.ok(!ids.has(parent.sandboxId))
    for (const s of two) {
      assert.ok(s instanceof Sandbox)
      assert.equal((await s.commands.run('cat /opt/state.txt')).stdout, 'state before fork')
      const end = (await s.getInfo()).endAt.getTime() - Date.now()
      assert.ok(end > 30_000 && end <= 61_000, `fork timeout: ends in ${end} ms`)
    }
  } finally {
    await Promise.all(two.map((s) => s.kill()))
  }
})

test('a filesystem-only pause ends the processes, keeps the files and boots afresh', async () => {
  const sbx = await create()
  await sbx.commands.run('mkdir -p /opt/kept && echo important > /opt/kept/f.txt', { user: 'root' })
  await sbx.commands.run('sleep 3600', { background: true })
  const bootId = async (s) => (await s.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout.trim()
  assert.equal(await sleeps(sbx), '1')
  const boot = await bootId(sbx)

  await sbx.pause({ keepMemory: false })
  assert.equal(await sbx.isRunning(), false)
  const again = await Sandbox.connect(sbx.sandboxId)
  assert.equal(again.sandboxId, sbx.sandboxId)
  assert.equal((await again.files.read('/opt/kept/f.txt')).trim(), 'important')
  assert.equal(await sleeps(again), '0')
  assert.notEqual(await bootId(again), boot)

  // Asked for at the deadline too.
  const auto = await Sandbox.create({ metadata: { suite: runId }, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
  assert.equal(await auto.isRunning(), true)
  await auto.kill()
})

test('bad input: E2B errors and nothing changes', async () => {
  const sbx = await create()
  const before = await ours()
  const snapsBefore = (await Sandbox.listSnapshots().nextItems()).length
  // Fork count 0, and over the node's maximum.
  await assert.rejects(sbx.fork({ count: 0 }), (err) => err instanceof SandboxError && /^400: count must be at least 1/.test(err.message))
  await assert.rejects(sbx.fork({ count: 100_000 }), (err) => err instanceof SandboxError && /^400: .*max-fork/.test(err.message))
  // Unknown or dead sandboxes, unknown snapshots, bad names.
  const dead = await create()
  await dead.kill()
  await assert.rejects(dead.fork(), SandboxNotFoundError)
  await assert.rejects(dead.createSnapshot(), SandboxNotFoundError)
  await assert.rejects(Sandbox.create('e2b-snap-0123456789abcdef-00000000'), SandboxError)
  assert.equal(await Sandbox.deleteSnapshot('e2b-snap-0123456789abcdef-00000000'), false)
  assert.equal(await Sandbox.deleteSnapshot('base'), false)
  await assert.rejects(sbx.createSnapshot({ name: 'Not A Name' }), (err) => err instanceof SandboxError && /^400: snapshot name/.test(err.message))
  assert.deepEqual(await ours(), before)
  assert.equal((await Sandbox.listSnapshots().nextItems()).length, snapsBefore)
  assert.equal(await sbx.isRunning(), true)
})
