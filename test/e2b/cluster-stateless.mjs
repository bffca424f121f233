// Run by internal/cluster/clustere2e (TestE2BStatelessAPIServers): the e2b SDK
// against two API servers of a cluster behind a proxy that sends each call to
// either one at random. DSEC_TEST_CONTROL is the proxy's address: its /_test/
// calls say which API server served a call and kill or start one.
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { sleep, waitFor } from './helpers.mjs'

const ctl = process.env.DSEC_TEST_CONTROL
if (!ctl) throw new Error('DSEC_TEST_CONTROL must be set (run by the cluster test)')

async function control(op, i) {
  const r = await fetch(`${ctl}/_test/${op}?i=${i}`, { method: 'POST' })
  if (!r.ok) throw new Error(`${op} ${i}: ${r.status} ${await r.text()}`)
}

async function servedBy(re) {
  const r = await fetch(`${ctl}/_test/served?re=${encodeURIComponent(re)}`)
  if (!r.ok) throw new Error(`served ${re}: ${r.status} ${await r.text()}`)
  return Number(await r.text())
}

const gone = async (id) => {
  try {
    await Sandbox.getInfo(id)
    return false
  } catch (err) {
    if (/not found/i.test(String(err))) return true
    throw err
  }
}

// A setTimeout through one API server holds after that API server died: the
// sandbox outlives the 4 s it was created with and ends at the new deadline.
{
  // A sandbox whose setTimeout went to the API server that created it does
  // not tell: try again with a new one.
  let sbx, creator, setter, t0
  for (let i = 0; ; i++) {
    assert.ok(i < 20, 'no setTimeout reached the other API server')
    sbx = await Sandbox.create({ timeoutMs: 4_000 })
    creator = await servedBy('^POST /(v2/)?sandboxes$')
    t0 = Date.now()
    await sbx.setTimeout(12_000)
    setter = await servedBy(`^POST /sandboxes/${sbx.sandboxId}/timeout$`)
    if (setter !== creator) break
    await sbx.kill()
  }
  console.log(`created through API server ${creator}, setTimeout through ${setter}; killing ${setter}`)
  await control('kill', setter)
  await sleep(Math.max(0, t0 + 7_000 - Date.now()))
  assert.equal(await gone(sbx.sandboxId), false, 'the sandbox ended at the deadline it was created with')
  const info = await Sandbox.getInfo(sbx.sandboxId)
  assert.ok(Math.abs(info.endAt.getTime() - (t0 + 12_000)) < 3_000, `endAt ${info.endAt.toISOString()}`)
  await waitFor(() => gone(sbx.sandboxId), t0 + 20_000 - Date.now(), 250)
  assert.ok(Date.now() > t0 + 11_000, 'the sandbox ended before its new deadline')
  await control('start', setter)
}

// A process belongs to the sandbox's node, not to the API server that started
// it: with that API server killed, the process is still listed, connectable,
// fed and killable through the other one, and again through both once the
// killed one is back (it starts knowing nothing).
{
  const sbx = await Sandbox.create({ timeoutMs: 120_000 })
  const h = await sbx.commands.run('i=0; while true; do i=$((i+1)); echo tick-$i; sleep 0.2; done', { background: true })
  h.wait().catch(() => {}) // its stream goes with the API server
  const starter = await servedBy('^POST /process.Process/Start$')
  console.log(`process ${h.pid} started through API server ${starter}; killing ${starter}`)
  await control('kill', starter)
  assert.ok((await sbx.commands.list()).some((p) => p.pid === h.pid), 'not listed through the other API server')
  const chunks = []
  const c = await sbx.commands.connect(h.pid, { onStdout: (d) => chunks.push(d) })
  c.wait().catch(() => {})
  await waitFor(() => chunks.join('').includes('tick-'), 10_000)
  await control('start', starter)
  for (let i = 0; i < 6; i++) {
    assert.ok((await sbx.commands.list()).some((p) => p.pid === h.pid), `not listed (call ${i})`)
  }
  const cat = await sbx.commands.run('cat', { background: true, stdin: true })
  const out = []
  const cc = await sbx.commands.connect(cat.pid, { onStdout: (d) => out.push(d) })
  await sbx.commands.sendStdin(cat.pid, 'one\n')
  await sbx.commands.sendStdin(cat.pid, 'two\n')
  await waitFor(() => out.join('') === 'one\ntwo\n', 10_000)
  assert.equal(await sbx.commands.kill(cat.pid), true)
  await cc.wait().catch(() => {})
  assert.equal(await sbx.commands.kill(h.pid), true)
  await waitFor(async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid), 10_000)
  assert.equal(await sbx.commands.kill(h.pid), false)
  await sbx.kill()
}
// Snapshots and forks are the cluster's, not an API server's: a snapshot made
// through an API server that is then killed is listed, created from and
// deleted through the other, and a fork through either gives running children.
{
  const src = await Sandbox.create({ timeoutMs: 120_000 })
  await src.files.write('/opt/snap.txt', 'kept')
  const snap = await src.createSnapshot({ name: `stateless-${process.pid}` })
  const maker = await servedBy(`^POST /sandboxes/${src.sandboxId}/snapshots$`)
  console.log(`snapshot ${snap.snapshotId} made through API server ${maker}; killing ${maker}`)
  await control('kill', maker)
  assert.ok((await src.listSnapshots().nextItems()).some((s) => s.snapshotId === snap.snapshotId), 'snapshot not listed')
  const from = await Sandbox.create(snap.snapshotId, { timeoutMs: 60_000 })
  assert.equal(await from.files.read('/opt/snap.txt'), 'kept')
  await assert.rejects(Sandbox.deleteSnapshot(snap.snapshotId), /409/)
  await control('start', maker)
  const forks = await src.fork({ count: 2, timeoutMs: 60_000 })
  assert.equal(forks.length, 2)
  for (const f of forks) {
    assert.ok(f instanceof Sandbox, String(f))
    assert.equal(await f.files.read('/opt/snap.txt'), 'kept')
    await f.kill()
  }
  await from.kill()
  await src.kill()
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
}
console.log('ok')
