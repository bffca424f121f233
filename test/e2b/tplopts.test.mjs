// Template build options through the unmodified e2b SDK: skipCache (the
// build's and a step's) rebuilds what the cache holds; cpuCount and memoryMB
// are the limits of the build's RUN sandboxes and the defaults of the
// sandboxes created from the template.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Template } from 'e2b'
import { create, killAll, runId, sleep } from './helpers.mjs'

const alias = `tplopts-${process.pid}-${Date.now() % 100000}`
const token = process.env.E2B_API_KEY.replace(/^e2b_/, '')

after(killAll)

// The template's stamps: each RUN writes a nanosecond time, so a rebuilt
// step has a new one and a cached step its old one.
const stamped = () =>
  Template()
    .fromTemplate('debian')
    .runCmd(`echo ${runId} > /run-id; date +%s%N > /stamp1`)
const stamps = async (name) => {
  const sbx = await create({ template: name })
  const out = (await sbx.commands.run('cat /stamp1; cat /stamp2 2>/dev/null || true', { user: 'root' })).stdout
  await sbx.kill()
  return out.trim().split('\n')
}

test('skipCache rebuilds every step; a step skipCache rebuilds from that step on', async () => {
  const name = `${alias}-cache`
  const tpl = () => stamped().skipCache().runCmd('date +%s%N > /stamp2')
  await Template.build(stamped().runCmd('date +%s%N > /stamp2'), name)
  const [a1, a2] = await stamps(name)

  // Same steps again: both from the cache.
  await Template.build(stamped().runCmd('date +%s%N > /stamp2'), name)
  assert.deepEqual(await stamps(name), [a1, a2], 'a rebuild of the same steps used the cache')

  // skipCache before the second step: the first from the cache, the second rebuilt.
  await Template.build(tpl(), name)
  const [b1, b2] = await stamps(name)
  assert.equal(b1, a1, 'the step before skipCache came from the cache')
  assert.notEqual(b2, a2, 'the step after skipCache was rebuilt')

  // Template.build's skipCache: every step rebuilt.
  await Template.build(stamped().runCmd('date +%s%N > /stamp2'), name, { skipCache: true })
  const [c1, c2] = await stamps(name)
  assert.notEqual(c1, a1, 'skipCache: the first step rebuilt')
  assert.notEqual(c2, a2, 'skipCache: the second step rebuilt')
})

// The sandboxes a build runs (GET /v1/sandboxes: the node's view) labelled
// with the template they build.
async function buildSandboxes(name) {
  const r = await fetch(`${process.env.E2B_API_URL}/v1/sandboxes`, { headers: { Authorization: `Bearer ${token}` } })
  assert.equal(r.status, 200, await r.clone().text())
  const body = await r.json()
  const list = Array.isArray(body) ? body : (body.sandboxes ?? [])
  return list.filter((s) => s.labels?.['dsec.build'] === name)
}

test("cpuCount and memoryMB: the build's RUN sandboxes and the template's sandboxes have them", async () => {
  const name = `${alias}-res`
  const tpl = Template()
    .fromTemplate('debian')
    .runCmd(`echo ${runId}; sleep 6`)
  let seen
  const watch = (async () => {
    for (let i = 0; i < 300 && !seen; i++) {
      const sbs = await buildSandboxes(name)
      if (sbs.length > 0) seen = sbs[0]
      else await sleep(100)
    }
  })()
  await Template.build(tpl, name, { cpuCount: 2, memoryMB: 768 })
  await watch
  assert.ok(seen, 'no build sandbox seen while the RUN slept')
  assert.equal(seen.cpu, 2, `build sandbox ${JSON.stringify(seen)}`)
  assert.equal(seen.memory_bytes, 768 * 1024 * 1024, `build sandbox ${JSON.stringify(seen)}`)

  const sbx = await create({ template: name })
  const info = await sbx.getInfo()
  assert.equal(info.cpuCount, 2)
  assert.equal(info.memoryMB, 768)
})

test('a cpuCount or memoryMB out of range is refused', async () => {
  await assert.rejects(Template.build(Template().fromTemplate('debian'), `${alias}-bad`, { memoryMB: 1 }), /memoryMB/)
})
