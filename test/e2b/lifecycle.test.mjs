import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError, AuthenticationError, SandboxError, TimeoutError } from 'e2b'
import { create, killAll, runId, sleep, waitFor } from './helpers.mjs'

after(killAll)

test('create, info, connect, kill', async () => {
  const sbx = await create({ metadata: { role: 'lifecycle', 'with space': 'a&b=c' }, envs: { GREETING: 'hi' } })
  assert.match(sbx.sandboxId, /^sb-/)
  assert.equal(await sbx.isRunning(), true)
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.templateId, 'base')
  assert.equal(info.state, 'running')
  assert.deepEqual(info.metadata, { suite: runId, role: 'lifecycle', 'with space': 'a&b=c' })
  assert.ok(info.endAt > info.startedAt)
  assert.ok(info.cpuCount >= 1 && info.memoryMB > 0)
  assert.ok(info.envdVersion >= '0.4.0')
  // Environment variables from create reach commands.
  assert.equal((await sbx.commands.run('echo $GREETING')).stdout, 'hi\n')
  // Connect by ID gives a working handle.
  const again = await Sandbox.connect(sbx.sandboxId)
  assert.equal((await again.commands.run('echo same')).stdout, 'same\n')
  assert.equal(await sbx.kill(), true)
  assert.equal(await sbx.isRunning(), false)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), SandboxNotFoundError)
  await assert.rejects(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError)
})

test('template names a dsec image; unknown templates fail', async () => {
  const sbx = await create({ template: 'debian' })
  assert.equal((await sbx.getInfo()).templateId, 'debian')
  // An image without bash (the SDK runs everything with /bin/bash) gets /bin/sh.
  const bb = await create({ template: 'busybox' })
  assert.equal((await bb.commands.run('echo $0')).stdout, '/bin/sh\n')
  await assert.rejects(Sandbox.create('no-such-template'), SandboxError)
})

test('errors: bad API key, unknown sandbox, dead sandbox', async () => {
  await assert.rejects(Sandbox.create({ apiKey: 'e2b_wrong' }), AuthenticationError)
  await assert.rejects(Sandbox.list({ apiKey: 'wrong' }).nextItems(), AuthenticationError)
  await assert.rejects(Sandbox.getInfo('sb-0000000000000000.nowhere'), SandboxNotFoundError)
  const sbx = await create()
  await sbx.kill()
  // envd routes of a dead sandbox answer as E2B's proxy does.
  assert.equal(await sbx.isRunning(), false)
  await assert.rejects(sbx.commands.run('true'), SandboxNotFoundError)
  await assert.rejects(sbx.files.read('/etc/hostname'), TimeoutError)
  await assert.rejects(sbx.files.list('/'), TimeoutError)
})

test('timeout kills; setTimeout moves the deadline', async () => {
  const short = await create({ timeoutMs: 2000 })
  const kept = await create({ timeoutMs: 2000 })
  await kept.setTimeout(30_000)
  const endAt = (await kept.getInfo()).endAt
  assert.ok(endAt.getTime() - Date.now() > 20_000, `endAt ${endAt}`)
  await waitFor(async () => !(await short.isRunning()), 10_000)
  await assert.rejects(short.getInfo(), SandboxNotFoundError)
  assert.equal(await kept.isRunning(), true)
})

test('lifecycle onTimeout pause: paused at the deadline, connect resumes with state kept', async () => {
  const sbx = await create({ timeoutMs: 2000, lifecycle: { onTimeout: 'pause' } })
  await sbx.files.write('/root/kept.txt', 'still here')
  assert.equal((await sbx.getInfo()).lifecycle?.onTimeout, 'pause')
  await waitFor(async () => (await sbx.getInfo()).state === 'paused', 10_000)
  assert.equal(await sbx.isRunning(), false)
  const back = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
  assert.equal((await back.getInfo()).state, 'running')
  assert.equal(await back.files.read('/root/kept.txt'), 'still here')
})

test('pause and resume', async () => {
  const sbx = await create()
  const bg = await sbx.commands.run('n=0; while true; do n=$((n+1)); echo $n > /tmp/count; sleep 0.05; done', { background: true, timeoutMs: 0 })
  await sleep(300)
  assert.equal(await sbx.pause(), true)
  assert.equal((await sbx.getInfo()).state, 'paused')
  assert.equal(await sbx.isRunning(), false)
  assert.equal(await sbx.pause(), false) // already paused
  await assert.rejects(sbx.commands.run('true'), SandboxNotFoundError)
  await sbx.connect()
  assert.equal(await sbx.isRunning(), true)
  const a = Number((await sbx.files.read('/tmp/count')).trim())
  await sleep(300)
  const b = Number((await sbx.files.read('/tmp/count')).trim())
  assert.ok(b > a, `the background loop runs again after resume (${a} -> ${b})`)
  await bg.kill()
})

test('list with metadata and state filters, paging', async () => {
  const tag = `list-${Date.now()}`
  const boxes = await Promise.all([0, 1, 2].map((i) => create({ metadata: { group: tag, idx: String(i) } })))
  await boxes[0].pause()
  const all = await Sandbox.list({ query: { metadata: { group: tag } } }).nextItems()
  assert.deepEqual(all.map((s) => s.sandboxId).sort(), boxes.map((b) => b.sandboxId).sort())
  assert.ok(all.every((s) => s.metadata.group === tag && s.templateId === 'base'))
  const paused = await Sandbox.list({ query: { metadata: { group: tag }, state: ['paused'] } }).nextItems()
  assert.deepEqual(paused.map((s) => s.sandboxId), [boxes[0].sandboxId])
  const running = await Sandbox.list({ query: { metadata: { group: tag, idx: '2' }, state: ['running'] } }).nextItems()
  assert.deepEqual(running.map((s) => s.sandboxId), [boxes[2].sandboxId])
  const pager = Sandbox.list({ query: { metadata: { group: tag } }, limit: 2 })
  const first = await pager.nextItems()
  assert.equal(first.length, 2)
  assert.equal(pager.hasNext, true)
  const second = await pager.nextItems()
  assert.equal(second.length, 1)
  assert.equal(pager.hasNext, false)
  assert.equal(new Set([...first, ...second].map((s) => s.sandboxId)).size, 3)
})
